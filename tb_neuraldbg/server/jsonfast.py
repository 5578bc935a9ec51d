"""JSON text for responses holding large numpy arrays, fast.

``json.dumps`` of a two-million-cell heatmap takes over a second (plus as
long again for TensorBoard's ``json_util.Cleanse`` walk). Here float arrays
longer than a few thousand values are formatted by numpy in one vectorized
pass: every finite non-zero value
as a fixed-width ``[-]ddddddddde[+-]XX`` token with 9 significant digits
(enough to read back the exact float32 value: ``Math.fround`` /
``np.float32`` of the parsed number is the stored value), NaN and +-Inf as
the strings TensorBoard uses elsewhere (``"NaN"``, ``"Infinity"``,
``"-Infinity"``), padded with JSON whitespace. Everything else goes through
``json.dumps`` with the same non-finite convention. ``Base64Text`` (base64
of raw bytes) is written as is. ``encode`` gives the ASCII bytes of the
answer, ``dumps`` the same as text.
"""

from __future__ import annotations

import binascii
import json
import math
from typing import Any

import numpy as np

__all__ = ["Base64Text", "dumps", "encode"]

_DIGITS = 9
_SMALL = 4096  # up to this many values, the readable (slower) path
_WIDTH = 15  # sign, 9 digits, "e", exponent sign, 2 exponent digits, ","
_SPECIAL = {
    "nan": b'"NaN"',
    "posinf": b'"Infinity"',
    "neginf": b'"-Infinity"',
    "zero": b"0",
    "negzero": b"-0.0",
}


class Base64Text:
    """The base64 text of some bytes: a JSON string that needs no escapes,
    so ``encode`` copies it into the answer as is (``json.dumps`` would
    scan and copy megabytes for nothing)."""

    __slots__ = ("ascii",)

    def __init__(self, data):
        """``data``: bytes or any C-contiguous buffer (a numpy array)."""
        self.ascii = binascii.b2a_base64(data, newline=False)


def _float_array(values: np.ndarray) -> bytes:
    """JSON array text (ASCII) of a float array (flattened, row-major)."""
    x = np.asarray(values, dtype=np.float32).ravel()
    n = x.shape[0]
    if n <= _SMALL:
        # Small arrays: numpy's shortest float32 text ("0.01", not 9 digits).
        return ("[" + ",".join(_scalar_f32(v) for v in x) + "]").encode("ascii")
    out = np.full((n, _WIDTH), ord(" "), dtype=np.uint8)
    out[:, -1] = ord(",")
    finite = np.isfinite(x)
    regular = finite & (x != 0)
    a = np.abs(np.where(regular, x, 1).astype(np.float64))
    # m = round(a / 10**(e - 8)) has exactly 9 digits; float64 holds it exactly
    # and the division is within an ulp, far below float32 resolution.
    e = np.floor(np.log10(a)).astype(np.int64)
    shift = e - (_DIGITS - 1)
    m = np.rint(_scale(a, -shift)).astype(np.int64)
    # log10 may be off by one at exact powers of ten; renormalise both ways.
    hi = m >= 10**_DIGITS
    if hi.any():
        shift[hi] += 1
        m[hi] = np.rint(_scale(a[hi], -shift[hi])).astype(np.int64)
    lo = m < 10 ** (_DIGITS - 1)
    if lo.any():
        shift[lo] -= 1
        m[lo] = np.rint(_scale(a[lo], -shift[lo])).astype(np.int64)
    out[:, 0] = np.where(x < 0, ord("-"), ord(" "))
    # Digits right to left; int32 (m < 10**9 fits) divides about 3x faster.
    rest = m.astype(np.int32)
    for k in range(_DIGITS):
        quot = rest // 10
        out[:, _DIGITS - k] = rest - quot * 10 + ord("0")
        rest = quot
    out[:, _DIGITS + 1] = ord("e")
    out[:, _DIGITS + 2] = np.where(shift < 0, ord("-"), ord("+"))
    ex = np.abs(shift)
    out[:, _DIGITS + 3] = ord("0") + ex // 10
    out[:, _DIGITS + 4] = ord("0") + ex % 10
    for name, mask in (
        ("zero", (x == 0) & ~np.signbit(x)),
        ("negzero", (x == 0) & np.signbit(x)),
        ("nan", np.isnan(x)),
        ("posinf", np.isposinf(x)),
        ("neginf", np.isneginf(x)),
    ):
        if mask.any():
            token = np.frombuffer(_SPECIAL[name].ljust(_WIDTH - 1), dtype=np.uint8)
            out[mask, : _WIDTH - 1] = token
    out[-1, -1] = ord("]")
    return b"[" + out.tobytes()


def _scale(a: np.ndarray, power: np.ndarray) -> np.ndarray:
    """a * 10**power, dividing for negative powers (10**k is exact for k <= 22,
    so each result is one correctly rounded operation)."""
    p = np.abs(power).astype(np.float64)
    factor = np.power(10.0, p)
    return np.where(power >= 0, a * factor, a / factor)


def _scalar_f32(value: np.float32) -> str:
    if np.isfinite(value):
        return str(value)  # shortest text that reads back as this float32
    return _scalar(float(value))


def _scalar(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return '"NaN"' if math.isnan(value) else ('"Infinity"' if value > 0 else '"-Infinity"')
    return json.dumps(value)


def encode(obj: Any) -> bytes:
    """``dumps(obj)`` as ASCII bytes, each large part copied once (the answer
    of a big heatmap is tens of MB)."""
    parts: list = []
    _encode(obj, parts)
    return b"".join(parts)


def dumps(obj: Any) -> str:
    """JSON text of ``obj``: dicts, lists, tuples, scalars, numpy arrays
    (float arrays as above, integer/bool arrays as plain lists) and
    ``Base64Text``."""
    return encode(obj).decode("ascii")


def _encode(obj: Any, parts: list) -> None:
    if isinstance(obj, Base64Text):
        parts += (b'"', obj.ascii, b'"')
    elif isinstance(obj, np.ndarray):
        if obj.dtype.kind == "f":
            parts.append(_float_array(obj))
        else:
            parts.append(json.dumps(obj.ravel().tolist()).encode("ascii"))
    elif isinstance(obj, dict):
        parts.append(b"{")
        for i, (k, v) in enumerate(obj.items()):
            parts.append((("," if i else "") + json.dumps(str(k)) + ":").encode("ascii"))
            _encode(v, parts)
        parts.append(b"}")
    elif isinstance(obj, (list, tuple)):
        parts.append(b"[")
        for i, v in enumerate(obj):
            if i:
                parts.append(b",")
            _encode(v, parts)
        parts.append(b"]")
    elif isinstance(obj, np.generic):
        parts.append(_scalar(obj.item()).encode("ascii"))
    else:
        parts.append(_scalar(obj).encode("ascii"))
