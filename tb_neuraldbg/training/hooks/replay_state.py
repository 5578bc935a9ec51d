"""What a re-run of a step may change besides torch's generators and the buffers: put back afterwards.

A forward can draw from Python's ``random`` and numpy's global generator
(LayerDrop, stochastic depth, random masking, augmentation inside the model)
and change state that is no parameter nor buffer (a tensor attribute, a list
or a counter that counts calls). Run once more by :func:`.replay.rerun`, it
would shift the user's next draws and change what the next steps compute.
So (``tests/test_replay_state.py`` against an unwatched twin decides):

* **Python's and numpy's global generators** (:class:`HostRng`): their state
  before the step's forward is taken at every step, the cheap way
  (``random.getstate()``, and numpy's Mersenne Twister words read through
  its public ctypes interface instead of ``np.random.get_state()``, which
  costs many times more); the re-run starts from it, as the step did, and
  they are set back to their state after the step when it ends.
* **The modules' own state** (:class:`ModuleState`), taken at the re-run
  only (a dirty step: the rare one): every attribute of the modules and the
  criterion (not torch's registries), rebound where the re-run rebound it;
  in place, the contents of what it holds, a few levels down: tensors that
  are no parameter nor buffer, numpy arrays, lists, dicts, sets, deques.
  Other objects are not followed (one may be shared with another thread).
* **Generators it cannot rewind** (a ``np.random.default_rng()``, a
  ``random.Random()``, a ``torch.Generator`` of the user's), found in the
  modules' state and in the globals and closures of their forward: their
  state before the step was not kept, so a re-run that draws from one does
  not reproduce the step. Their state is put back and :func:`ModuleState.restore`
  names them: the instrument then counts every module exactly from that
  step on instead (the every-step fallback, warned once).
"""

from __future__ import annotations

import collections
import ctypes
import random
import sys
import types
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["HostRng", "ModuleState"]

_MISSING = object()

# -- Python's and numpy's global generators ---------------------------------

_MT_WORDS = 624  # numpy's mt19937_state: uint32_t key[624]; int pos
_MT_BYTES = _MT_WORDS * 4 + 4


def _np_global():
    """The bit generator behind ``np.random.*`` (numpy >= 1.25 names it)."""
    get = getattr(np.random, "get_bit_generator", None)
    return get() if get is not None else np.random.mtrand._rand._bit_generator


def _mt_readable() -> bool:
    """Whether numpy's global generator is a Mersenne Twister whose words
    read through ctypes are the ones ``get_state()`` gives (checked on a
    throwaway generator, once: a numpy whose layout differs takes the slow
    road)."""
    try:
        bg = np.random.MT19937(0)
        np.random.RandomState(bg).random_sample(3)
        raw = ctypes.string_at(bg.ctypes.state_address, _MT_BYTES)
        st = bg.state["state"]
        return bool(
            np.array_equal(np.frombuffer(raw, np.uint32, _MT_WORDS), st["key"])
            and int.from_bytes(raw[-4:], sys.byteorder, signed=True) == st["pos"]
        )
    except Exception:  # noqa: BLE001 -- no ctypes interface: the slow road
        return False


_MT_OK = _mt_readable()


class HostRng:
    """Python's ``random`` and numpy's global generator: :meth:`before`, at
    every step's capture, as cheaply as they allow; :meth:`now` (the whole
    state, at a re-run's start and end only)."""

    __slots__ = ("py", "np_words", "np_full")

    def __init__(self, py, np_words, np_full):
        self.py, self.np_words, self.np_full = py, np_words, np_full

    @classmethod
    def before(cls) -> "HostRng":
        bg = _np_global()
        if _MT_OK and type(bg) is np.random.MT19937:
            # The 2.5 KB of key and position: a copy, where get_state() builds
            # a dict and an array (the Gaussian it may keep is taken from the
            # state after the step, see start_rerun).
            return cls(random.getstate(), ctypes.string_at(bg.ctypes.state_address, _MT_BYTES), None)
        return cls(random.getstate(), None, np.random.get_state(legacy=False))

    @classmethod
    def now(cls) -> "HostRng":
        return cls(random.getstate(), None, np.random.get_state(legacy=False))

    def start_rerun(self, after: "HostRng") -> None:
        """Set the state the step's forward started from (``after``: the
        whole state now, which gives what the cheap copy lacks)."""
        random.setstate(self.py)
        if self.np_full is not None:
            np.random.set_state(self.np_full)
            return
        words = self.np_words
        full = after.np_full
        if full.get("bit_generator") != "MT19937":  # (changed since the capture)
            return
        pos = int.from_bytes(words[-4:], sys.byteorder, signed=True)
        key = np.frombuffer(words, np.uint32, _MT_WORDS).copy()
        # A Gaussian kept by np.random.normal(): the one after the step (the
        # same unless the forward drew an odd number of them; the replay's
        # check on its gradients then decides).
        np.random.set_state(("MT19937", key, pos, full["has_gauss"], full["gauss"]))

    def put_back(self) -> None:
        random.setstate(self.py)
        np.random.set_state(self.np_full)


# -- the modules' state ----------------------------------------------------------

# torch's own bookkeeping in a module's __dict__ (hook registries, the
# parameter/buffer/child dicts): never the forward's state, and the
# instrument itself switches hooks on and off around the re-run.
_TORCH_KEYS = frozenset(vars(nn.Module()))
_DEPTH = 3  # levels below a module attribute whose contents are kept
_WIDE = 256  # a container with more items is copied, its items not followed

_NP_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
_GENERATORS = (random.Random, torch.Generator, *_NP_GENERATORS)


def _rng_state(g) -> Any:
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    if isinstance(g, np.random.RandomState):
        return g.get_state(legacy=False)
    if isinstance(g, np.random.BitGenerator):
        return g.state
    if isinstance(g, torch.Generator):
        return g.get_state()
    return g.getstate()  # random.Random


def _set_rng_state(g, state) -> None:
    if isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    elif isinstance(g, np.random.RandomState):
        g.set_state(state)
    elif isinstance(g, np.random.BitGenerator):
        g.state = state
    elif isinstance(g, torch.Generator):
        g.set_state(state)
    else:
        g.setstate(state)


def _same_rng_state(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_rng_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _rng_name(g) -> str:
    for cls, name in ((np.random.Generator, "a numpy Generator"), (np.random.RandomState, "a numpy RandomState"),
                      (np.random.BitGenerator, "a numpy BitGenerator"), (torch.Generator, "a torch.Generator")):
        if isinstance(g, cls):
            return name
    return "a random.Random"


def _is_global_rng(g) -> bool:
    return g is random._inst or g is np.random.mtrand._rand or g is _np_global()


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # an inference tensor: cannot change in place
        return None


class ModuleState:
    """What the modules hold, taken before a re-run and put back after it
    (see the module's docstring). ``skip``: the ids of tensors restored
    elsewhere (parameters, buffers)."""

    def __init__(self, modules, skip: set):
        self._skip = skip
        self._seen: set[int] = set()
        self._dicts: list = []  # (a module's __dict__, its copy)
        self._tensors: list = []  # (tensor, version, copy | None)
        self._arrays: list = []  # (ndarray, copy)
        self._lists: list = []  # (list | deque | bytearray, items)
        self._maps: list = []  # (dict, copy)
        self._sets: list = []  # (set, copy)
        self._rngs: list = []  # (where, generator, state)
        for m in modules:
            self._module(m, 0)
        for fn in {id(type(m).forward): type(m).forward for m in modules}.values():
            self._code(fn)

    # -- taking ---------------------------------------------------------------

    def _module(self, m: nn.Module, depth: int) -> None:
        if id(m) in self._seen:
            return
        self._seen.add(id(m))
        d = vars(m)
        self._dicts.append((d, dict(d)))
        for k, v in d.items():
            if k not in _TORCH_KEYS:
                self._value(v, depth, f"{type(m).__name__}.{k}")

    def _code(self, fn) -> None:
        """Generators a forward reaches through its globals and closure."""
        fn = getattr(fn, "__func__", fn)
        if not isinstance(fn, types.FunctionType):
            return
        for v in fn.__globals__.values():
            if isinstance(v, _GENERATORS):
                self._rng(v, f"{fn.__module__}.{fn.__qualname__} (a global)")
        for cell in fn.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(v, _GENERATORS):
                self._rng(v, f"{fn.__qualname__} (a closure)")

    def _rng(self, g, where: str) -> None:
        if id(g) in self._seen or _is_global_rng(g):
            return
        self._seen.add(id(g))
        self._rngs.append((where, g, _rng_state(g)))

    def _value(self, v, depth: int, where: str) -> None:
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            return  # immutable: a rebinding, put back with its owner's dict
        if isinstance(v, torch.Tensor):
            self._tensor(v)
            return
        if isinstance(v, _GENERATORS):
            self._rng(v, where)
            return
        if depth >= _DEPTH or id(v) in self._seen:
            return
        if isinstance(v, nn.Module):
            self._module(v, depth + 1)  # (a module in a plain list: not a child)
            return
        self._seen.add(id(v))
        if isinstance(v, np.ndarray):
            if v.flags.writeable and v.dtype != object:
                self._arrays.append((v, v.copy()))
            return
        if isinstance(v, (list, collections.deque, bytearray)):
            items = list(v)
            self._lists.append((v, items))
        elif isinstance(v, dict):
            items = list(v.values())
            self._maps.append((v, dict(v)))
        elif isinstance(v, (set, frozenset)):
            items = list(v)
            if isinstance(v, set):
                self._sets.append((v, set(v)))
        elif isinstance(v, tuple):
            items = list(v)
        else:
            # Other objects are not followed: one held by a module may be
            # shared with another thread (a logger, a writer), whose changes
            # during the re-run must not be undone.
            return
        if len(items) <= _WIDE:
            for x in items:
                self._value(x, depth + 1, where)

    def _tensor(self, t: torch.Tensor) -> None:
        if id(t) in self._skip or id(t) in self._seen or isinstance(t, nn.Parameter):
            return
        self._seen.add(id(t))
        version = _version(t)
        if version is None:
            return
        # A tensor of an autograd graph (an activation kept from the last
        # forward) or of another layout is not copied: watched, named if changed.
        keep = None
        if t.grad_fn is None and t.layout is torch.strided and not t.is_nested:
            with torch.no_grad():
                keep = t.detach().clone()
        self._tensors.append((t, version, keep))

    # -- putting back ---------------------------------------------------------

    def restore(self) -> list[str]:
        """Put everything back; returns what the re-run could not reproduce
        nor this put back exactly: the generators it drew from (their state
        after the step is put back) and tensors it changed in place that
        were not copied."""
        lost = []
        for d, saved in self._dicts:
            for k in [k for k in d if k not in saved and k not in _TORCH_KEYS]:
                del d[k]  # (made by the re-run)
            for k, v in saved.items():
                if k not in _TORCH_KEYS and d.get(k, _MISSING) is not v:
                    d[k] = v
        for lst, items in self._lists:
            if len(lst) != len(items) or any(a is not b for a, b in zip(lst, items)):
                if isinstance(lst, collections.deque):
                    lst.clear()
                    lst.extend(items)
                else:
                    lst[:] = items
        for m, saved in self._maps:
            if len(m) != len(saved) or any(m.get(k, _MISSING) is not v for k, v in saved.items()):
                m.clear()
                m.update(saved)
        for s, saved in self._sets:
            if s != saved:
                s.clear()
                s.update(saved)
        for a, saved in self._arrays:
            if a.shape == saved.shape:
                np.copyto(a, saved)
        with torch.no_grad():
            for t, version, keep in self._tensors:
                if _version(t) == version:
                    continue
                if keep is None:
                    lost.append("a tensor held by a module that is not copied (of an autograd graph, or sparse)")
                elif t.shape == keep.shape:
                    t.copy_(keep)
                else:
                    t.set_(keep)
        for where, g, state in self._rngs:
            if not _same_rng_state(_rng_state(g), state):
                _set_rng_state(g, state)
                lost.append(f"{_rng_name(g)} at {where}, whose state before the step was not kept")
        return lost
