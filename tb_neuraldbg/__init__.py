"""tb_neuraldbg: find the first failing layer of a PyTorch training run.

Public face only. ``DebugWriter``, ``register_module``, ``Behaviour`` and
``checks`` (need torch) and ``diagnose`` are imported lazily so that the
TensorBoard plugin and the report CLI load without torch.

Where things are, along the data path (see ARCHITECTURE.md):
``training/`` (hooks, statistics, the writer), ``format/`` (the stored format,
imported by every side), ``diagnosis/`` (pure numpy), ``server/`` (the
TensorBoard plugin), ``offline/`` (reader and reports), ``checks/`` (the
preflight protocol), ``integrations/`` (Lightning and Hugging Face callbacks,
imported on their own).
"""

from ._version import __version__

__all__ = ["DebugWriter", "unwatch", "register_module", "Behaviour", "diagnose", "checks", "__version__"]


def __getattr__(name):
    if name in ("DebugWriter", "unwatch"):
        from .training import writer

        return getattr(writer, name)
    if name in ("register_module", "Behaviour"):
        from .training import modules

        return getattr(modules, name)
    if name == "diagnose":
        from .offline.rediagnose import diagnose

        return diagnose
    if name in ("checks", "metadata", "reader"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tb_neuraldbg' has no attribute {name!r}")
