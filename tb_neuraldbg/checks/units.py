"""Check 6: dead (ReLU family) and saturated (bounded) units of every
activation module, on one batch."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..diagnosis.thresholds import Thresholds
from ..training.step import stats
from ..training.modules import Behaviour, behaviour_of, unwrap
from ._harness import CheckResult, Hooks, Preserved, call, output

__all__ = ["LayerUnits", "UnitsResult", "dead_and_saturated_units"]

_DEFAULTS = Thresholds()


@dataclass(frozen=True)
class LayerUnits:
    """The measured fractions of one activation module."""

    name: str
    kind: str  # "dead" (ReLU family) | "saturated" (bounded) | "dead+saturated"
    dead_fraction: float | None  # units zero for every sample of the batch
    saturated_fraction: float | None  # outputs in the flat ends
    flagged: bool


@dataclass(frozen=True)
class UnitsResult(CheckResult):
    """Every measured activation layer, flagged or not."""

    layers: tuple[LayerUnits, ...]


def dead_and_saturated_units(
    model: nn.Module,
    batch,
    dead_threshold: float = _DEFAULTS.dead_frac,
    saturated_threshold: float = _DEFAULTS.sat_frac,
) -> UnitsResult:
    """Dead and saturated units of every activation module, on one batch.

    The module table of ``training.modules`` says which modules count: the ReLU
    family (a unit, one element of a sample, is dead when it is zero for
    every sample of the batch) and bounded activations (tanh, sigmoid,
    hardtanh, ...: the fraction of outputs in the flat ends, e.g.
    ``|tanh| >= 0.99``; for ReLU6-like modules, which are also measured as
    dead, only the top end). A layer is flagged when its dead fraction is
    >= ``dead_threshold`` (0.75) or its saturated fraction >=
    ``saturated_threshold`` (0.6), the thresholds of the diagnosis. A module
    called several times sums over its calls. Use a batch of at least a few
    dozen samples: with one sample every zero looks dead.
    """
    tallies = _measure(model, batch)
    layers = [t.layer(dead_threshold, saturated_threshold) for t in tallies if t.called]
    if not layers:
        msg = (
            "no ReLU-family or bounded activation modules were called; nothing to measure "
            "(functional activations such as F.relu are not seen)."
        )
        return UnitsResult("dead_and_saturated_units", True, msg, ())
    flagged = [l for l in layers if l.flagged]
    if not flagged:
        return UnitsResult(
            "dead_and_saturated_units", True,
            f"{len(layers)} activation layers measured; none dead (>= {dead_threshold:.0%} units) "
            f"or saturated (>= {saturated_threshold:.0%} outputs).",
            tuple(layers),
        )
    parts = []
    for l in flagged:
        if l.dead_fraction is not None and l.dead_fraction >= dead_threshold:
            parts.append(f"{l.name or '<model>'} {l.dead_fraction:.0%} dead")
        if l.saturated_fraction is not None and l.saturated_fraction >= saturated_threshold:
            parts.append(f"{l.name or '<model>'} {l.saturated_fraction:.0%} saturated")
    msg = (
        "; ".join(parts) + ". Dead ReLUs: check for large negative biases or a too-high lr, use "
        "He init or LeakyReLU/GELU. Saturation: pre-activations are too large: normalise the "
        "inputs, scale down the init (Xavier for tanh/sigmoid) or add normalisation layers."
    )
    return UnitsResult("dead_and_saturated_units", False, msg, tuple(layers))


def _measure(model: nn.Module, batch) -> list[_Tally]:
    """One forward pass under ``no_grad`` with a hook on every activation
    module; a tally per such module, in ``named_modules()`` order."""
    tallies = []
    with Preserved(model), Hooks() as hooks, torch.no_grad():
        for name, mod in unwrap(model).named_modules():
            b = behaviour_of(mod)
            if b.dead or b.saturation is not None:
                tally = _Tally(name, b)
                tallies.append(tally)
                hooks.add(mod.register_forward_hook(tally.hook))
        call(model, batch)
    return tallies


@dataclass
class _Tally:
    """Counts of one activation module over its calls, kept on the device
    until the layer is built (one host copy per count)."""

    name: str
    behaviour: Behaviour
    called: bool = False
    units: int = 0  # elements of one sample, summed over calls
    dead: list = field(default_factory=list)  # 0-d counts of dead units, per call
    numel: int = 0
    sat: list = field(default_factory=list)  # 0-d counts of saturated outputs, per call

    @property
    def kind(self) -> str:
        b = self.behaviour
        return "+".join(k for k, on in (("dead", b.dead), ("saturated", b.saturation)) if on)

    def hook(self, mod, args, out):
        t = output(out).detach()
        if t.dim() == 0:
            return
        self.called = True
        b = self.behaviour
        if b.dead:
            self.units += t[0].numel()
            self.dead.append(stats.zero_and_dead(t)[1])
        if b.saturation is not None:
            lo, hi = b.saturation(mod)
            self.numel += t.numel()
            if b.dead:  # zeros are "dead", not saturated: top end only
                self.sat.append((t >= hi).sum())
            else:
                self.sat.append(stats.saturated(t.float(), lo, hi))

    def layer(self, dead_threshold: float, saturated_threshold: float) -> LayerUnits:
        dead = _summed(self.dead) / self.units if self.dead else None
        sat = _summed(self.sat) / self.numel if self.sat else None
        flagged = (dead is not None and dead >= dead_threshold) or (
            sat is not None and sat >= saturated_threshold
        )
        return LayerUnits(self.name, self.kind, dead, sat, flagged)


def _summed(counts: list[torch.Tensor]) -> float:
    dev = counts[0].device
    return float(torch.stack([c.to(dev, torch.int64) for c in counts]).sum())
