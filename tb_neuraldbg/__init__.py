"""tb_neuraldbg: find the first failing layer of a PyTorch training run.

Public face only. ``DebugWriter`` and ``checks`` (need torch) and ``diagnose`` are imported
lazily so that the TensorBoard plugin and the report CLI load without torch.
"""

__version__ = "0.1.0"
__all__ = ["DebugWriter", "diagnose", "checks", "__version__"]


def __getattr__(name):
    if name == "DebugWriter":
        from .writer import DebugWriter

        return DebugWriter
    if name == "diagnose":
        from .diagnosis import diagnose

        return diagnose
    if name == "checks":
        import importlib

        return importlib.import_module(".checks", __name__)
    raise AttributeError(f"module 'tb_neuraldbg' has no attribute {name!r}")
