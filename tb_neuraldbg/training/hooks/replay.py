"""Running one step again, with every check on, to find where its non-finite values come from.

With ``watch(nonfinite="replay")`` (the default) the hooks measure no module on
cheap steps; each step, before the optimizer uses the gradients, the
instrument checks what is computed anyway (the gradient norms, the loss, the
batch's statistics; on full steps every statistic). Where one is NaN or inf,
:func:`rerun` runs that step's forward and backward again (as fairseq's
NanDetector, JAX's ``debug_nans`` and Megatron's rerun machine do) while the
hooks count the non-finite values of every module's output, input and output
gradient, and puts back whatever the re-run touched:

* on the **unwrapped** model (never through DDP: no collective), with the
  batch of the step's first forward, its RNG state (the CPU generator and
  the CUDA generators of the devices in use: dropout draws the same masks)
  and its autocast state;
* the backward is a ``torch.autograd.grad`` into new tensors: weights, their
  ``.grad`` and the optimizer are never touched;
* Python's ``random`` and numpy's global generator start from their state
  before the step's forward too (:class:`.replay_state.HostRng`);
* afterwards every generator's state is the one after the original step
  again, every buffer (BatchNorm running statistics) holds its value from
  before the re-run, and so does the modules' and the criterion's own state
  (:class:`.replay_state.ModuleState`: their attributes, and in place the
  tensors, arrays and containers they hold: a counter of calls, a list).

The backward needs the gradient the loss sent into the model's output. Two
sources, the cheaper first (:class:`StepCapture`):

* the watched criterion was called on a model output, itself, a view of it
  (``logits.view(-1, V)``) or a cast of it (``out.float()``): the loss is
  computed again from the re-run's output (times the GradScaler's scale);
  nothing is kept;
* otherwise (a loss written by hand, ``record(loss=...)``) the gradient of each
  output tensor is kept by one tensor hook, from the backward to the step's
  check: the memory of one model output (for a language model its logits,
  batch x sequence x vocabulary; 0.8 GB for 8 x 1024 x 50257 in bf16).

Not restorable, so a replay that depends on them does not reproduce: a
generator object of the user's (``np.random.default_rng()``,
``random.Random()``, a ``torch.Generator``), whose state before the step is
not kept: one the modules hold or their forward reaches (globals, closure)
is put back after the re-run, which then raises :class:`ReplayError`; a
batch changed in place after the forward; state outside the modules (a
global counter). The instrument checks that the re-run reproduced the step
(the same parameters with non-finite gradients) and otherwise falls back to
the every-step flags.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..modules import iter_tensors
from .replay_state import HostRng, ModuleState

__all__ = ["StepCapture", "LossCall", "capture", "rerun", "ReplayError"]

# Output tensors of the model followed for the backward (a tuple or dict output).
MAX_OUTPUTS = 8


class ReplayError(RuntimeError):
    """The step cannot be re-run (the message says why)."""


@dataclass
class LossCall:
    """The watched criterion's call on a model output: ``criterion(how(output[index]), *rest, **kwargs)``."""

    index: int
    how: tuple  # ("same",) | ("view", size, stride, offset) | ("cast", dtype)
    rest: tuple
    kwargs: dict
    autocast: tuple


@dataclass
class StepCapture:
    """What the first forward of a step leaves for a possible re-run: its
    arguments (by reference) and their in-place versions, the RNG (torch's,
    Python's and numpy's) and autocast states before it, its output tensors
    (weakly), and either the criterion's call on them or the gradients the
    backward sent into them."""

    args: tuple
    kwargs: dict
    versions: list
    rng: tuple
    autocast: tuple
    host_rng: HostRng | None = None
    outputs: list | None = None  # weak references to the output tensors
    loss_call: LossCall | None = None
    criterion_calls: int = 0
    out_grads: dict = field(default_factory=dict)  # output index -> gradient

    def keep_grad(self, index: int):
        """A tensor hook for output ``index``: keeps its gradient unless the
        criterion's call can give it again."""
        me = weakref.ref(self)

        def hook(grad):
            cap = me()
            if cap is not None and cap.loss_call is None:
                cap.out_grads[index] = grad
            return None

        return hook

    def note_criterion(self, args, kwargs, autocast_state: tuple) -> None:
        """A call of the watched criterion: its first argument related to a
        model output gives the cheap backward source; a second call in the
        same step (two losses) needs the kept gradients instead."""
        self.criterion_calls += 1
        if self.criterion_calls > 1:
            self.loss_call = None
            return
        if not args or self.outputs is None:
            return
        inp = args[0]
        if not isinstance(inp, torch.Tensor):
            return
        for i, ref in enumerate(self.outputs):
            out = ref()
            if out is not None:
                how = _relation(inp, out)
                if how is not None:
                    self.loss_call = LossCall(i, how, tuple(args[1:]), dict(kwargs), autocast_state)
                    return

    def unchanged(self) -> bool:
        """The batch was not modified in place since the forward."""
        return [_version_of(t) for t in iter_tensors(self.args, self.kwargs)] == self.versions


def _version_of(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors
        return None


def _relation(inp: torch.Tensor, out: torch.Tensor) -> tuple | None:
    """How the criterion's input was made from a model output: the very
    tensor, a view of it, or a cast of it; None for anything else."""
    if inp is out:
        return ("same",)
    base = out if out._base is None else out._base
    if inp._base is not None and inp._base is base:
        return ("view", tuple(inp.size()), tuple(inp.stride()), inp.storage_offset(),
                tuple(out.size()), tuple(out.stride()), out.storage_offset())
    fn = inp.grad_fn
    if (
        fn is not None
        and out.grad_fn is not None
        and type(fn).__name__ == "ToCopyBackward0"
        and fn.next_functions
        and fn.next_functions[0][0] is out.grad_fn
        and inp.shape == out.shape
        and inp.device == out.device
    ):
        return ("cast", inp.dtype)
    return None


def _apply(how: tuple, out: torch.Tensor) -> torch.Tensor:
    if how[0] == "same":
        return out
    if how[0] == "cast":
        return out.to(how[1])
    size, stride, offset, osize, ostride, ooffset = how[1:]
    if (tuple(out.size()), tuple(out.stride()), out.storage_offset()) != (osize, ostride, ooffset):
        raise ReplayError("the model's output has another memory layout in the re-run")
    base = out if out._base is None else out._base
    return base.as_strided(size, stride, offset)


def autocast_state(device_types) -> tuple:
    """(device type, enabled, dtype) for each device type: what
    :func:`autocast_context` restores."""
    return tuple((dt, torch.is_autocast_enabled(dt), torch.get_autocast_dtype(dt)) for dt in device_types)


def autocast_context(state: tuple) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for dt, enabled, dtype in state:
        stack.enter_context(torch.autocast(dt, dtype=dtype, enabled=enabled))
    return stack


_CLONE_STATE = hasattr(torch.Generator, "clone_state")  # (torch >= 2.4)


def rng_state(cuda_devices) -> tuple:
    """(CPU generator state, {CUDA device index: state}). The CPU state as a
    clone of the generator where torch has one: taken at every step, and
    ``get_rng_state``'s tensor op costs many times more in situ (its code
    gone cold since the last step)."""
    cpu = torch.default_generator.clone_state() if _CLONE_STATE else torch.get_rng_state()
    return cpu, {i: torch.cuda.get_rng_state(i) for i in cuda_devices}


def set_rng_state(state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu.get_state() if isinstance(cpu, torch.Generator) else cpu)
    for i, s in cuda.items():
        torch.cuda.set_rng_state(s, i)


def capture(args, kwargs, cuda_devices, device_types) -> StepCapture:
    """Before a step's first forward: its arguments, RNG and autocast states."""
    return StepCapture(
        args=args,
        kwargs=kwargs,
        versions=[_version_of(t) for t in iter_tensors(args, kwargs)],
        rng=rng_state(cuda_devices),
        autocast=autocast_state(device_types),
        host_rng=HostRng.before(),
    )


def rerun(
    root: nn.Module,
    criterion: nn.Module | None,
    cap: StepCapture,
    params: list,
    scale: torch.Tensor | None,
    cuda_devices,
) -> tuple[Any, list]:
    """Run the captured step again on ``root``; returns (the loss of the
    re-run or None, the gradients of ``params``, None where unused; an empty
    list when no backward source was kept). The hooks on ``root`` measure
    as they are set. Raises :class:`ReplayError` (or whatever the model
    raises) when it cannot, or when it drew from a generator it could not
    rewind (see :mod:`.replay_state`); the state is put back in every case."""
    if not cap.unchanged():
        raise ReplayError("the batch was modified in place after the forward")
    after = rng_state(cuda_devices)
    host_after = HostRng.now()
    modules = list(root.modules()) + ([criterion] if criterion is not None else [])
    with torch.no_grad():
        # By module and name: a forward may assign a new tensor to a buffer.
        buffers = [(m, k, b, b.clone()) for m in modules for k, b in m._buffers.items() if b is not None]
    state = ModuleState(modules, {id(b) for _, _, b, _ in buffers})
    lost: list = []
    try:
        set_rng_state(cap.rng)
        if cap.host_rng is not None:
            cap.host_rng.start_rerun(host_after)
        result = _run(root, criterion, cap, params, scale)
    finally:
        set_rng_state(after)
        host_after.put_back()
        with torch.no_grad():
            for m, k, b, saved in buffers:
                m._buffers[k] = b
                b.copy_(saved)
        lost = state.restore()
    if lost:
        raise ReplayError("the forward uses what a re-run cannot rewind: " + "; ".join(dict.fromkeys(lost)))
    return result


def _run(root, criterion, cap: StepCapture, params: list, scale) -> tuple[Any, list]:
    """The re-run itself: :func:`rerun`'s forward and backward."""
    with torch.enable_grad(), autocast_context(cap.autocast):
        out = root(*cap.args, **cap.kwargs)
    outs = list(iter_tensors(out))[:MAX_OUTPUTS]
    loss = None
    call = cap.loss_call
    if call is not None and criterion is not None:
        if call.index >= len(outs):
            raise ReplayError("the model returned fewer outputs in the re-run")
        with torch.enable_grad(), autocast_context(call.autocast):
            loss = criterion(_apply(call.how, outs[call.index]), *call.rest, **call.kwargs)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ReplayError("the criterion's loss is not a single value")
        loss = loss.reshape(())
        targets, grads = [loss * scale.to(loss.device) if scale is not None else loss], [None]
    elif cap.out_grads:
        if max(cap.out_grads) >= len(outs):
            raise ReplayError("the model returned fewer outputs in the re-run")
        idx = sorted(cap.out_grads)
        targets, grads = [outs[i] for i in idx], [cap.out_grads[i] for i in idx]
        if any(t.shape != g.shape for t, g in zip(targets, grads)):
            raise ReplayError("the model's output has another shape in the re-run")
    else:
        return None, []
    # The leaves the step's backward reached: the parameters, and batch
    # tensors that require grad (an input gradient, adversarial training).
    inputs = [p for p in params if p.requires_grad]
    inputs += [t for t in iter_tensors(cap.args, cap.kwargs) if t.requires_grad and t.is_leaf]
    if not inputs:
        return loss, []
    with torch.enable_grad():
        got = torch.autograd.grad(targets, inputs, grads, allow_unused=True)
    by_id = {id(p): g for p, g in zip(inputs, got)}
    return (None if loss is None else loss.detach()), [by_id.get(id(p)) for p in params]
