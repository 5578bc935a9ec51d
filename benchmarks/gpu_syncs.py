"""Host synchronisations during instrumented CUDA steps (benchmarks/gpu_check.sh, part 2).

Counted with ``torch.cuda.set_sync_debug_mode``: none of the writer's own
with ``nonfinite="every_step"`` (mode "error" must raise nothing); with the
default ``nonfinite="replay"`` one a step, the planned read of the step's
non-finite check, and none of its own with a GradScaler (the scaler's
found-inf read decides); over cheap steps, full-statistics steps and
histogram and update-ratio steps. No replay without a non-finite value, and
a NaN planted in the batch under a GradScaler is replayed once.

``--device cpu`` runs the same loops on the CPU (bf16 autocast, a CPU
GradScaler) without counting synchronisations, which only CUDA has: the
tests run it so that a GPU session's minutes are not lost to a Python
error. Exit status 0 when every check passed.

Usage: python benchmarks/gpu_syncs.py [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import warnings

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

STEPS = 25  # steps 12..36: cheap ones and two full-statistics steps (20, 30)
# Histograms and update ratios at those two steps too (every 100 by default):
# every kind of step runs under the sync check.
EVERY = {"hist_every": 10, "update_every": 10}


class Checks:
    """Prints each check; remembers whether all passed."""

    def __init__(self):
        self.ok = True

    def __call__(self, what, cond, detail=""):
        self.ok &= bool(cond)
        print(f"  {'ok  ' if cond else 'FAIL'} {what}{': ' + detail if detail else ''}")


def _make(dev):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.GELU(),
                         nn.LayerNorm(512), nn.Linear(512, 10)).to(dev)


def _sync_debug(dev, debug):
    """``torch.cuda.set_sync_debug_mode(debug)`` for the block (CUDA only)."""
    if dev.type != "cuda":
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def mode():
        torch.cuda.set_sync_debug_mode(debug)
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(0)

    return mode()


def _synchronize(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run(dev, mode, scaler, debug, poison_at=None):
    """(sync warnings during the timed steps, the instrument or None)"""
    model = _make(dev)  # (seeded: every run gets the same model and batch)
    x = torch.randn(64, 256, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    sc = torch.amp.GradScaler(dev.type) if scaler else None
    writer = inst = None
    if mode:
        writer = DebugWriter(tempfile.mkdtemp())
        inst = writer.watch(model, optimizer=opt, criterion=crit, scaler=sc, nonfinite=mode, **EVERY).instrument

    def step(i):
        opt.zero_grad(set_to_none=True)
        xb = x
        if i == poison_at:
            xb = x.clone()
            xb[3, 5] = float("nan")
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            out = model(xb)
        loss = crit(out.float(), y)
        if sc is not None:
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
        else:
            loss.backward()
            opt.step()

    for i in range(12):  # the writer's first steps (all full), allocations, pinned buffers
        step(i)
    _synchronize(dev)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _sync_debug(dev, debug):
            for i in range(12, 12 + STEPS):
                step(i)
    _synchronize(dev)
    if writer is not None:
        writer.close()
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    # a sync refused in the writer's thread would show as a warning of the writer
    mine = [str(w.message) for w in caught if "tb_neuraldbg" in str(w.message)]
    if mine:
        print("  writer warnings:", mine[:3])
    return syncs, inst


def _where(syncs):
    return sorted({f"{w.filename}:{w.lineno}" for w in syncs})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    dev = torch.device(p.parse_args(argv).device)
    counted = dev.type == "cuda"  # (only CUDA has host synchronisations to count)
    if not counted:
        print("on the CPU: the loops and the replays checked, no synchronisation counted")
    check = Checks()
    for scaler in (False, True):
        bare, _ = run(dev, None, scaler, "warn")
        print(f"with{'' if scaler else 'out'} a GradScaler: the bare loop syncs {len(bare)} times in {STEPS} steps"
              f" {_where(bare)}")
        try:
            every, _ = run(dev, "every_step", scaler, "error" if not scaler else "warn")
            if counted:
                check('nonfinite="every_step": no sync of its own'
                      + (' (sync_debug_mode "error")' if not scaler else ""),
                      len(every) == len(bare), f"{len(every)} syncs {_where(every)}")
        except RuntimeError as e:
            check('nonfinite="every_step" under sync_debug_mode "error"', False, str(e).splitlines()[0])
        replay, inst = run(dev, "replay", scaler, "warn")
        if counted:
            planned = 0 if scaler else STEPS
            check(f'nonfinite="replay": {"none of its own (the scaler decides)" if scaler else "one planned sync a step"}',
                  len(replay) - len(bare) == planned, f"{len(replay)} syncs against {len(bare)} bare {_where(replay)}")
        check("no replay without a non-finite value", inst.replays == 0, f"{inst.replays} replays")

    # A planted NaN in the batch at step 20: the scaler skips the step, and it is
    # replayed (at scaler.update(), its pre-hook having not run) once.
    _, inst = run(dev, "replay", True, "warn", poison_at=20)
    check("a NaN batch under a GradScaler is replayed, once", inst.replays == 1 and inst.mode == "replay",
          f"{inst.replays} replays, mode {inst.mode}")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
