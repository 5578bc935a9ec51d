"""The masked CRC32C of event-file records, in C where it can be.

Every record of an event file (TFRecord framing) carries two masked CRC32C
checksums. Without TensorFlow, TensorBoard computes them in pure Python, a
byte at a time (hundreds of times slower than ``google-crc32c``'s C code),
on the event writer's thread, holding the GIL that the training thread
needs, and again in every reader.

:func:`masked_crc` is the checksum here; :func:`use_fast_crc` swaps the C
version into TensorBoard's own writer and reader. The C version gives
bit-identical checksums, so the swap changes nothing but speed; without
``google-crc32c`` (or with only its pure-Python fallback) TensorBoard's code
is left alone.
"""

from __future__ import annotations

__all__ = ["masked_crc", "FAST", "use_fast_crc"]

_MASK_DELTA = 0xA282EAD8


def _stub_crc(data: bytes) -> int:
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub

    return stub.masked_crc32c(data)


def _fast_crc():
    try:
        import google_crc32c
    except ImportError:
        return None
    if getattr(google_crc32c, "implementation", "") != "c":
        return None
    value = google_crc32c.value

    def masked_crc(data) -> int:
        """TFRecord's masked CRC32C of ``data`` (google-crc32c's C code)."""
        x = value(bytes(data))
        return (((x >> 15) | ((x << 17) & 0xFFFFFFFF)) + _MASK_DELTA) & 0xFFFFFFFF

    return masked_crc


_FAST = _fast_crc()
#: True when the checksums are computed in C.
FAST = _FAST is not None
masked_crc = _FAST if _FAST is not None else _stub_crc


def use_fast_crc() -> bool:
    """Give TensorBoard's record writer and reader the C checksum (both bind
    the pure-Python one at import). Idempotent; returns whether the C version
    is in use. Only TensorBoard's own pure-Python function is replaced:
    anything else found there (TensorFlow's, another library's swap) stays."""
    if _FAST is None:
        return False
    try:
        from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub
        from tensorboard.summary.writer import record_writer
    except ImportError:
        return False
    original = getattr(stub, "_neuraldbg_python_crc", None) or getattr(stub, "masked_crc32c", None)
    if original is None:
        return False
    stub._neuraldbg_python_crc = original
    if stub.masked_crc32c is original:
        stub.masked_crc32c = _FAST
    if getattr(record_writer, "masked_crc32c", None) is original:
        record_writer.masked_crc32c = _FAST
    return stub.masked_crc32c is _FAST or record_writer.masked_crc32c is _FAST
