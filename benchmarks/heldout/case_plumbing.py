"""Shared plumbing of the held-out cases (every corpus): a raw-statistics probe and the command line.

A case module defines ``CASE`` (its truth record, or ``healthy=True``), ``train(fixed, writer,
probe)`` (one deterministic CPU training; ``writer`` is a DebugWriter or None, ``probe`` a
:class:`Probe` or None) and ``truth(bug, twin)`` (the check, on raw statistics, that the planted
bug really does what the truth record says; ``twin`` is the fixed run). ``main(globals())`` gives
every case the same command line:

    python CASE.py --logdir DIR    # the buggy (or healthy) training under a DebugWriter
    python CASE.py --truth         # bug and fixed twin without the writer, probed; prints JSON

The probe exists so the truth is measured independently of tb_neuraldbg: it reads ``p.grad`` and
parameter values after backward, and forward outputs through plain hooks, never the writer.
"""

import argparse
import json
import math
import sys

import torch

__all__ = ["Probe", "main", "ratio", "mean", "series", "loss_fell"]


def _norm(tensors):
    """The L2 norm of a list of tensors, as a float (0.0 for an empty list)."""
    total = 0.0
    for t in tensors:
        total += float(t.detach().double().pow(2).sum())
    return math.sqrt(total)


class Probe:
    """Raw per-step statistics of a plain run: loss, per-module grad and weight norms, activations.

    Call ``step(loss)`` after ``backward()`` and before ``optimizer.step()``. ``acts`` names the
    modules whose forward outputs are summarised (zero fraction, std, max |x|, finite fraction,
    fraction with |x| >= 0.99).
    """

    def __init__(self, model, acts=()):
        self.model = model
        self.rows = []
        self._acts = {}
        self._handles = []
        for name, mod in model.named_modules():
            if name in acts:
                self._handles.append(mod.register_forward_hook(self._hook(name)))

    def _hook(self, name):
        def hook(_mod, _inp, out):
            if isinstance(out, tuple):
                out = out[0]
            o = out.detach().float()
            finite = torch.isfinite(o)
            ok = o[finite]
            self._acts[name] = {
                "zero": float((o == 0).float().mean()),
                "std": float(ok.std()) if ok.numel() > 1 else 0.0,
                "maxabs": float(ok.abs().max()) if ok.numel() else 0.0,
                "finite": float(finite.float().mean()),
                "sat99": float((o.abs() >= 0.99).float().mean()),  # tanh/sigmoid-range saturation
            }
        return hook

    def step(self, loss, **extra):
        """Record one step: the loss, every module's own gradient/weight norms, the activations."""
        grads, weights = {}, {}
        for name, mod in self.model.named_modules():
            own = list(mod.parameters(recurse=False))
            if not own:
                continue
            with_grad = [p.grad for p in own if p.grad is not None]
            grads[name] = _norm(with_grad) if with_grad else None
            weights[name] = _norm(own)
        row = {"loss": float(loss.detach()), "grad": grads, "weight": weights, "act": dict(self._acts)}
        row.update(extra)
        self.rows.append(row)
        self._acts = {}


def series(rows, part, name, key=None):
    """One statistic over the steps: ``part`` is grad/weight/act, ``name`` a module."""
    out = []
    for r in rows:
        v = r[part].get(name)
        if key is not None and v is not None:
            v = v[key]
        out.append(v)
    return out


def mean(values):
    """Mean of the finite, non-None values (nan when none)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else float("nan")


def loss_fell(rows, factor, first=10, last=20):
    """A healthy case's check that it trains: mean loss of the last steps < factor x the first's."""
    a = mean([r["loss"] for r in rows[:first]])
    b = mean([r["loss"] for r in rows[-last:]])
    return b < factor * a, f"loss first-{first} {a:.3g} -> last-{last} {b:.3g}"


def ratio(a, b):
    """a / b, guarded against zero (a tiny floor keeps orders of magnitude readable)."""
    return a / max(b, 1e-30)


def main(ns):
    """Command line of one case module (pass its ``globals()``)."""
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=(ns.get("__doc__") or "").splitlines()[0])
    ap.add_argument("--logdir", help="train the case under a DebugWriter writing here")
    ap.add_argument("--fixed", action="store_true", help="train the fixed twin instead")
    ap.add_argument("--truth", action="store_true", help="run bug and twin probed, print the check")
    args = ap.parse_args()
    if args.truth:
        bug, twin = _probe_run(ns, False), None
        if not ns["CASE"].get("healthy"):
            twin = _probe_run(ns, True)
        held, detail = ns["truth"](bug, twin)
        print(json.dumps({"held": bool(held), "detail": detail}))
        return 0
    if not args.logdir:
        ap.error("give --logdir or --truth")
    from tb_neuraldbg import DebugWriter

    writer = DebugWriter(args.logdir)
    try:
        ns["train"](fixed=args.fixed, writer=writer, probe=None)
    finally:
        writer.close()
    return 0


def _probe_run(ns, fixed):
    """Train a case without the writer, probed; returns the probe's rows."""
    holder = {}

    def make(model, acts=()):
        holder["p"] = Probe(model, acts)
        return holder["p"]

    ns["train"](fixed=fixed, writer=None, probe=make)
    return holder["p"].rows if "p" in holder else []


if __name__ == "__main__":
    sys.exit("import this module from a case")
