"""What every check shares: the result base class, the snapshot that puts the
model back, one owner for hook handles, and helpers that call the model,
feed it batches and take training steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn

from ..training.modules import first_tensor, iter_tensors, unwrap

__all__ = [
    "CheckResult",
    "Preserved",
    "Hooks",
    "adam",
    "call",
    "output",
    "loss_of",
    "trainable",
    "batches",
    "train_steps",
    "float_tensors",
    "all_finite",
    "no_trainable_message",
]


@dataclass(frozen=True)
class CheckResult:
    """What every check returns: its name, a verdict and a plain message."""

    name: str
    ok: bool
    message: str


def adam(params):
    """The default optimizer of the checks that train: Adam at lr 1e-3."""
    return torch.optim.Adam(params, lr=1e-3)


# --------------------------------------------------------------------------
# Snapshot and restore: the checks leave no trace
# --------------------------------------------------------------------------


class Preserved:
    """Context manager: snapshot the model's tensors, grads, train flags and
    the RNG state on enter; copy them back, in place, on exit."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.params: list = []
        self.grads: list = []
        self.buffers: list = []
        self.modes: list = []
        self.cpu_rng = None
        self.cuda_rng = None

    def __enter__(self):
        m = self.model
        with torch.no_grad():
            self.params = [(p, p.detach().clone()) for p in m.parameters()]
            self.grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in m.parameters()]
            # named_buffers also lists non-persistent buffers, which a
            # state_dict would miss.
            self.buffers = [(b, b.detach().clone()) for _, b in m.named_buffers()]
        self.modes = [(mod, mod.training) for mod in m.modules()]
        self.cpu_rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for t, saved in self.params + self.buffers:
                t.copy_(saved)
        for p, g in self.grads:
            p.grad = g
        for mod, training in self.modes:
            mod.training = training
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        elif torch.cuda.is_initialized():
            # CUDA came up during the check: its generators were fresh.
            torch.cuda.manual_seed_all(torch.initial_seed())
        return False


class Hooks:
    """One owner for every hook handle (module and tensor hooks alike).

    ``remove()`` removes them all and is safe to call twice, as
    ``torch.utils.hooks.RemovableHandle.remove`` is; as a context manager the
    group removes its handles on exit, also when the model raises.
    """

    def __init__(self):
        self.handles: list = []

    def add(self, handle):
        """Take ownership of ``handle``; returns it."""
        self.handles.append(handle)
        return handle

    def remove(self) -> None:
        """Remove every handle added so far."""
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


# --------------------------------------------------------------------------
# Calling the model
# --------------------------------------------------------------------------


def call(model: nn.Module, batch):
    """``model(batch)``, ``model(*batch)`` for a tuple or list, ``model(**batch)`` for a dict."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def output(out) -> torch.Tensor:
    """The first tensor of a model's output (its logits)."""
    t = first_tensor(out)
    if t is None:
        raise TypeError("the model returned no tensor; the checks need its output (logits)")
    return t


def loss_of(model, batch, targets, criterion) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, 0-d loss) of one forward pass."""
    out = output(call(model, batch))
    loss = criterion(out, targets)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("criterion must return a scalar tensor (use reduction='mean' or 'sum')")
    return out, loss.reshape(())


def trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every parameter that requires a gradient."""
    return [(n, p) for n, p in unwrap(model).named_parameters() if p.requires_grad]


def no_trainable_message(loss: torch.Tensor) -> str | None:
    """Why ``loss`` cannot train anything, or None when it can."""
    if loss.requires_grad:
        return None
    return (
        "the loss does not depend on any trainable parameter: the output is "
        "detached from the graph (.detach(), .item(), .numpy(), argmax, a "
        "torch.no_grad() block) or every parameter has requires_grad=False."
    )


# --------------------------------------------------------------------------
# Feeding batches and taking steps
# --------------------------------------------------------------------------


def batches(batch_or_iter, targets):
    """Endless (batch, targets): the same pair when ``targets`` is given,
    else the items of the iterable, restarted when it runs out."""
    if targets is not None:
        while True:
            yield batch_or_iter, targets
    if isinstance(batch_or_iter, torch.Tensor):
        raise ValueError("targets is None: pass an iterable of (inputs, targets) pairs, or pass targets")
    while True:
        it = iter(batch_or_iter)
        empty = True
        for item in it:
            empty = False
            x, y = item
            yield x, y
        if empty or it is batch_or_iter:  # empty, or a one-shot iterator
            if empty:
                raise ValueError("the batch iterable yielded nothing")
            return


def train_steps(
    model: nn.Module, opt, criterion, feed: Iterator, steps: int
) -> Iterator[tuple[torch.Tensor, str | None]]:
    """The start of up to ``steps`` training steps, one per ``(inputs, targets)``
    of ``feed``: clear the gradients, compute the loss and yield
    ``(loss, problem)``. ``problem`` is ``no_trainable_message(loss)``: when
    it is set, the caller reports it and stops; otherwise it runs backward and
    ``opt.step()`` itself (measuring in between what it needs). Ends early
    when ``feed`` runs out."""
    for _ in range(steps):
        item = next(feed, None)
        if item is None:
            return
        x, y = item
        opt.zero_grad(set_to_none=True)
        _, loss = loss_of(model, x, y, criterion)
        yield loss, no_trainable_message(loss)


# --------------------------------------------------------------------------
# Finite checks without host syncs
# --------------------------------------------------------------------------


def float_tensors(obj) -> list[torch.Tensor]:
    """The floating-point and complex tensors in a (nested) structure."""
    return [t for t in iter_tensors(obj) if t.is_floating_point() or t.is_complex()]


def all_finite(ts: list[torch.Tensor]) -> torch.Tensor | None:
    """0-d bool on the tensors' device (no host sync), None without tensors."""
    if not ts:
        return None
    flags = [torch.isfinite(t.detach()).all() for t in ts]
    if len(flags) == 1:
        return flags[0]
    return torch.stack([f.to(flags[0].device) for f in flags]).all()
