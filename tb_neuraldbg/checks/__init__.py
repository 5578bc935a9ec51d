"""The preflight protocol: quick checks to run before a long training job.

Each check is a plain function that returns a small frozen result with
``ok`` (bool) and ``message`` (what was found and what to try). The checks
train or probe the model for a few steps, then put everything back: parameter
values, buffers (BatchNorm running statistics included), ``.grad`` tensors,
train/eval flags and the torch RNG state (CPU and every initialised CUDA
device) are restored bitwise, in place, so the user's optimizer still holds
the same parameter objects. Every hook is removed, also when the model
raises. Checks run on whatever device the model and batch live on.

A ``batch`` is what the model is called with: a tensor (``model(batch)``),
a tuple or list (``model(*batch)``) or a dict (``model(**batch)``).

    from tb_neuraldbg import checks
    results = checks.run_preflight(model, x, y, nn.CrossEntropyLoss())
    print(checks.format_results(results))
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch import nn

from ..diagnosis.thresholds import Thresholds
from ..training import stats as S
from ..training.modules import first_tensor, iter_tensors, behaviour_of, unwrap

__all__ = [
    "CheckResult",
    "InitialLossResult",
    "OverfitResult",
    "LRRangeResult",
    "ClippingResult",
    "NonfiniteResult",
    "LayerUnits",
    "UnitsResult",
    "initial_loss",
    "overfit_single_batch",
    "lr_range_test",
    "gradient_clipping_advice",
    "find_nonfinite",
    "dead_and_saturated_units",
    "run_preflight",
    "format_results",
]

_DEFAULTS = Thresholds()


def _adam(params):
    return torch.optim.Adam(params, lr=1e-3)


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """What every check returns: its name, a verdict and a plain message."""

    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class InitialLossResult(CheckResult):
    loss: float
    expected: float  # ln K (ln 2 per output for binary cross-entropy)
    tolerance: float
    num_classes: int | None


@dataclass(frozen=True)
class OverfitResult(CheckResult):
    initial_loss: float
    final_loss: float
    steps: int  # optimizer steps taken (stops early once the goal is met)
    losses: tuple[float, ...]  # training loss before each step
    no_grad_params: tuple[str, ...]  # trainable parameters no gradient reached


@dataclass(frozen=True)
class LRRangeResult(CheckResult):
    lrs: tuple[float, ...]
    losses: tuple[float, ...]  # raw loss at each lr
    smoothed: tuple[float, ...]  # debiased exponential moving average
    suggested_lr: float | None  # steepest descent of the smoothed curve
    lr_min_div10: float | None  # lr of the smallest smoothed loss, / 10


@dataclass(frozen=True)
class ClippingResult(CheckResult):
    norms: tuple[float, ...]  # total gradient 2-norm before each step
    suggested_clip: float | None  # the ``percentile``-th percentile of norms
    spikes: tuple[int, ...]  # steps whose norm exceeds spike_factor x median


@dataclass(frozen=True)
class NonfiniteResult(CheckResult):
    module: str | None  # qualified name, "" for the model itself, "<input>", "<loss>"
    phase: str | None  # "forward" | "backward"


@dataclass(frozen=True)
class LayerUnits:
    name: str
    kind: str  # "dead" (ReLU family) | "saturated" (bounded) | "dead+saturated"
    dead_fraction: float | None  # units zero for every sample of the batch
    saturated_fraction: float | None  # outputs in the flat ends
    flagged: bool


@dataclass(frozen=True)
class UnitsResult(CheckResult):
    layers: tuple[LayerUnits, ...]


# --------------------------------------------------------------------------
# Snapshot and restore: the checks leave no trace
# --------------------------------------------------------------------------


class _Preserved:
    """Context manager: snapshot the model's tensors, grads, train flags and
    the RNG state on enter; copy them back, in place, on exit."""

    def __init__(self, model: nn.Module):
        self.model = model

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


class _Hooks:
    """One owner for every handle; all removed on exit, also on errors."""

    def __init__(self):
        self.handles: list = []

    def add(self, handle):
        self.handles.append(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles.clear()
        return False


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def _call(model: nn.Module, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _output(out) -> torch.Tensor:
    t = first_tensor(out)
    if t is None:
        raise TypeError("the model returned no tensor; the checks need its output (logits)")
    return t


def _loss(model, batch, targets, criterion) -> tuple[torch.Tensor, torch.Tensor]:
    out = _output(_call(model, batch))
    loss = criterion(out, targets)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("criterion must return a scalar tensor (use reduction='mean' or 'sum')")
    return out, loss.reshape(())


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in unwrap(model).named_parameters() if p.requires_grad]


def _batches(batch_or_iter, targets):
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


def _float_tensors(obj) -> list[torch.Tensor]:
    return [t for t in iter_tensors(obj) if t.is_floating_point() or t.is_complex()]


def _all_finite(ts: list[torch.Tensor]) -> torch.Tensor | None:
    """0-d bool on the tensors' device (no host sync), None without tensors."""
    if not ts:
        return None
    flags = [torch.isfinite(t.detach()).all() for t in ts]
    if len(flags) == 1:
        return flags[0]
    return torch.stack([f.to(flags[0].device) for f in flags]).all()


def _no_trainable_message(loss: torch.Tensor) -> str | None:
    if loss.requires_grad:
        return None
    return (
        "the loss does not depend on any trainable parameter: the output is "
        "detached from the graph (.detach(), .item(), .numpy(), argmax, a "
        "torch.no_grad() block) or every parameter has requires_grad=False."
    )


# --------------------------------------------------------------------------
# 1. Initial loss
# --------------------------------------------------------------------------

_CE_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)
_BINARY_LOSSES = (nn.BCEWithLogitsLoss,)


def _num_classes(logits: torch.Tensor, targets) -> int:
    # CrossEntropyLoss puts classes in dim 1 for [N, C, d1, ...] inputs with
    # index targets [N, d1, ...]; otherwise the last dim holds them.
    if (
        logits.dim() > 2
        and isinstance(targets, torch.Tensor)
        and not targets.is_floating_point()
        and tuple(targets.shape) == (logits.shape[0], *logits.shape[2:])
    ):
        return int(logits.shape[1])
    return int(logits.shape[-1])


def initial_loss(
    model: nn.Module, batch, targets, criterion, num_classes: int | None = None
) -> InitialLossResult:
    """Loss at initialisation against ln(K), K-class cross-entropy with
    uniform predictions.

    K is ``num_classes`` or the logits' class dimension (the last one, or dim 1
    for ``[N, C, d1, ...]`` logits with index targets). With
    ``nn.BCEWithLogitsLoss`` every output is a two-class problem: ln 2.
    ok when ``|loss - ln K| <= 0.5 + 0.25 * ln K`` (1.08 for K = 10, 1.65 for
    K = 100): default initialisations land well inside (logits near zero),
    over-scaled logits (a x50 last layer, missing softmax temperature) or a
    head initialised to large values do not. Loss criteria that are not a
    cross-entropy (an ``nn.Module`` other than CrossEntropyLoss, NLLLoss,
    BCEWithLogitsLoss) are reported ok and skipped. Runs under ``no_grad``.
    """
    with _Preserved(model), torch.no_grad():
        out, loss = _loss(model, batch, targets, criterion)
    value = float(loss)
    if isinstance(criterion, nn.Module) and not isinstance(criterion, _CE_LOSSES + _BINARY_LOSSES):
        return InitialLossResult(
            "initial_loss", True,
            f"skipped: {type(criterion).__name__} is not a cross-entropy, so ln(K) does not apply "
            f"(loss at init {value:.4g}).",
            value, math.nan, math.nan, None,
        )
    if isinstance(criterion, _BINARY_LOSSES):
        k, expected = 2, math.log(2.0)
    else:
        k = int(num_classes) if num_classes is not None else _num_classes(out, targets)
        if k < 2:
            raise ValueError(f"need at least 2 classes for cross-entropy, got K={k}; pass num_classes")
        expected = math.log(k)
    tol = 0.5 + 0.25 * expected
    ok = math.isfinite(value) and abs(value - expected) <= tol
    what = f"loss at init {value:.4g}, expected ln({k}) = {expected:.4g} +/- {tol:.3g}"
    if ok:
        msg = f"{what}: predictions start near uniform, as they should."
    elif not math.isfinite(value):
        msg = f"{what}: the loss is not finite at init; run find_nonfinite to locate the layer."
    elif value > expected:
        msg = (
            f"{what}: the model starts confidently wrong. Logits are too large: scale down the "
            "last layer's init (e.g. weights x0.01, zero bias), remove extra scaling of the "
            "logits, check inputs are normalised and that the loss gets logits, not probabilities."
        )
    else:
        msg = (
            f"{what}: the loss is lower than chance before any training. Check for label "
            "leakage into the inputs, the number of classes, and the loss reduction."
        )
    return InitialLossResult("initial_loss", ok, msg, value, expected, tol, k)


# --------------------------------------------------------------------------
# 2. Overfit one batch
# --------------------------------------------------------------------------


def overfit_single_batch(
    model: nn.Module,
    batch,
    targets,
    criterion,
    optimizer_factory: Callable = _adam,
    steps: int = 200,
    rel_drop: float = 0.9,
    floor: float = 0.05,
    check_every: int = 10,
) -> OverfitResult:
    """Can the model memorise one batch?

    Trains a fresh optimizer from ``optimizer_factory(params)`` for up to
    ``steps`` steps on the one batch, stopping early (checked every
    ``check_every`` steps) once the loss has fallen by ``rel_drop`` (90 %) of
    its initial value or below ``floor``; ok when that happens. A model that
    cannot memorise a few examples has broken plumbing: labels that do not
    match the inputs, a detached output, a loss that gets the wrong thing, a
    zero learning rate, parameters missing from the optimizer. Weights are
    restored afterwards.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    names = _trainable(model)
    with _Preserved(model):
        opt = optimizer_factory([p for _, p in names])
        losses: list[torch.Tensor] = []
        no_grad: tuple[str, ...] = ()
        goal = None
        taken = 0
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            _, loss = _loss(model, batch, targets, criterion)
            losses.append(loss.detach())
            problem = _no_trainable_message(loss)
            if problem:
                v = float(loss)
                return OverfitResult(
                    "overfit_single_batch", False, f"cannot train on one batch: {problem}",
                    v, v, 0, (v,), tuple(n for n, _ in names),
                )
            if step == 0:
                goal = max(float(loss.detach()) * (1 - rel_drop), floor)
            loss.backward()
            if step == 0:
                no_grad = tuple(n for n, p in names if p.grad is None)
            opt.step()
            taken += 1
            if (step + 1) % check_every == 0 and float(losses[-1]) <= goal:
                break
        with torch.no_grad():
            final = float(_loss(model, batch, targets, criterion)[1])
    history = tuple(torch.stack(losses).float().cpu().tolist())
    first = history[0]
    ok = math.isfinite(final) and final <= goal
    what = f"loss {first:.4g} -> {final:.4g} in {taken} steps on one batch (goal <= {goal:.3g})"
    if ok:
        msg = f"{what}: the model can memorise a batch, so the plumbing works."
    else:
        hints = []
        if no_grad:
            shown = ", ".join(no_grad[:4]) + (", ..." if len(no_grad) > 4 else "")
            hints.append(f"no gradient reached {len(no_grad)} trainable parameters ({shown})")
        if not math.isfinite(final):
            hints.append("the loss became non-finite: lower the learning rate")
        hints.append(
            "check that the labels belong to the inputs (same shuffling, same order), the "
            "loss gets raw logits, the output is not detached, the learning rate is not zero "
            "and every parameter is in the optimizer; then try more steps or a larger lr"
        )
        msg = f"{what}: the model cannot fit one batch. " + "; ".join(hints) + "."
    return OverfitResult("overfit_single_batch", ok, msg, first, final, taken, history, no_grad)


# --------------------------------------------------------------------------
# 3. LR range test
# --------------------------------------------------------------------------


def _smooth(losses: list[float], beta: float) -> list[float]:
    avg, out = 0.0, []
    for i, v in enumerate(losses):
        avg = beta * avg + (1 - beta) * v
        out.append(avg / (1 - beta ** (i + 1)))
    return out


def lr_range_test(
    model: nn.Module,
    batch_iter_or_batch,
    targets,
    criterion,
    optimizer_cls=torch.optim.SGD,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    steps: int = 100,
    beta: float = 0.98,
    diverge: float = 4.0,
    optimizer_kwargs: dict | None = None,
) -> LRRangeResult:
    """Smith's learning-rate range test (as in fastai's ``lr_find``).

    The lr grows exponentially from ``start_lr`` to ``end_lr`` over ``steps``
    training steps, ``lr_i = start_lr * (end_lr/start_lr) ** (i/(steps-1))``.
    The loss is smoothed by a debiased moving average (``beta``); the sweep
    stops when the smoothed loss exceeds ``diverge`` (4) x its best, or is not
    finite. ``suggested_lr`` is where the smoothed loss falls fastest against
    log(lr) (ignoring the first 10 % and last 5 points); ``lr_min_div10`` is
    the lr of the smallest smoothed loss divided by 10. ``targets`` given:
    ``batch_iter_or_batch`` is one batch, used at every step. ``targets`` None:
    it is an iterable of ``(inputs, targets)`` (a DataLoader), restarted when
    exhausted. Weights are restored afterwards.
    """
    if not (0 < start_lr < end_lr):
        raise ValueError("need 0 < start_lr < end_lr")
    if steps < 2:
        raise ValueError("steps must be >= 2")
    names = _trainable(model)
    ratio = end_lr / start_lr
    lrs: list[float] = []
    losses: list[float] = []
    with _Preserved(model):
        opt = optimizer_cls([p for _, p in names], lr=start_lr, **(optimizer_kwargs or {}))
        best = math.inf
        feed = _batches(batch_iter_or_batch, targets)
        for i in range(steps):
            lr = start_lr * ratio ** (i / (steps - 1))
            for g in opt.param_groups:
                g["lr"] = lr
            item = next(feed, None)
            if item is None:
                break
            x, y = item
            opt.zero_grad(set_to_none=True)
            _, loss = _loss(model, x, y, criterion)
            problem = _no_trainable_message(loss)
            if problem:
                msg = f"cannot sweep: {problem}"
                return LRRangeResult("lr_range_test", False, msg, (), (), (), None, None)
            v = float(loss.detach())  # needed now: the sweep stops on divergence
            lrs.append(lr)
            losses.append(v)
            sm = _smooth(losses, beta)[-1]
            if not math.isfinite(sm) or (i > 0 and sm > diverge * best):
                break
            best = min(best, sm)
            loss.backward()
            opt.step()
    smoothed = _smooth(losses, beta)
    # The point that tripped the stop is kept in the curves but not used.
    usable = [i for i in range(len(smoothed)) if math.isfinite(smoothed[i]) and smoothed[i] <= diverge * best]
    n = usable[-1] + 1 if usable else 0
    lo, hi = max(1, n // 10), n - 5
    suggested = div10 = None
    if n >= 2:
        i_min = min(range(n), key=lambda i: smoothed[i])
        div10 = lrs[i_min] / 10
    if hi - lo >= 2:
        logs = [math.log(lr) for lr in lrs]
        slopes = {
            i: (smoothed[i + 1] - smoothed[i - 1]) / (logs[i + 1] - logs[i - 1]) for i in range(lo, hi)
        }
        i_steep = min(slopes, key=slopes.get)
        if slopes[i_steep] < 0:
            suggested = lrs[i_steep]
    fell = n >= 2 and min(smoothed[:n]) < 0.9 * smoothed[0]
    ok = suggested is not None and fell
    span = f"{len(lrs)} steps, lr {lrs[0]:.2g} -> {lrs[-1]:.2g}" if lrs else "no steps"
    if ok:
        msg = (
            f"{span}; loss {smoothed[0]:.4g} -> best {min(smoothed[:n]):.4g}. Suggested lr "
            f"{suggested:.3g} (steepest descent); min/10 gives {div10:.3g}. Start between them."
        )
    elif not fell:
        msg = (
            f"{span}: the loss never fell by 10 % at any lr. The model is not learning: run "
            "overfit_single_batch, check the labels, the loss and that gradients reach the "
            "parameters; or widen the sweep (end_lr)."
        )
    else:
        msg = (
            f"{span}: the loss fell but the curve is too short to find a steep part (it "
            "diverged early): lower start_lr or use more steps."
        )
    return LRRangeResult(
        "lr_range_test", ok, msg, tuple(lrs), tuple(losses), tuple(smoothed), suggested, div10
    )


# --------------------------------------------------------------------------
# 4. Gradient clipping advice
# --------------------------------------------------------------------------


def _total_norm(params: list[nn.Parameter]) -> torch.Tensor:
    """Total 2-norm of the gradients as a 0-d tensor, on the device."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norms = S.foreach_norm(grads)
    dev = norms[0].device
    return torch.linalg.vector_norm(torch.stack([n.to(dev, torch.float32) for n in norms]))


def gradient_clipping_advice(
    model: nn.Module,
    batch,
    targets,
    criterion,
    steps: int = 20,
    optimizer_factory: Callable = _adam,
    percentile: float = 90.0,
    spike_factor: float = 5.0,
) -> ClippingResult:
    """Total gradient norms over a few training steps, and a clip value.

    Records the total 2-norm of all gradients before each of ``steps``
    optimizer steps (unclipped). ``suggested_clip`` is the ``percentile``-th
    percentile of those norms (linear interpolation, as ``torch.quantile``):
    clipping there leaves ordinary steps alone and caps outliers. A step is a
    spike when its norm exceeds ``spike_factor`` (5) x the median norm; ok
    when no step spikes and every norm is finite. Batches as in
    ``lr_range_test``. Weights are restored afterwards.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    names = _trainable(model)
    params = [p for _, p in names]
    norms_dev: list[torch.Tensor] = []
    with _Preserved(model):
        opt = optimizer_factory(params)
        feed = _batches(batch, targets)
        for _ in range(steps):
            item = next(feed, None)
            if item is None:
                break
            x, y = item
            opt.zero_grad(set_to_none=True)
            _, loss = _loss(model, x, y, criterion)
            problem = _no_trainable_message(loss)
            if problem:
                msg = f"no gradients: {problem}"
                return ClippingResult("gradient_clipping_advice", False, msg, (), None, ())
            loss.backward()
            norms_dev.append(_total_norm(params))
            opt.step()
    norms_t = torch.stack([n.to(norms_dev[0].device) for n in norms_dev]).double().cpu()
    norms = tuple(norms_t.tolist())
    finite = torch.isfinite(norms_t)
    if not bool(finite.all()):
        bad = [i for i, f in enumerate(finite.tolist()) if not f]
        return ClippingResult(
            "gradient_clipping_advice", False,
            f"gradient norm not finite at step(s) {bad[:5]}: clipping cannot fix this; run "
            "find_nonfinite, lower the learning rate or use a GradScaler with AMP.",
            norms, None, tuple(bad),
        )
    clip = float(torch.quantile(norms_t, percentile / 100))
    median = float(norms_t.median())
    spikes = tuple(i for i, v in enumerate(norms) if v > spike_factor * median)
    ok = not spikes
    what = (
        f"grad norm over {len(norms)} steps: median {median:.3g}, max {max(norms):.3g}; "
        f"suggested clip_grad_norm_ max_norm = {clip:.3g} ({percentile:g}th percentile)"
    )
    if ok:
        msg = f"{what}. No spikes: clipping is optional."
    else:
        msg = (
            f"{what}. Spikes above {spike_factor:g}x the median at step(s) {list(spikes[:5])}: "
            "clip at the suggested value, lower the learning rate or add warmup."
        )
    return ClippingResult("gradient_clipping_advice", ok, msg, norms, clip, spikes)


# --------------------------------------------------------------------------
# 5. Non-finite values: where they are born
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


def _nonfinite(module: str, phase: str, why: str) -> NonfiniteResult:
    shown = {"<input>": "the input batch", "<loss>": "the loss"}.get(module)
    if shown is None:
        shown = f"module {module!r}" if module else "the model's own forward (root module)"
    msg = f"non-finite values are born in {phase} at {shown}: {why}"
    return NonfiniteResult("find_nonfinite", False, msg, module, phase)


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
    calls: list[_Call] = []
    stack: list[int] = []
    grad_hooks: list = []

    def pre(name):
        def hook(mod, args, kwargs):
            idx = len(calls)
            ins = _float_tensors((args, kwargs))
            c = _Call(name, stack[-1] if stack else None, _all_finite(ins), None, [], [])
            calls.append(c)
            stack.append(idx)
            if torch.is_grad_enabled():
                for t in ins:
                    if t.requires_grad:
                        grad_hooks.append(t.register_hook(_grad_flag(c.in_grad_ok)))

        return hook

    def post(mod, args, kwargs, out):
        if not stack:
            return
        c = calls[stack.pop()]
        outs = _float_tensors(out)
        c.out_ok = _all_finite(outs)
        if torch.is_grad_enabled():
            for t in outs:
                if t.requires_grad:
                    grad_hooks.append(t.register_hook(_grad_flag(c.out_grad_ok)))

    with _Preserved(model), _Hooks() as hooks:
        try:
            for name, mod in root.named_modules():
                hooks.add(mod.register_forward_pre_hook(pre(name), with_kwargs=True))
                hooks.add(mod.register_forward_hook(post, with_kwargs=True, always_call=True))
            for p in root.parameters():
                p.grad = None
            in_ok = _all_finite(_float_tensors(batch))
            out = _output(_call(model, batch))
            loss = criterion(out, targets) if criterion is not None else out.float().sum()
            loss_ok = _all_finite([loss])
            out_ok = _all_finite([out])
            # One host copy for all forward flags.
            one = lambda f: [] if f is None else [f]  # noqa: E731
            host = _host_all(
                [one(in_ok), one(out_ok), one(loss_ok)] + [one(f) for c in calls for f in (c.in_ok, c.out_ok)]
            )
            if not host[0]:
                why = "the batch itself holds NaN/inf; check the data pipeline."
                return _nonfinite("<input>", "forward", why)
            # Completion order: a child finishes before its parent.
            for i, c in _completed(calls):
                if host[3 + 2 * i] and not host[4 + 2 * i]:
                    return _nonfinite(
                        c.name, "forward",
                        "its inputs are finite but its output is not. Look for log/sqrt/div of "
                        "zero or negatives, exp overflow, or float16 overflow; add eps/clamps.",
                    )
            if not host[1]:
                why = "the output is not finite while every hooked module's output was."
                return _nonfinite("", "forward", why)
            if not host[2]:
                return _nonfinite(
                    "<loss>", "forward",
                    "the model output is finite but the loss is not; check the targets and what the "
                    "loss receives (log of 0, probabilities instead of logits).",
                )
            if not loss.requires_grad:
                return NonfiniteResult(
                    "find_nonfinite", True,
                    "forward is finite; the loss needs no gradient, so backward was not run.", None, None,
                )
            out_grad: list = []
            grad_hooks.append(out.register_hook(_grad_flag(out_grad)))
            loss.backward()
            return _backward_origin(root, calls, out_grad)
        finally:
            for h in grad_hooks:
                h.remove()


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


def _backward_origin(root: nn.Module, calls: list[_Call], out_grad: list) -> NonfiniteResult:
    if not _host_all([out_grad])[0]:
        return _nonfinite(
            "<loss>", "backward",
            "the gradient of the loss with respect to the output is not finite; check the loss "
            "and its targets.",
        )
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
    for i in reversed(range(len(calls))):
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


# --------------------------------------------------------------------------
# 6. Dead and saturated units
# --------------------------------------------------------------------------


def _summed(counts: list[torch.Tensor]) -> float:
    dev = counts[0].device
    return float(torch.stack([c.to(dev, torch.int64) for c in counts]).sum())


def dead_and_saturated_units(
    model: nn.Module,
    batch,
    dead_threshold: float = _DEFAULTS.dead_frac,
    saturated_threshold: float = _DEFAULTS.sat_frac,
) -> UnitsResult:
    """Dead and saturated units of every activation module, on one batch.

    The module table of ``instrument`` says which modules count: the ReLU
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
    root = unwrap(model)
    acc: dict[str, dict[str, Any]] = {}

    def hook(name, behaviour):
        def fn(mod, args, out):
            t = _output(out).detach()
            if t.dim() == 0:
                return
            a = acc.setdefault(name, {"units": 0, "dead": [], "numel": 0, "sat": []})
            if behaviour.dead:
                a["units"] += t[0].numel()
                a["dead"].append(S.zero_and_dead(t)[1])
            if behaviour.saturation is not None:
                lo, hi = behaviour.saturation(mod)
                a["numel"] += t.numel()
                if behaviour.dead:  # zeros are "dead", not saturated: top end only
                    a["sat"].append((t >= hi).sum())
                else:
                    a["sat"].append(S.saturated(t.float(), lo, hi))

        return fn

    kinds: dict[str, str] = {}
    with _Preserved(model), _Hooks() as hooks, torch.no_grad():
        for name, mod in root.named_modules():
            b = behaviour_of(mod)
            if not (b.dead or b.saturation is not None):
                continue
            kinds[name] = "+".join(k for k, on in (("dead", b.dead), ("saturated", b.saturation)) if on)
            hooks.add(mod.register_forward_hook(hook(name, b)))
        _call(model, batch)
    layers = []
    for name in kinds:
        a = acc.get(name)
        if a is None:
            continue
        dead = _summed(a["dead"]) / a["units"] if a["dead"] else None
        sat = _summed(a["sat"]) / a["numel"] if a["sat"] else None
        flagged = (dead is not None and dead >= dead_threshold) or (
            sat is not None and sat >= saturated_threshold
        )
        layers.append(LayerUnits(name, kinds[name], dead, sat, flagged))
    flagged = [l for l in layers if l.flagged]
    if not layers:
        msg = (
            "no ReLU-family or bounded activation modules were called; nothing to measure "
            "(functional activations such as F.relu are not seen)."
        )
        return UnitsResult("dead_and_saturated_units", True, msg, ())
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


# --------------------------------------------------------------------------
# 7. The protocol
# --------------------------------------------------------------------------


def run_preflight(
    model: nn.Module,
    batch,
    targets,
    criterion,
    num_classes: int | None = None,
    optimizer_factory: Callable = _adam,
    steps: int = 200,
) -> list[CheckResult]:
    """The cheap checks in the order to read them: non-finite values, initial
    loss, dead/saturated units, single-batch overfit (the longest)."""
    return [
        find_nonfinite(model, batch, targets, criterion),
        initial_loss(model, batch, targets, criterion, num_classes=num_classes),
        dead_and_saturated_units(model, batch),
        overfit_single_batch(
            model, batch, targets, criterion, optimizer_factory=optimizer_factory, steps=steps
        ),
    ]


def format_results(results: Iterable[CheckResult], width: int = 80) -> str:
    """One block per result, wrapped to ``width`` columns, and a summary line."""
    results = list(results)
    lines = []
    for r in results:
        tag = "[ ok ]" if r.ok else "[FAIL]"
        head = f"{tag} {r.name}: "
        lines.extend(
            textwrap.wrap(head + r.message, width=width, subsequent_indent=" " * 7, break_on_hyphens=False)
        )
    failed = sum(not r.ok for r in results)
    summary = f"{len(results) - failed}/{len(results)} checks passed"
    lines.append(summary + (f", {failed} failed" if failed else ""))
    return "\n".join(lines)
