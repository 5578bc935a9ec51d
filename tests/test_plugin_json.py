"""tb_neuraldbg.server.jsonfast: valid JSON, exact float32 values, TensorBoard's
non-finite strings, on both the small (readable) and the large (vectorized) path."""

import base64
import json

import numpy as np
import pytest

from tb_neuraldbg.server import jsonfast

SPECIAL = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}


def parse_floats(text):
    return np.array([SPECIAL.get(x, x) if isinstance(x, str) else x for x in json.loads(text)],
                    dtype=np.float64).astype(np.float32)


def edge_values():
    f = np.finfo(np.float32)
    return np.array([0.0, -0.0, 1.0, -1.0, 0.1, 0.01, 1e-3, 9.999999e-5, 123456789.0,
                     f.max, -f.max, f.tiny, f.smallest_subnormal, 1e10, 1e-10,
                     np.nan, np.inf, -np.inf, 0.3, 2.5e-7, 999999999.0, 1e9],
                    dtype=np.float32)


@pytest.mark.parametrize("n", [len(edge_values()), 5000, 50_000])
def test_float_arrays_read_back_exactly(n):
    rng = np.random.default_rng(n)
    x = (10.0 ** rng.uniform(-44, 38, n)).astype(np.float32) * rng.choice([-1, 1], n)
    x[: len(edge_values())] = edge_values()
    text = jsonfast.dumps(x)
    back = parse_floats(text)
    np.testing.assert_array_equal(back, x)  # NaN == NaN here
    assert np.array_equal(np.signbit(back[np.isfinite(x)]), np.signbit(x[np.isfinite(x)]))


def test_small_arrays_use_shortest_text():
    assert jsonfast.dumps(np.array([0.01, 1.5, 3, np.nan], np.float32)) == '[0.01,1.5,3.0,"NaN"]'


def test_large_arrays_are_valid_strict_json():
    x = np.linspace(-5, 5, 10_000, dtype=np.float32)
    x[::7] = np.nan
    text = jsonfast.dumps({"v": x})

    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")

    parsed = json.loads(text, parse_constant=refuse)
    assert len(parsed["v"]) == 10_000


def test_nested_objects_and_scalars():
    obj = {"a": [1, 2.5, None, True, "x\u2028<b>"], "b": float("-inf"), "c": np.int64(7),
           "d": np.arange(3, dtype=np.uint8), "e": (np.float32(0.25),), "f": np.zeros((2, 2))}
    assert json.loads(jsonfast.dumps(obj)) == {
        "a": [1, 2.5, None, True, "x\u2028<b>"], "b": "-Infinity", "c": 7,
        "d": [0, 1, 2], "e": [0.25], "f": [0.0, 0.0, 0.0, 0.0]}


def test_empty_array():
    assert jsonfast.dumps(np.zeros(0, np.float32)) == "[]"


def test_base64_text_is_written_as_the_same_json_string():
    raw = np.array([1.5, np.nan, -np.inf, 3e-40], "<f4")
    obj = {"v": jsonfast.Base64Text(raw), "s": jsonfast.Base64Text(b""), "n": [1, {"x": None}]}
    text = jsonfast.dumps(obj)
    parsed = json.loads(text)
    assert parsed == {"v": base64.b64encode(raw.tobytes()).decode(), "s": "", "n": [1, {"x": None}]}
    assert text == json.dumps(parsed, separators=(",", ":"))
    assert jsonfast.encode(obj) == text.encode("ascii")
