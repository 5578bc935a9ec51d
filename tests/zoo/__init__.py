"""A zoo of small Hugging Face architectures trained healthy under the
DebugWriter, and the generic faults planted in each (tests/test_model_zoo.py,
tests/zoo/probe.py)."""
