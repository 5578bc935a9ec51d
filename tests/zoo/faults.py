"""The generic faults planted in every architecture of the zoo, at a known
step, and what the report must say about each.

- ``lr``: every param group's learning rate x1000 from step ``at``:
  ``<optimizer>``.
- ``nan``: one NaN in the float batch of step ``at`` (``<input>``,
  ``data_anomaly``), or for token inputs the token embedding's output made
  NaN at step ``at`` (the embedding, ``nonfinite``).
- ``dead``: a layer followed by a ReLU has its weight and bias zeroed at step
  ``at`` (and its optimizer state cleared, or Adam's momentum would move it
  back): the ReLU outputs exact zeros and passes no gradient, for good
  (``dead_activation``, or ``activation_collapse`` for the zeroed layer).
"""

from __future__ import annotations

import math

import torch

__all__ = ["FAULTS", "Planter", "LR_FACTOR", "unreal"]

FAULTS = ("healthy", "lr", "nan", "dead")
LR_FACTOR = 1000.0


class Planter:
    """Plants ``fault`` into one run at step ``at``: ``setup(model)`` before
    the writer watches the model (so a hook of ours runs before the
    writer's and the writer sees what the model produced), ``before(step,
    model, optimizer)`` at the start of each iteration, ``inputs(step,
    inputs)`` on each batch."""

    def __init__(self, arch, fault: str, at: int):
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
        self.arch, self.fault, self.at = arch, fault, at
        self.active = False

    def setup(self, model) -> None:
        if self.fault == "nan" and self.arch.embedding is not None:
            emb = dict(model.named_modules())[self.arch.embedding[0]]
            emb.register_forward_hook(self._nan_output)

    def _nan_output(self, module, args, output):
        # keyed on the training step, not on calls: the writer's replay of
        # the step calls the forward again and must see the same NaN
        if not self.active:
            return None
        output = output.clone()
        output.view(-1)[0] = float("nan")
        return output

    def before(self, step: int, model, optimizer) -> None:
        self.active = step == self.at
        if step != self.at:
            return
        if self.fault == "lr":
            for group in optimizer.param_groups:
                group["lr"] *= LR_FACTOR
        elif self.fault == "dead":
            layer = dict(model.named_modules())[self.arch.dead[0]]
            with torch.no_grad():
                for p in layer.parameters(recurse=False):
                    p.zero_()
                    optimizer.state.pop(p, None)

    def inputs(self, step: int, inputs: dict) -> dict:
        if self.fault != "nan" or self.arch.embedding is not None or step != self.at:
            return inputs
        out = dict(inputs)
        for k, v in out.items():
            if v.is_floating_point():
                v = v.clone()
                v.view(-1)[v.numel() // 3] = float("nan")
                out[k] = v
        return out


def _mean(values) -> float:
    return sum(values) / len(values)


def unreal(arch, fault: str, at: int, outcome) -> str:
    """Why the run does not show ``fault`` as planted (on the losses and the
    model, without the diagnosis), or "" when it does: a healthy run learned,
    the rate x1000 hurt the loss, the NaN reached the loss at ``at`` only
    from then on, the zeroed layer stayed zero to the end."""
    losses = outcome.losses
    finite = [math.isfinite(v) for v in losses]
    if fault == "healthy":
        if not all(finite) or _mean(losses[-10:]) >= 0.8 * _mean(losses[:5]):
            return f"did not learn: loss {_mean(losses[:5]):.3g} -> {_mean(losses[-10:]):.3g}"
        return ""
    if not all(finite[:at]):
        return "the loss was not finite before the fault"
    if fault == "lr":
        after = losses[at + 1:]
        if all(finite[at + 1:]) and max(after) < 1.5 * losses[at - 1]:
            return f"the loss did not rise after the rate x{LR_FACTOR:g}: max {max(after):.3g}"
        return ""
    if fault == "nan":
        return "" if not finite[at] else "the loss at the planted step is finite"
    layer = dict(outcome.model.named_modules())[arch.dead[0]]
    if any(bool(p.detach().ne(0).any()) for p in layer.parameters(recurse=False)):
        return f"{arch.dead[0]} came back to life"
    return ""
