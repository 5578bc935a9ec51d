"""plugin_data: dense stacking of per-step tensors and the bounded cache."""

import numpy as np

from tb_neuraldbg import metadata, plugin_data
from tb_neuraldbg.plugin_data import Series, _LRU, _dense, _json_series


class Point:
    def __init__(self, step, value):
        self.step, self.wall_time, self.numpy = step, 0.0, value


def series(nbytes):
    return Series(np.zeros(0, np.int64), None, nbytes)


def test_dense_pads_rows_of_a_grown_layer_list_and_sorts_steps():
    s = _dense([Point(2, np.array([3, 4, 5], np.float32)), Point(1, np.array([1, 2], np.float32))],
               np.nan, np.float32)
    assert s.steps.tolist() == [1, 2]
    np.testing.assert_array_equal(s.data, [[1, 2, np.nan], [3, 4, 5]])
    assert s.data.dtype == np.float32


def test_dense_repeated_step_keeps_the_last_and_drops_malformed():
    s = _dense([Point(0, np.array([1, 1], np.uint8)), Point(1, np.array([2, 2], np.uint8)),
                Point(1, np.array([3, 3], np.uint8)), Point(2, np.zeros((2, 2), np.uint8)),
                Point(3, np.array(b"x", dtype=object))],
               metadata.STATE_UNKNOWN, np.uint8)
    assert s.steps.tolist() == [0, 1]
    assert s.data.tolist() == [[1, 1], [3, 3]]


def test_json_series_keeps_repeated_steps_and_skips_garbage():
    s = _json_series([Point(1, np.array(b'[{"a": 1}]', dtype=object)),
                      Point(0, np.array(b"{oops", dtype=object)),
                      Point(1, np.array(b'[{"b": 2}]', dtype=object)),
                      Point(2, np.array("\xff".encode("latin-1"), dtype=object))])
    assert s.steps.tolist() == [1, 1]
    assert s.data == [[{"a": 1}], [{"b": 2}]]


def test_lru_is_bounded_and_evicts_least_recent():
    lru = _LRU(100)
    lru.put("a", 1, series(40))
    lru.put("b", 1, series(40))
    assert lru.get("a", 1) is not None  # a is now the most recent
    lru.put("c", 1, series(40))
    assert lru.get("b", 1) is None and lru.get("a", 1) is not None
    assert lru.nbytes == 80


def test_lru_new_version_replaces_the_stale_entry():
    lru = _LRU(100)
    lru.put("a", (5, 1.0), series(60))
    assert lru.get("a", (6, 2.0)) is None
    lru.put("a", (6, 2.0), series(70))
    assert lru.nbytes == 70 and lru.get("a", (6, 2.0)) is not None
    assert lru.get("a", (5, 1.0)) is None


def test_lru_does_not_keep_what_exceeds_the_budget():
    lru = _LRU(100)
    lru.put("a", 1, series(50))
    lru.put("a", 2, series(500))
    assert lru.nbytes == 0 and lru.get("a", 2) is None


def test_next_group_bounds_one_read(monkeypatch):
    big = {"x": Series(np.zeros(10), np.zeros((10, 1000), np.float32), 0)}
    tags = [(metadata.stats_tag(m), None) for m in metadata.METRICS]
    group, rest = plugin_data.PluginData._next_group(tags, {})
    assert len(group) == 1  # size unknown yet: one matrix alone
    monkeypatch.setattr(plugin_data, "_MAX_READ_BYTES", 3 * 4 * 10 * 1000)
    group, rest = plugin_data.PluginData._next_group(tags, big)
    assert len(group) == 3 and len(rest) == len(tags) - 3
    json_first = [(metadata.TAG_STATES, None), (metadata.TAG_EVENTS, None),
                  (metadata.TAG_LAYERS, None)]
    group, rest = plugin_data.PluginData._next_group(json_first, {})
    assert [t for t, _ in group] == [metadata.TAG_EVENTS, metadata.TAG_LAYERS]
