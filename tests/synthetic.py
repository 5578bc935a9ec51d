"""Synthetic neuraldbg logdirs for tests and benchmarks.

Writes real event files (``summary.py`` protos through TensorBoard's own
``EventFileWriter``), so whatever reads them -- the reader, the plugin, a real
``tensorboard`` process -- sees exactly what DebugWriter would produce, without
torch and in milliseconds. Every writer returns the ground truth it wrote
(``SyntheticRun``) so tests compare against it instead of hard-coding numbers.

Typical use::

    from tests.synthetic import Plant, event, write_run

    truth = write_run(tmp_path, "mlp", num_modules=4, num_steps=50,
                      plants=[Plant(step=20, layer="fc2", state="exploding",
                                    values={"grad_norm": 1e6})],
                      events=[event(20, "fc2", "exploding_gradient", value=1e6)])
    truth.stats[20, truth.row("fc2"), METRIC_INDEX["grad_norm"]]   # 1e6

For runs still being written, drive ``SyntheticWriter`` step by step and
``flush()`` between steps.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Iterable, Mapping, Sequence

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tb_neuraldbg import metadata
from tb_neuraldbg.format import blocks as format_blocks
from tb_neuraldbg.format import summary

__all__ = [
    "Plant",
    "SyntheticRun",
    "SyntheticWriter",
    "make_layers",
    "healthy_row",
    "event",
    "KIND_STATE",
    "derive_diagnosis",
    "write_run",
]

_M = {name: i for i, name in enumerate(metadata.METRICS)}
# Metrics measured on ordinary module rows (the rest stay NaN there).
_MODULE_METRICS = (
    "grad_norm", "grad_nonfinite", "grad_missing", "weight_norm", "update_ratio",
    "act_mean", "act_std", "act_absmax", "act_zero_frac", "act_dead_frac",
    "act_nonfinite", "in_zero_frac", "in_dead_frac", "in_nonfinite",
)
_INPUT_METRICS = ("act_mean", "act_std", "act_absmax", "act_zero_frac", "act_nonfinite")


def make_layers(num_modules: int, prefix: str = "fc", module_type: str = "Linear") -> list[dict]:
    """Row list in the on-disk order: <input>, modules, <loss>, <optimizer>."""
    rows = [{"name": metadata.PSEUDO_INPUT, "type": "input"}]
    rows += [{"name": f"{prefix}{i}", "type": module_type} for i in range(num_modules)]
    rows += [
        {"name": metadata.PSEUDO_LOSS, "type": "loss"},
        {"name": metadata.PSEUDO_OPTIMIZER, "type": "optimizer"},
    ]
    return rows


def healthy_row(layers: Sequence[Mapping], step: int, rng: np.random.Generator) -> np.ndarray:
    """Plausible healthy float32 [L, M] statistics for one step (NaN = not measured)."""
    n = len(layers)
    row = np.full((n, len(metadata.METRICS)), np.nan, dtype=np.float32)
    kinds = np.array([l.get("type", "") for l in layers], dtype=object)
    mod = ~np.isin(kinds, ("input", "loss", "optimizer"))
    k = int(mod.sum())
    if k:
        noise = rng.lognormal(0.0, 0.2, size=(k, 4)).astype(np.float32)
        block = np.full((k, len(metadata.METRICS)), np.nan, dtype=np.float32)
        block[:, _M["grad_norm"]] = 1e-2 * noise[:, 0]
        block[:, _M["grad_nonfinite"]] = 0
        block[:, _M["grad_missing"]] = 0
        block[:, _M["weight_norm"]] = 5.0 * noise[:, 1]
        block[:, _M["update_ratio"]] = 1e-3 * noise[:, 2]
        block[:, _M["act_mean"]] = 0.1 * (noise[:, 3] - 1.0)
        block[:, _M["act_std"]] = noise[:, 3]
        block[:, _M["act_absmax"]] = 3.0 * noise[:, 3]
        block[:, _M["act_zero_frac"]] = 0.5
        block[:, _M["act_dead_frac"]] = 0.0
        block[:, _M["act_nonfinite"]] = 0
        block[:, _M["in_zero_frac"]] = 0.0
        block[:, _M["in_dead_frac"]] = 0.0
        block[:, _M["in_nonfinite"]] = 0
        row[mod] = block
    for i, layer in enumerate(layers):
        kind = layer.get("type")
        if kind == "input":
            row[i, [_M[m] for m in _INPUT_METRICS]] = (0.0, 1.0, 4.0, 0.0, 0.0)
        elif kind == "loss":
            row[i, _M["value"]] = 2.3 * np.exp(-step / 500.0) + 0.05
            row[i, _M["act_nonfinite"]] = 0
        elif kind == "optimizer":
            row[i, _M["value"]] = 1e-3
    return row


# The state an event kind leads to (its to_state by default).
KIND_STATE = {
    "vanishing_gradient": "vanishing",
    "exploding_gradient": "exploding",
    "nonfinite": "nonfinite",
    "dead_activation": "dead",
    "saturated_activation": "saturated",
    "no_gradient": "no_gradient",
    "frozen_weights": "frozen",
    "activation_collapse": "collapsed",
    "activation_explosion": "act_exploding",
    "data_anomaly": "data_anomaly",
    "loss_spike": "loss_spike",
    "loss_plateau": "loss_plateau",
    "scaler_collapse": "scaler_collapse",
    "initial_loss": "initial_loss",
}


def event(
    step: int,
    layer: str,
    kind: str,
    *,
    from_state: str = "healthy",
    to_state: str | None = None,
    value: float | None = None,
    severity: str | None = None,
    message: str | None = None,
    **extra,
) -> dict:
    """A DESIGN.md event dict (extra keys, e.g. value_before, are kept).

    ``to_state`` defaults to the kind's state (KIND_STATE) and ``severity``
    to that state's severity in metadata.
    """
    if kind not in metadata.KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    to_state = to_state or KIND_STATE[kind]
    severity = severity or metadata.STATE_SEVERITY.get(to_state, "warning")
    if severity not in metadata.SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}")
    d = {
        "step": int(step),
        "layer": layer,
        "kind": kind,
        "from_state": from_state,
        "to_state": to_state,
        "value": value,
        "severity": severity,
        "message": message if message is not None else f"{layer}: {from_state} -> {to_state} at step {step}",
    }
    d.update(extra)
    return d


def derive_diagnosis(events: Iterable[Mapping]) -> dict:
    """{"status", "root_cause"} implied by events: failing iff a warning or
    error event; the root cause is the earliest of them (ties: first listed)."""
    errors = [
        e for e in events if isinstance(e, Mapping) and e.get("severity") in ("warning", "error")
    ]
    if not errors:
        return {"status": "healthy", "root_cause": None}
    first = min(errors, key=lambda e: e["step"])
    return {
        "status": "failing",
        "root_cause": {k: first[k] for k in ("kind", "layer", "step", "message")},
    }


@dataclasses.dataclass(frozen=True)
class Plant:
    """A planted failure: ``layer`` is in ``state`` for steps [step, until]
    (``until`` None = that one step), with the given metric values there."""

    step: int
    layer: str
    state: str = "exploding"
    values: Mapping[str, float] = dataclasses.field(default_factory=dict)
    until: int | None = None

    def covers(self, step: int) -> bool:
        last = self.step if self.until is None else self.until
        return self.step <= step <= last


@dataclasses.dataclass
class SyntheticRun:
    """Ground truth of what was written for one run.

    ``stats`` float32 [S, L, M] and ``states`` uint8 [S, L] cover the FINAL
    layer list; rows not yet born at a step are NaN / STATE_UNKNOWN.
    """

    name: str
    path: str
    layers: list
    steps: np.ndarray
    stats: np.ndarray
    states: np.ndarray
    events: list
    diagnosis: dict | None
    config: dict | None

    def row(self, layer: str) -> int:
        """Row index of a layer name."""
        return [l["name"] for l in self.layers].index(layer)


class SyntheticWriter:
    """Writes one run's event file step by step (for runs still being written).

    Records are what DebugWriter writes: the layer list at the first step and
    whenever it grows, stats + states every step, events at the step they
    are confirmed, the diagnosis whenever it changes, the config once.
    """

    def __init__(self, logdir: str, run: str = "run", layers: Sequence[Mapping] | None = None,
                 *, config: Mapping | None = None, seed: int = 0, keep_truth: bool = True,
                 blocks: bool = False):
        self.path = os.path.join(str(logdir), run) if run else str(logdir)
        os.makedirs(self.path, exist_ok=True)
        self.name = run
        self.layers = [dict(l) for l in (layers if layers is not None else make_layers(4))]
        self.config = dict(config) if config is not None else {"synthetic": True}
        # Block summaries as DebugWriter writes them (format/blocks.py): a
        # block closes every BLOCK_ROWS rows, before events and at close().
        self._blocks = format_blocks.BlockBuilder() if blocks else None
        if blocks:
            self.config.setdefault("blocks", metadata.BLOCK_ROWS)
        self._last_wall = None
        self._rng = np.random.default_rng(seed)
        self._writer = EventFileWriter(self.path, max_queue_size=64, flush_secs=3600)
        self._layers_dirty = True
        self._config_written = False
        self._diagnosis = None
        self._keep = keep_truth
        self._steps: list[int] = []
        self._rows: list[np.ndarray] = []
        self._states: list[np.ndarray] = []
        self.events: list[dict] = []

    def grow(self, new_layers: Sequence[Mapping]) -> None:
        """Append layers (written again with the next step)."""
        self.layers += [dict(l) for l in new_layers]
        self._layers_dirty = True

    def _add(self, summ, step: int, wall_time: float | None) -> None:
        self._writer.add_event(
            event_pb2.Event(step=int(step), wall_time=wall_time or time.time(), summary=summ)
        )

    def step(self, step: int, row: np.ndarray | None = None, states: np.ndarray | None = None,
             *, plants: Iterable[Plant] = (), events: Sequence[Mapping] = (),
             diagnosis: Mapping | None = None, wall_time: float | None = None) -> None:
        """Write one logged step. ``row``/``states`` default to healthy values
        with ``plants`` applied; ``diagnosis`` defaults to derive_diagnosis of
        every event so far and is written only when it changes."""
        if row is None:
            row = healthy_row(self.layers, step, self._rng)
        row = np.array(row, dtype=np.float32)
        if states is None:
            states = np.zeros(len(self.layers), dtype=np.uint8)
        states = np.array(states, dtype=np.uint8)
        names = None
        for p in plants:
            if not p.covers(step):
                continue
            if names is None:
                names = {l["name"]: i for i, l in enumerate(self.layers)}
            if p.layer not in names:
                continue  # not born yet
            i = names[p.layer]
            states[i] = metadata.STATE_CODE[p.state]
            for metric, v in p.values.items():
                row[i, _M[metric]] = v
        if self._layers_dirty:
            self._add(summary.layers_summary(self.layers), step, wall_time)
            self._layers_dirty = False
        if not self._config_written:
            self._add(summary.config_summary(self.config), step, wall_time)
            self._config_written = True
        self._add(summary.stats_summary(row, states), step, wall_time)
        if self._blocks is not None:
            self._last_wall = wall_time
            self._add_block(self._blocks.add(step, row, states))
            if events:
                self._add_block(self._blocks.close())
        if events:
            self._add(summary.events_summary(events), step, wall_time)
            # Non-dict entries are kept as given: tests plant malformed data.
            self.events += [dict(e) if isinstance(e, Mapping) else e for e in events]
        diag = dict(diagnosis) if diagnosis is not None else derive_diagnosis(self.events)
        if diag != self._diagnosis:
            self._add(summary.diagnosis_summary(diag["status"], diag["root_cause"]), step, wall_time)
            self._diagnosis = diag
        if self._keep:
            self._steps.append(int(step))
            self._rows.append(row)
            self._states.append(states)

    def _add_block(self, block) -> None:
        if block is not None:
            self._add(summary.block_summary(block.span, block.values, block.states), block.step,
                      self._last_wall)

    def flush(self) -> None:
        """Make everything written so far visible to readers."""
        self._writer.flush()

    def close(self) -> None:
        if self._blocks is not None:
            self._add_block(self._blocks.close(final=True))
            self._blocks = None
        self._writer.close()

    def truth(self) -> SyntheticRun:
        """Ground truth so far, padded to the current layer list."""
        n, m = len(self.layers), len(metadata.METRICS)
        s = len(self._steps)
        stats = np.full((s, n, m), np.nan, dtype=np.float32)
        states = np.full((s, n), metadata.STATE_UNKNOWN, dtype=np.uint8)
        for k, (r, st) in enumerate(zip(self._rows, self._states)):
            stats[k, : r.shape[0]] = r
            states[k, : st.shape[0]] = st
        return SyntheticRun(
            name=self.name, path=self.path, layers=[dict(l) for l in self.layers],
            steps=np.array(self._steps, dtype=np.int64), stats=stats, states=states,
            events=sorted((e for e in self.events if isinstance(e, Mapping)),
                          key=lambda e: e["step"]),
            diagnosis=self._diagnosis,
            config=self.config,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_run(
    logdir,
    run: str = "run",
    *,
    num_modules: int = 4,
    num_steps: int = 20,
    first_step: int = 0,
    stride: int = 1,
    layers: Sequence[Mapping] | None = None,
    plants: Sequence[Plant] = (),
    events: Sequence[Mapping] = (),
    confirm_delay: int = 0,
    grow: Mapping[int, Sequence[Mapping]] | None = None,
    diagnosis: Mapping | None = None,
    config: Mapping | None = None,
    seed: int = 0,
    blocks: bool = False,
) -> SyntheticRun:
    """Write a whole run and return its ground truth.

    Logged steps are ``first_step + k*stride`` for k < num_steps. Each event is
    written at the first logged step >= its onset + ``confirm_delay`` (the last
    step if none). ``grow`` maps a step to layers appended from that step on.
    ``diagnosis`` (if given) replaces the one derived from the events: the run
    reads "healthy" until its last step, where ``diagnosis`` is written.
    """
    steps = [first_step + k * stride for k in range(num_steps)]
    if not steps:
        raise ValueError("num_steps must be >= 1")
    pending = sorted((dict(e) for e in events), key=lambda e: e["step"])
    growth = sorted((grow or {}).items())
    w = SyntheticWriter(logdir, run, layers if layers is not None else make_layers(num_modules),
                        config=config, seed=seed, blocks=blocks)
    try:
        for k, step in enumerate(steps):
            while growth and growth[0][0] <= step:
                w.grow(growth.pop(0)[1])
            last = k == len(steps) - 1
            due = [e for e in pending if last or e["step"] + confirm_delay <= step]
            pending = [e for e in pending if e not in due]
            diag = None
            if diagnosis is not None:
                diag = diagnosis if last else {"status": "healthy", "root_cause": None}
            w.step(step, plants=plants, events=due, diagnosis=diag)
    finally:
        w.close()
    return w.truth()
