"""The CPU kernel's large reads on one core against in parts on torch's threads, under both
OpenMP wait policies.

What it measures, right after torch wrote the values (as the writer reads them): the norms of an
8x1024 MLP's 33 MB of gradients after a backward, the moments of a conv's fresh output (ReLU,
batch 32) of 4, 2 and 1 MB, and a histogram step's binning pass over 4 MB, which follows the
moments' read (``cpu_kernel.histogram_known``). Each read is timed on one core, in parts (``cpu_kernel``'s default)
and on one core again (the A/A control), the three alternated read by read; printed, the medians.

Why both policies: the other benchmarks set ``OMP_WAIT_POLICY=PASSIVE`` (this VM throttles when
both cores spin), but a user's process runs under OpenMP's default, where torch's intra-op
threads spin for a while after each op. A thread of the kernel's own then shares a core with
one (it was slower than one core: the reason the reads in parts run on torch's own threads).
Each policy runs in a child process of its own (the policy is read when OpenMP starts).

Usage:
    python benchmarks/reads_in_parts.py                 # both policies, 60 rounds
    python benchmarks/reads_in_parts.py --rounds 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

POLICIES = ("default", "PASSIVE")
MODES = ("one core", "in parts", "one core again")


def _timed(read) -> float:
    t0 = time.perf_counter()
    read()
    return time.perf_counter() - t0


def measure(rounds: int) -> dict[str, dict[str, float]]:
    """{read: {mode: median seconds}} in this process (its policy)."""
    import torch
    from torch import nn

    from tb_neuraldbg.training import cpu_kernel as K

    torch.set_num_threads(2)
    if not K.reads_in_parts():
        raise SystemExit("the kernel does not read in parts here (no OpenMP, or not torch's runtime)")
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    mlp = nn.Sequential(*layers, nn.Linear(1024, 10))
    x, y = torch.randn(256, 1024), torch.randint(0, 10, (256,))
    params = list(mlp.parameters())

    def gradients():
        mlp.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(mlp(x), y).backward()
        grads = [p.grad for p in params]
        return lambda: K.norms(grads)

    def activation(channels: int, side: int, bins: int = 0):
        conv = nn.Conv2d(channels, channels, 3, 1, 1)
        batch = torch.randn(32, channels, side, side)

        def fresh():
            with torch.no_grad():
                out = torch.relu(conv(batch))
            if bins:  # (the moments read first, untimed, as a histogram step reads them)
                known = K.moments(out, out.numel() // out.shape[0])
                return lambda: K.histogram_known(out, bins, known)
            return lambda: K.moments(out, out.numel() // out.shape[0])

        return fresh

    reads = {
        "MLP gradients' norms (33 MB)": gradients,
        "activation moments, 4 MB": activation(32, 32),
        "activation moments, 2 MB": activation(64, 16),
        "activation moments, 1 MB": activation(128, 8),
        "histogram bins, 4 MB": activation(32, 32, bins=30),  # (stats.HIST_BINS)
    }
    times: dict[str, dict[str, list[float]]] = {r: {m: [] for m in MODES} for r in reads}
    try:
        for _ in range(rounds):
            for name, prepare in reads.items():
                for mode in MODES:
                    read = prepare()  # (values written just before, as in training)
                    K.set_reads_in_parts(mode == "in parts")
                    times[name][mode].append(_timed(read))
    finally:
        K.set_reads_in_parts(True)
    return {r: {m: statistics.median(v) for m, v in by_mode.items()} for r, by_mode in times.items()}


def _child(policy: str, rounds: int) -> str:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", "--rounds", str(rounds)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"the {policy} policy's run failed:\n{r.stderr[-2000:]}")
    return r.stdout


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        for name, by_mode in measure(args.rounds).items():
            one, parts, again = (by_mode[m] * 1e6 for m in MODES)
            print(f"  {name:30s} one core {one:7.0f} us, in parts {parts:7.0f} us ({parts / one:.2f}x), "
                  f"A/A {again / one:.2f}x")
        return 0
    for policy in POLICIES:
        print(f"OMP_WAIT_POLICY={policy if policy != 'default' else '(unset: OpenMP default)'}, "
              f"medians of {args.rounds}:")
        print(_child(policy, args.rounds), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
