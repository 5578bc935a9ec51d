"""The watched modules' forward hooks, taken off for cheap steps and put back in place.

A module with any hook takes PyTorch's slow call path, so a cheap step
whose hooks would only note that their module ran is cheaper without them
(``benchmarks/overhead.py``'s mode ``hooks_kept`` measures the difference).
:class:`ModuleHooks` owns every module's hook and handle; ``set_off``
detaches or re-attaches them through the modules' hook dicts, which keeps
each handle valid for ``remove()`` and costs a fraction of PyTorch's public
register and remove.
"""

from __future__ import annotations

from torch import nn

__all__ = ["ModuleHooks"]


def _alone(m: nn.Module, hook_id: int) -> bool:
    """Hook ``hook_id`` is the only hook of ``m`` (forward, pre-forward or
    backward): without it, PyTorch calls ``m`` on its fast path."""
    return (
        list(m._forward_hooks) == [hook_id]
        and not m._forward_pre_hooks
        and not m._backward_hooks
        and not getattr(m, "_backward_pre_hooks", None)
    )


def _detach(m: nn.Module, hook_id: int) -> None:
    kwargs = m._forward_hooks_with_kwargs  # (fails first, before anything changed)
    del m._forward_hooks[hook_id]
    kwargs.pop(hook_id, None)


def _attach(m: nn.Module, hook_id: int, hook) -> None:
    kwargs, hooks = m._forward_hooks_with_kwargs, m._forward_hooks
    hooks[hook_id] = hook
    hooks.move_to_end(hook_id, last=False)  # first, where it was when it was alone
    kwargs[hook_id] = True


class ModuleHooks:
    """Every watched module's forward hook (``with_kwargs``), and whether it
    is off. Only a hook that is its module's only hook comes off: with
    another one the slow path stays anyway, and putting ours back first
    keeps the hooks' order only because ours was alone."""

    def __init__(self):
        # [module, hook, handle, detached]
        self._entries: list[list] = []
        self.off = False
        #: False keeps them on for good (PyTorch's hook dicts were not as expected).
        self.can_detach = True

    def add(self, m: nn.Module, hook) -> None:
        self._entries.append([m, hook, m.register_forward_hook(hook, with_kwargs=True), False])

    def set_off(self, off: bool) -> None:
        """Take the hooks off (``off``) or put them back. Raises what
        PyTorch's hook dicts raise, after putting every hook back on and
        turning detaching off for good."""
        off = off and self.can_detach
        if off == self.off:
            return
        self.off = off
        try:
            for entry in self._entries:
                m, hook, handle, detached = entry
                if off:
                    if not detached and _alone(m, handle.id):
                        _detach(m, handle.id)
                        entry[3] = True
                elif detached:
                    _attach(m, hook=hook, hook_id=handle.id)
                    entry[3] = False
        except Exception:
            self.can_detach = self.off = False
            for entry in self._entries:
                if entry[3]:
                    entry[3] = False
                    entry[2] = entry[0].register_forward_hook(entry[1], with_kwargs=True, prepend=True)
            raise

    def remove(self) -> None:
        """Remove every hook (a detached one is simply not there)."""
        for entry in self._entries:
            entry[2].remove()
        self._entries.clear()
