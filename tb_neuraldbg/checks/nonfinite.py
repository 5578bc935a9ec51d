"""Check 5: where NaN/inf values are born, forward or backward, without
``torch.autograd.set_detect_anomaly``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..training.modules import unwrap
from ._harness import CheckResult, Hooks, Preserved, all_finite, call, float_tensors, output

__all__ = ["NonfiniteResult", "find_nonfinite"]


@dataclass(frozen=True)
class NonfiniteResult(CheckResult):
    """Where non-finite values first appear; both None when nowhere."""

    module: str | None  # qualified name, "" for the model itself, "<input>", "<loss>"
    phase: str | None  # "forward" | "backward"


def find_nonfinite(model: nn.Module, batch, targets=None, criterion=None) -> NonfiniteResult:
    """Where NaN/inf first appear, without ``torch.autograd.set_detect_anomaly``.

    One forward and one backward with hooks. Forward: the first module, in
    order of completion (children before their parent), whose output is
    non-finite while its inputs were finite; a composite module that computes
    the value itself (functional ops in its ``forward``) is blamed, not the
    next child. Backward: tensor hooks on the inputs and outputs of every
    module call record whether each gradient is finite; the culprit is the
    innermost call whose output gradients were finite while its input
    gradients, its own parameters' gradients or a child's output gradient are
    not (the first such in backward order). The backward pass starts from
    ``criterion(output, targets)``, or from the sum of the output without a
    criterion. ``module`` is a qualified name from ``named_modules()`` ("" is
    the model itself), or "<input>" (non-finite batch) or "<loss>". Skips the
    backward pass when forward already failed. Hooks are removed afterwards,
    even if the model raises; state is restored.
    """
    root = unwrap(model)
    with Preserved(model), Hooks() as hooks:
        recorder = _Recorder(hooks)
        recorder.attach(root)
        for p in root.parameters():
            p.grad = None
        in_ok = all_finite(float_tensors(batch))
        out = output(call(model, batch))
        loss = criterion(out, targets) if criterion is not None else out.float().sum()
        found = _forward_origin(recorder.calls, in_ok, all_finite([out]), all_finite([loss]))
        if found is not None:
            return found
        if not loss.requires_grad:
            return NonfiniteResult(
                "find_nonfinite", True,
                "forward is finite; the loss needs no gradient, so backward was not run.", None, None,
            )
        out_grad: list = []
        hooks.add(out.register_hook(_grad_flag(out_grad)))
        loss.backward()
        return _backward_origin(root, recorder.calls, out_grad)


# --------------------------------------------------------------------------
# Recording the module calls of one forward pass
# --------------------------------------------------------------------------


@dataclass
class _Call:
    """One call of one module during the probed forward pass."""

    name: str
    parent: int | None
    in_ok: torch.Tensor | None = None
    out_ok: torch.Tensor | None = None
    out_grad_ok: list = field(default_factory=list)  # 0-d bools from tensor hooks in backward
    in_grad_ok: list = field(default_factory=list)


class _Recorder:
    """Forward hooks on every module that record each call (its parent, and
    whether its inputs and output are finite) and hang tensor hooks on its
    inputs and outputs to flag their gradients in backward. Every handle
    goes to ``hooks``."""

    def __init__(self, hooks: Hooks):
        self.hooks = hooks
        self.calls: list[_Call] = []
        self.stack: list[int] = []  # indices of the calls still running

    def attach(self, root: nn.Module) -> None:
        for name, mod in root.named_modules():
            self.hooks.add(mod.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self.hooks.add(mod.register_forward_hook(self._post, with_kwargs=True, always_call=True))

    def _pre(self, name: str):
        def hook(mod, args, kwargs):
            ins = float_tensors((args, kwargs))
            c = _Call(name, self.stack[-1] if self.stack else None, all_finite(ins), None, [], [])
            self.stack.append(len(self.calls))
            self.calls.append(c)
            self._flag_grads(ins, c.in_grad_ok)

        return hook

    def _post(self, mod, args, kwargs, out):
        if not self.stack:
            return
        c = self.calls[self.stack.pop()]
        outs = float_tensors(out)
        c.out_ok = all_finite(outs)
        self._flag_grads(outs, c.out_grad_ok)

    def _flag_grads(self, tensors: list[torch.Tensor], into: list) -> None:
        if torch.is_grad_enabled():
            for t in tensors:
                if t.requires_grad:
                    self.hooks.add(t.register_hook(_grad_flag(into)))


def _grad_flag(into: list):
    def hook(g):
        if g is not None:
            into.append(torch.isfinite(g).all())
        return None

    return hook


def _host_all(groups: list[list[torch.Tensor]]) -> list[bool]:
    """``all()`` of each group of 0-d bool tensors, with one host copy for
    all of them (an empty group is True)."""
    flat = [f for g in groups for f in g]
    if not flat:
        return [True] * len(groups)
    dev = flat[0].device
    host = torch.stack([f.to(dev) for f in flat]).cpu().tolist()
    out, k = [], 0
    for g in groups:
        out.append(all(host[k : k + len(g)]))
        k += len(g)
    return out


def _nonfinite(module: str, phase: str, why: str) -> NonfiniteResult:
    shown = {"<input>": "the input batch", "<loss>": "the loss"}.get(module)
    if shown is None:
        shown = f"module {module!r}" if module else "the model's own forward (root module)"
    msg = f"non-finite values are born in {phase} at {shown}: {why}"
    return NonfiniteResult("find_nonfinite", False, msg, module, phase)


# --------------------------------------------------------------------------
# Forward: the first call whose output turns non-finite
# --------------------------------------------------------------------------


def _group(flag: torch.Tensor | None) -> list[torch.Tensor]:
    return [] if flag is None else [flag]


def _forward_origin(calls: list[_Call], in_ok, out_ok, loss_ok) -> NonfiniteResult | None:
    """Where forward first went non-finite, or None when it stayed finite."""
    # One host copy for all forward flags.
    host = _host_all(
        [_group(in_ok), _group(out_ok), _group(loss_ok)]
        + [_group(f) for c in calls for f in (c.in_ok, c.out_ok)]
    )
    if not host[0]:
        return _nonfinite("<input>", "forward", "the batch itself holds NaN/inf; check the data pipeline.")
    # Completion order: a child finishes before its parent.
    for i, c in _completed(calls):
        if host[3 + 2 * i] and not host[4 + 2 * i]:
            return _nonfinite(
                c.name, "forward",
                "its inputs are finite but its output is not. Look for log/sqrt/div of "
                "zero or negatives, exp overflow, or float16 overflow; add eps/clamps.",
            )
    if not host[1]:
        return _nonfinite("", "forward", "the output is not finite while every hooked module's output was.")
    if not host[2]:
        return _nonfinite(
            "<loss>", "forward",
            "the model output is finite but the loss is not; check the targets and what the "
            "loss receives (log of 0, probabilities instead of logits).",
        )
    return None


def _completed(calls: list[_Call]):
    """(index, call) in order of completion: post-order of the call tree,
    which is when forward hooks fire."""
    children: dict[int | None, list[int]] = {}
    for i, c in enumerate(calls):
        children.setdefault(c.parent, []).append(i)

    def walk(i):
        for j in children.get(i, []):
            yield from walk(j)
        yield i, calls[i]

    for r in children.get(None, []):
        yield from walk(r)


# --------------------------------------------------------------------------
# Backward: the innermost call that passes back a non-finite gradient
# --------------------------------------------------------------------------


def _param_flags(root: nn.Module, calls: list[_Call]) -> dict[str, list[torch.Tensor]]:
    """Finite flags of the parameter gradients, per called module."""
    # Parameters of modules that were never called as modules (the children
    # of an atomic module like MultiheadAttention) belong to the nearest
    # ancestor that was.
    called = {c.name for c in calls}
    owned: dict[str, list[torch.Tensor]] = {}
    for name, mod in root.named_modules():
        owner = name
        while owner not in called and owner:
            owner = owner.rpartition(".")[0]
        owned.setdefault(owner, []).extend(
            torch.isfinite(p.grad).all() for p in mod.parameters(recurse=False) if p.grad is not None
        )
    return owned


def _backward_origin(root: nn.Module, calls: list[_Call], out_grad: list) -> NonfiniteResult:
    if not _host_all([out_grad])[0]:
        return _nonfinite(
            "<loss>", "backward",
            "the gradient of the loss with respect to the output is not finite; check the loss "
            "and its targets.",
        )
    owned = _param_flags(root, calls)
    n = len(calls)
    host = _host_all([c.out_grad_ok for c in calls] + [c.in_grad_ok for c in calls] + list(owned.values()))
    out_ok, in_ok = host[:n], host[n : 2 * n]
    param_ok = dict(zip(owned, host[2 * n :]))
    children: dict[int, list[int]] = {}
    for i, c in enumerate(calls):
        if c.parent is not None:
            children.setdefault(c.parent, []).append(i)
    seen_params: set[str] = set()
    # Backward order: the reverse of the order calls began, which also puts
    # every child before its parent, so the first candidate is the innermost.
    for i in reversed(range(n)):
        c = calls[i]
        own_params_bad = c.name not in seen_params and not param_ok.get(c.name, True)
        seen_params.add(c.name)  # a shared module's params count once, on its last call
        child_bad = any(not out_ok[j] for j in children.get(i, []))
        if out_ok[i] and (not in_ok[i] or own_params_bad or child_bad):
            return _nonfinite(
                c.name, "backward",
                "the gradient reaching its output is finite but the gradient it passes back (to "
                "its input or its parameters) is not. Look for ops with unbounded derivatives at "
                "the values seen: sqrt/pow/log near 0, division by small numbers, custom "
                "autograd.Functions.",
            )
    if not all(param_ok.values()):
        bad = [n for n, ok in param_ok.items() if not ok]
        return _nonfinite(bad[0], "backward", "its parameter gradients are not finite.")
    msg = "forward and backward are finite: no NaN/inf in activations or gradients."
    return NonfiniteResult("find_nonfinite", True, msg, None, None)
