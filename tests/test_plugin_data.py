"""plugin_data: dense stacking of per-step tensors (through format.decode)
and the bounded cache."""

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.format import decode
from tb_neuraldbg.server import plugin_data
from tb_neuraldbg.server.plugin_data import Series, _LRU


class Point:
    def __init__(self, step, value):
        self.step, self.wall_time, self.numpy = step, 0.0, value


def series(nbytes):
    return Series(np.zeros(0, np.int64), None, nbytes)


def _dense(points, fill, dtype):
    """A provider's points (step, numpy) as the plugin decodes them."""
    return Series.from_rows(decode.decode_rows([p.step for p in points],
                                               [p.numpy for p in points], dtype, fill))


def _json_series(points):
    return Series.from_json(decode.decode_json([p.step for p in points],
                                               [p.numpy for p in points]))


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


# -- the Rust data server path: bulk decoding and pipelined gRPC reads -------

import grpc  # noqa: E402
from tensorboard.data import grpc_provider, provider  # noqa: E402
from tensorboard.data.proto import data_provider_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from tb_neuraldbg.server.plugin_data import PluginData  # noqa: E402


def _dense_proto(data, fill, dtype):
    """A TensorData answer of the Rust data server as the plugin decodes it (in bulk)."""
    return Series.from_rows(decode.decode_rows(data.step, data.value, dtype, fill))


def tensor_data(points):
    d = data_provider_pb2.TensorData()
    for step, value in points:
        d.step.append(step)
        d.wall_time.append(float(step))
        d.value.add().CopyFrom(tensor_util.make_tensor_proto(value))
    return d


def test_dense_proto_decodes_all_steps_at_once_and_matches_dense():
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(5).astype(np.float32) for _ in range(4)]
    d = tensor_data([(i, r) for i, r in enumerate(rows)])
    s = _dense_proto(d, np.nan, np.float32)
    assert s.steps.tolist() == [0, 1, 2, 3] and s.data.dtype == np.float32
    np.testing.assert_array_equal(s.data, np.stack(rows))
    assert s.data.flags.writeable and s.nbytes == s.data.nbytes + 8 * 4
    states = _dense_proto(tensor_data([(0, np.array([1, 2], np.uint8))]),
                          metadata.STATE_UNKNOWN, np.uint8)
    assert states.data.dtype == np.uint8 and states.data.tolist() == [[1, 2]]


def test_dense_proto_sorts_steps_and_keeps_the_last_of_a_repeated_step():
    d = tensor_data([(2, np.array([2, 2], np.float32)), (0, np.array([0, 0], np.float32)),
                     (2, np.array([3, 3], np.float32)), (1, np.array([1, 1], np.float32))])
    s = _dense_proto(d, np.nan, np.float32)
    assert s.steps.tolist() == [0, 1, 2]
    assert s.data.tolist() == [[0, 0], [1, 1], [3, 3]]


def test_dense_proto_falls_back_for_grown_rows_and_malformed_steps():
    d = tensor_data([(0, np.array([1, 2], np.float32)), (1, np.array([3, 4, 5], np.float32)),
                     (2, np.zeros((1, 3), np.float32))])
    s = _dense_proto(d, np.nan, np.float32)
    assert s.steps.tolist() == [0, 1]
    np.testing.assert_array_equal(s.data, [[1, 2, np.nan], [3, 4, 5]])
    empty = _dense_proto(data_provider_pb2.TensorData(), np.nan, np.float32)
    assert empty.steps.shape == (0,) and empty.data.shape == (0, 0)


class _Future:
    def __init__(self, fn):
        self._fn, self.cancelled = fn, False

    def result(self):
        return self._fn()

    def cancel(self):
        self.cancelled = True


class _RpcError(grpc.RpcError):
    pass


class FakeStub:
    """ReadTensors of a data server holding one run's tags, as futures."""

    def __init__(self, tags, fail_on=()):
        self.tags, self.fail_on, self.requests, self.futures = tags, set(fail_on), [], []
        stub = self

        class ReadTensors:
            @staticmethod
            def future(req):
                stub.requests.append(list(req.run_tag_filter.tags.names))

                def answer():
                    res = data_provider_pb2.ReadTensorsResponse()
                    run = res.runs.add(run_name=req.run_tag_filter.runs.names[0])
                    for tag in req.run_tag_filter.tags.names:
                        if tag in stub.fail_on:
                            raise _RpcError("boom")
                        run.tags.add(tag_name=tag).data.CopyFrom(stub.tags[tag])
                    return res

                fut = _Future(answer)
                stub.futures.append(fut)
                return fut

        self.ReadTensors = ReadTensors


class FallbackProvider(grpc_provider.GrpcDataProvider):
    def __init__(self, stub, points):
        super().__init__("fake:0", stub)
        self.points, self.read_calls = points, []

    def read_tensors(self, ctx, *, experiment_id, plugin_name, downsample=None,
                     run_tag_filter=None):
        self.read_calls.append(sorted(run_tag_filter.tags))
        return {"r": {t: self.points[t] for t in run_tag_filter.tags if t in self.points}}


def _listing(tags):
    return {t: provider.TensorTimeSeries(max_step=1, max_wall_time=1.0, plugin_content=b"",
                                         description="", display_name="") for t in tags}


def test_grpc_path_reads_one_matrix_a_request_and_caches():
    grad, mean = metadata.stats_tag("grad_norm"), metadata.stats_tag("act_mean")
    tags = {
        metadata.TAG_STATES: tensor_data([(0, np.array([1, 2], np.uint8))]),
        grad: tensor_data([(0, np.array([1.5, 2.5], np.float32))]),
        mean: tensor_data([(0, np.array([0.5, 0.25], np.float32))]),
        metadata.TAG_LAYERS: tensor_data([(0, np.array(b'{"layers": []}', dtype=object))]),
    }
    stub = FakeStub(tags)
    data = PluginData(FallbackProvider(stub, {}))
    got = data.read(None, "", "r", list(tags), _listing(tags))
    assert stub.requests == [[metadata.TAG_LAYERS], [metadata.TAG_STATES], [grad], [mean]]
    assert got[grad].data.tolist() == [[1.5, 2.5]] and got[mean].data.tolist() == [[0.5, 0.25]]
    assert got[metadata.TAG_STATES].data.tolist() == [[1, 2]]
    assert got[metadata.TAG_LAYERS].data == [{"layers": []}]
    data.read(None, "", "r", list(tags), _listing(tags))
    assert len(stub.requests) == 4  # all cached


def test_grpc_path_failure_falls_back_to_read_tensors():
    grad, mean = metadata.stats_tag("grad_norm"), metadata.stats_tag("act_mean")
    tags = {grad: tensor_data([(0, np.array([1.0], np.float32))]),
            mean: tensor_data([(0, np.array([2.0], np.float32))])}
    points = {mean: [Point(0, np.array([3.0], np.float32))]}
    stub = FakeStub(tags, fail_on={mean})
    dp = FallbackProvider(stub, points)
    got = PluginData(dp).read(None, "", "r", [grad, mean], _listing(tags))
    assert got[grad].data.tolist() == [[1.0]]
    assert got[mean].data.tolist() == [[3.0]]  # read again through the public API
    assert dp.read_calls == [[mean]]
