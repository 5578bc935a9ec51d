"""Pure functions that turn neuraldbg data into TensorBoard ``Summary`` protos.

Nothing here touches files or torch: the writer passes the protos on to the
event file, and tests (and synthetic logdirs) build them directly.
"""

from __future__ import annotations

import functools
import json
from typing import Iterable, Mapping, Sequence

import numpy as np
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.util import tensor_util

from . import metadata

__all__ = [
    "stats_summary",
    "row_summary_without_metadata",
    "ROW_TAGS",
    "block_summary",
    "BLOCK_TAGS",
    "layers_summary",
    "events_summary",
    "diagnosis_summary",
    "config_summary",
    "session_summary",
    "histograms_summary",
    "scalars_summary",
]


def _json_value(tag: str, payload, kind: str) -> summary_pb2.Summary.Value:
    text = json.dumps(payload, allow_nan=True, sort_keys=False)
    return summary_pb2.Summary.Value(
        tag=tag,
        metadata=metadata.create_summary_metadata({"kind": kind}),
        tensor=tensor_util.make_tensor_proto(np.array(text, dtype=object)),
    )


def stats_summary(row: np.ndarray, states: np.ndarray | None = None) -> summary_pb2.Summary:
    """Summary holding one logged step: ``row`` is float [L, len(METRICS)].

    One float32 [L] tensor per metric (so a heatmap reads one metric without
    the others) and, when given, the uint8 [L] state codes.
    """
    row = np.asarray(row, dtype=np.float32)
    if row.ndim != 2 or row.shape[1] != len(metadata.METRICS):
        raise ValueError(
            f"stats row must have shape [layers, {len(metadata.METRICS)}], got {row.shape}"
        )
    values = []
    for j, metric in enumerate(metadata.METRICS):
        values.append(
            summary_pb2.Summary.Value(
                tag=metadata.stats_tag(metric),
                metadata=metadata.create_summary_metadata({"kind": "stats", "metric": metric}),
                tensor=tensor_util.make_tensor_proto(np.ascontiguousarray(row[:, j])),
            )
        )
    if states is not None:
        states = np.asarray(states, dtype=np.uint8)
        if states.shape != (row.shape[0],):
            raise ValueError(f"states must have shape [{row.shape[0]}], got {states.shape}")
        values.append(
            summary_pb2.Summary.Value(
                tag=metadata.TAG_STATES,
                metadata=metadata.create_summary_metadata({"kind": "states"}),
                tensor=tensor_util.make_tensor_proto(states),
            )
        )
    return summary_pb2.Summary(value=values)


_STATS_TAGS = [metadata.stats_tag(m) for m in metadata.METRICS]
#: The tags of one row (:func:`stats_summary` with states): once all of them
#: are in an event file, later rows need no metadata.
ROW_TAGS = frozenset(_STATS_TAGS + [metadata.TAG_STATES])


def row_summary_without_metadata(row: np.ndarray, states: np.ndarray) -> summary_pb2.Summary:
    """``stats_summary(row, states)`` without any metadata: what a row is
    once its tags have been written to the file. The writer writes a row per
    step, so it is parsed from bytes (:func:`_row_frame` and the columns'
    bytes, the same TensorProtos that ``make_tensor_proto`` gives), not built
    a value at a time: 10x faster for a 100-layer row."""
    row = np.asarray(row, dtype="<f4")
    states = np.asarray(states, dtype=np.uint8)
    if row.ndim != 2 or row.shape[1] != len(metadata.METRICS) or states.shape != row.shape[:1]:
        raise ValueError(f"a row is float [L, {len(metadata.METRICS)}] with uint8 [L] states, "
                         f"got {row.shape} and {states.shape}")
    frame = _row_frame(row.shape[0])
    if frame is None:  # (a protobuf that writes the fields in another order)
        return summary_pb2.Summary(value=_raw_values(row, states, _STATS_TAGS, metadata.TAG_STATES))
    cols = memoryview(np.ascontiguousarray(row.T).tobytes())
    n = 4 * row.shape[0]
    parts = []
    for j, before in enumerate(frame[:-1]):
        parts.append(before)
        parts.append(cols[j * n: (j + 1) * n])
    parts.append(frame[-1])
    parts.append(states.tobytes())
    return summary_pb2.Summary.FromString(b"".join(parts))


@functools.lru_cache(maxsize=4)
def _row_frame(num_rows: int) -> tuple[bytes, ...] | None:
    """The serialized row of ``num_rows`` layers cut before each tensor's
    content: for each metric and then the states, the bytes of a one-value
    ``Summary`` (its tag, dtype and shape) up to its ``tensor_content``,
    which protobuf writes last (the fields in number order; None if it did
    not). Concatenated one-value Summaries are one Summary with all the
    values, in order."""
    values = _raw_values(np.zeros((num_rows, len(metadata.METRICS)), np.float32),
                         np.zeros(num_rows, np.uint8), _STATS_TAGS, metadata.TAG_STATES)
    frame = []
    for v in values:
        whole = summary_pb2.Summary(value=[v]).SerializeToString()
        content = len(v.tensor.tensor_content)
        if whole[len(whole) - content:] != v.tensor.tensor_content:
            return None
        frame.append(whole[: len(whole) - content])
    return tuple(frame)


def _raw_values(row: np.ndarray, states: np.ndarray, stats_tags: Sequence[str],
                states_tag: str) -> list:
    """Summary values of ``row`` (float [L, metrics]) under ``stats_tags`` and
    ``states`` (uint8 [L]) under ``states_tag``, from raw bytes, no metadata."""
    row = np.asarray(row, dtype=np.float32)
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=row.shape[0])])
    cols = np.ascontiguousarray(row.T)
    values = [
        summary_pb2.Summary.Value(
            tag=tag,
            tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, tensor_content=cols[j].tobytes()),
        )
        for j, tag in enumerate(stats_tags)
    ]
    values.append(
        summary_pb2.Summary.Value(
            tag=states_tag,
            tensor=tensor_pb2.TensorProto(
                dtype=types_pb2.DT_UINT8,
                tensor_shape=shape,
                tensor_content=np.asarray(states, dtype=np.uint8).tobytes(),
            ),
        )
    )
    return values


_BLOCK_STATS_TAGS = [metadata.block_stats_tag(m) for m in metadata.METRICS]
#: The tags of a block summary (:func:`block_summary`).
BLOCK_TAGS = frozenset(_BLOCK_STATS_TAGS + [metadata.TAG_BLOCK_STATES, metadata.TAG_BLOCK_SPAN])


def block_summary(span: np.ndarray, values: np.ndarray, states: np.ndarray,
                  with_metadata: bool = True) -> summary_pb2.Summary:
    """Summary of one block summary (docs/FORMAT.md, *Block summaries*):
    ``span`` int64 [5], ``values`` float [L, metrics], ``states`` uint8 [L];
    one event, so that a reader gets all its tags or none. Metadata (kind
    "blocks") only ``with_metadata``: the first time in a file."""
    values = np.asarray(values, dtype=np.float32)
    if values.ndim != 2 or values.shape[1] != len(metadata.METRICS):
        raise ValueError(f"block values must have shape [layers, {len(metadata.METRICS)}], "
                         f"got {values.shape}")
    span = np.asarray(span, dtype=np.int64)
    if span.shape != (5,):
        raise ValueError(f"a block span is int64 [5], got {span.shape}")
    out = _raw_values(values, states, _BLOCK_STATS_TAGS, metadata.TAG_BLOCK_STATES)
    out.append(summary_pb2.Summary.Value(tag=metadata.TAG_BLOCK_SPAN, tensor=tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT64,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=5)]),
        tensor_content=span.astype("<i8").tobytes())))
    if with_metadata:
        for v, metric in zip(out, metadata.METRICS):
            v.metadata.CopyFrom(metadata.create_summary_metadata({"kind": "blocks", "metric": metric}))
        for v in out[len(metadata.METRICS):]:
            v.metadata.CopyFrom(metadata.create_summary_metadata({"kind": "blocks"}))
    return summary_pb2.Summary(value=out)


def _layer_entry(l: Mapping[str, str]) -> dict:
    """{"name", "type"} and the ``metadata.LAYER_EXTRAS`` a layer has."""
    entry = {"name": str(l["name"]), "type": str(l.get("type", ""))}
    entry.update((k, l[k]) for k in metadata.LAYER_EXTRAS if isinstance(l.get(k), str))
    return entry


def layers_summary(layers: Sequence[Mapping[str, str]]) -> summary_pb2.Summary:
    """Summary of the layer list: dicts with at least "name" and "type"."""
    payload = {"layers": [_layer_entry(l) for l in layers]}
    return summary_pb2.Summary(value=[_json_value(metadata.TAG_LAYERS, payload, "layers")])


def events_summary(events: Iterable[Mapping]) -> summary_pb2.Summary:
    """Summary of events confirmed at one step (each a DESIGN.md event dict)."""
    return summary_pb2.Summary(value=[_json_value(metadata.TAG_EVENTS, list(events), "events")])


def diagnosis_summary(status: str, root_cause: Mapping | None) -> summary_pb2.Summary:
    """Summary of the run's current diagnosis (status and root cause)."""
    payload = {"status": status, "root_cause": dict(root_cause) if root_cause else None}
    return summary_pb2.Summary(value=[_json_value(metadata.TAG_DIAGNOSIS, payload, "diagnosis")])


def config_summary(config: Mapping) -> summary_pb2.Summary:
    """Summary of the writer's settings (written once, at the first step)."""
    return summary_pb2.Summary(value=[_json_value(metadata.TAG_CONFIG, dict(config), "config")])


def session_summary(tag: str, payload: Mapping) -> summary_pb2.Summary:
    """Summary of a writer's session start or end (``metadata.TAG_SESSION_START``
    or ``TAG_SESSION_END``; docs/FORMAT.md, *Sessions*)."""
    if tag not in (metadata.TAG_SESSION_START, metadata.TAG_SESSION_END):
        raise ValueError(f"not a session tag: {tag!r}")
    return summary_pb2.Summary(value=[_json_value(tag, dict(payload), "session")])


def histograms_summary(histograms: Iterable[tuple[str, Mapping]]) -> summary_pb2.Summary:
    """One ``Summary`` holding every ``(tag, parts)`` histogram of a step
    (``parts``: the fields of :func:`tb_neuraldbg.training.step.slots.histogram_parts`),
    written as one event: a step of a 1,000-module model writes one event,
    not a thousand."""
    summ = summary_pb2.Summary()
    for tag, p in histograms:
        summ.value.add(tag=tag).histo.CopyFrom(
            summary_pb2.HistogramProto(
                min=p["min"],
                max=p["max"],
                num=p["num"],
                sum=p["sum"],
                sum_squares=p["sum_squares"],
                bucket_limit=p["bucket_limits"],
                bucket=p["bucket_counts"],
            )
        )
    return summ


def scalars_summary(scalars: Iterable[tuple[str, float]]) -> summary_pb2.Summary:
    """One ``Summary`` of plain TensorBoard scalars, ``(tag, value)`` each:
    the legacy ``simple_value`` that ``torch.utils.tensorboard``'s
    ``add_scalar`` writes too, which the Scalars and Time Series dashboards
    read; one event a step, as :func:`histograms_summary`."""
    summ = summary_pb2.Summary()
    for tag, value in scalars:
        summ.value.add(tag=tag, simple_value=float(value))
    return summ
