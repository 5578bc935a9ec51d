"""Train a tiny model under the real DebugWriter and collect the diagnosis.

``train(spec, logdir)`` runs an ordinary training loop (zero_grad, forward,
loss, backward, optional clipping, step, scheduler) on CPU with one thread,
with ``spec.plant(step, model, optimizer)`` called before each step so a
scenario can break something at a known step. The writer's own Engine is
captured (the writer imports ``tb_neuraldbg.diagnosis.Engine`` when its first
row arrives, so a recording subclass is swapped in for the duration), which
gives the events and root cause exactly as the writer computed them online,
plus every row for offline replays with other settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable
from unittest import mock

import numpy as np
import torch

import tb_neuraldbg.diagnosis as diagnosis
from tb_neuraldbg import DebugWriter


@dataclass
class Spec:
    """A training run: what to build, how to feed it, what to break."""

    name: str
    build: Callable[[], tuple]  # -> (model, optimizer, criterion, scheduler | None)
    batch: Callable[[int], tuple]  # step -> (inputs, targets)
    steps: int = 200
    plant: Callable[[int, Any, Any], None] | None = None  # (step, model, optimizer)
    clip: float | None = None
    amp: Any = False  # GradScaler (CPU) around the step: True (bf16 autocast) or the autocast dtype
    num_classes: int | None = None
    seed: int = 0
    watch: dict = field(default_factory=dict)
    #: where the loop clears the gradients: "before" (the first thing of an
    #: iteration), "after_forward" (right before backward), "keep_tensors"
    #: (zero_grad(set_to_none=False)), "before_step" (the bug: between
    #: backward and step) or "never" (the bug: forgotten)
    zero_grad: Any = "before"  # or a function (model, optimizer) called there instead
    accum: int = 1  # backward passes (micro-batches) per optimizer step
    autocast: Any = None  # a dtype: torch.autocast around the forward, without a scaler
    #: (model, inputs, targets) before each forward, e.g. teacher forcing
    prepare: Callable[[Any, Any, Any], None] | None = None


class _Recording(diagnosis.Engine):
    """The writer's Engine, recording its rows and registering itself."""

    instances: list = []

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.rows: list = []
        _Recording.instances.append(self)

    def update(self, step, row):
        self.rows.append((int(step), np.array(row, dtype=np.float32, copy=True)))
        return super().update(step, row)


@dataclass
class Result:
    """What a run produced: the online engine and the rows it saw."""

    engine: Any
    rows: list
    layers: list
    logdir: str
    losses: list
    instrument: Any = None  # the writer's hooks (replays, mode), after close

    @property
    def events(self):
        return [e.to_dict() for e in self.engine.events]

    def failures(self):
        return [e for e in self.events if e["severity"] != "info"]

    def series(self, layer: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one statistic of one row over the run (NaN
        where it was not measured), for checks of a scenario's truth."""
        from tb_neuraldbg import metadata

        i = [l["name"] for l in self.layers].index(layer)
        j = metadata.METRIC_INDEX[metric]
        steps = np.array([s for s, _ in self.rows])
        vals = np.array([r[i, j] if i < r.shape[0] else np.nan for _, r in self.rows], dtype=np.float64)
        return steps, vals

    def replay(self, **engine_kwargs):
        """A fresh Engine fed the same rows (e.g. with num_classes)."""
        eng = diagnosis.Engine(self.layers, **engine_kwargs)
        for step, row in self.rows:
            n = row.shape[0]
            if n > len(eng.layers):
                eng.add_layers(self.layers[len(eng.layers):n])
            eng.update(step, row)
        eng.finish()
        return eng


def train(spec: Spec, logdir: str) -> Result:
    torch.manual_seed(spec.seed)
    np.random.seed(spec.seed)
    torch.set_num_threads(1)
    model, opt, crit, sched = spec.build()
    scaler = torch.amp.GradScaler("cpu") if spec.amp else None
    _Recording.instances = []
    losses = []
    with mock.patch.object(diagnosis, "Engine", _Recording):
        with DebugWriter(logdir) as w:
            handle = w.watch(model, optimizer=opt, criterion=crit, scaler=scaler, **spec.watch)
            for step in range(spec.steps):
                if spec.plant is not None:
                    spec.plant(step, model, opt)
                loss = _iteration(spec, step, model, opt, crit, scaler)
                if sched is not None:
                    sched.step()
                losses.append(float(loss.detach()))
    (eng,) = _Recording.instances
    return Result(
        engine=eng, rows=eng.rows, layers=list(eng.layers), logdir=logdir, losses=losses, instrument=handle.instrument
    )


def _iteration(spec: Spec, step: int, model, opt, crit, scaler):
    """One training iteration of ``spec``'s loop; returns the (last) loss."""
    x, y = spec.batch(step)
    if callable(spec.zero_grad):
        spec.zero_grad(model, opt)
    elif spec.zero_grad == "before":
        opt.zero_grad(set_to_none=True)
    elif spec.zero_grad == "keep_tensors":
        opt.zero_grad(set_to_none=False)
    for k in range(spec.accum):
        if spec.prepare is not None:
            spec.prepare(model, x, y)
        if scaler is not None:
            with torch.autocast("cpu", dtype=torch.bfloat16 if spec.amp is True else spec.amp):
                out = model(x)
            loss = crit(_to_float(out), y)
        elif spec.autocast is not None:
            with torch.autocast("cpu", dtype=spec.autocast):
                out = model(x)
            loss = crit(_to_float(out), y)
        else:
            out = model(x)
            loss = crit(out, y)
        if spec.zero_grad == "after_forward" and k == 0:
            opt.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler is not None else loss / spec.accum).backward()
    if scaler is not None:
        scaler.unscale_(opt)
    if spec.clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.clip)
    if spec.zero_grad == "before_step":
        opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    return loss


def _to_float(out):
    if isinstance(out, tuple):
        return tuple(o.float() for o in out)
    return out.float()


def read_events(logdir: str) -> tuple[list, dict | None]:
    """Events and the last diagnosis as written to the event file."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()["tensors"]
    events, diag = [], None

    def text(t):
        v = tensor_util.make_ndarray(t.tensor_proto)
        v = v.item() if v.shape == () else v.reshape(-1)[0]
        return json.loads(v.decode("utf-8") if isinstance(v, bytes) else v)

    if "neuraldbg/events" in tags:
        for t in acc.Tensors("neuraldbg/events"):
            events.extend(text(t))
    if "neuraldbg/diagnosis" in tags:
        diag = text(acc.Tensors("neuraldbg/diagnosis")[-1])
    return events, diag
