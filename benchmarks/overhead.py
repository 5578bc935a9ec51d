"""Step-time cost of DebugWriter.watch(): instrumented / bare, on CPU.

Three models: an 8x1024 ReLU MLP (batch 256), a small ResNet (CIFAR-sized,
batch 32) and a small Transformer encoder (d_model 256, 4 layers, seq 128,
batch 16). For each model, three identical copies train in interleaved
blocks inside one process: "bare", "bare2" (an A/A control: the same bare
loop again, so its ratio shows the noise) and "watched" (default settings
of ``DebugWriter.watch``). Blocks rotate their order; a ratio is the
median over blocks of (mode's mean step time / bare's in the same block),
for wall time and for the process's CPU time (all threads, the writer's
worker included), which other processes on a shared machine disturb less.
A third figure times the instrumentation itself: the hooks' wall time plus
the worker thread's CPU time per step, over the bare step time.
A block covers a whole number of ``stats_every`` periods so the cheap and
the full-statistics steps are weighted as in a real run; after a 10-step
warm-up (the writer measures every one of the first ``stats_every`` steps in
full), 10 blocks of 10 steps also include one update-ratio step (every 100).

Usage: python benchmarks/overhead.py [--models mlp,resnet,transformer]
           [--blocks 10] [--steps 10] [--threads 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse  # noqa: E402
import copy  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tb_neuraldbg import DebugWriter  # noqa: E402


def mlp():
    layers = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(1024, 10)), (256, 1024), 10


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x), inplace=True)


class ResNet(nn.Module):
    def __init__(self, widths=(32, 64, 128), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def resnet():
    return ResNet(), (32, 3, 32, 32), 10


class Encoder(nn.Module):
    def __init__(self, d=256, layers=4, classes=10):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


def transformer():
    return Encoder(), (16, 128, 256), 10


MODELS = {"mlp": mlp, "resnet": resnet, "transformer": transformer}


class Runner:
    def __init__(self, model, shape, classes, watched: bool, logdir: str | None):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        self.crit = nn.CrossEntropyLoss()
        self.x = torch.randn(shape)
        self.y = torch.randint(0, classes, (shape[0],))
        self.writer = None
        self.hook_s = 0.0
        if watched:
            self.writer = DebugWriter(logdir)
            handle = self.writer.watch(model, optimizer=self.opt, criterion=self.crit)
            self._time_hooks(handle.instrument)

    def _time_hooks(self, inst):
        # Every hook body runs through Instrument._guard: time it, so the
        # instrumentation's own share of a step is measured directly too.
        guard = inst._guard

        def timed(*args):
            t0 = time.perf_counter()
            try:
                return guard(*args)
            finally:
                self.hook_s += time.perf_counter() - t0

        inst._guard = timed

    def worker_cpu(self) -> float:
        """CPU seconds used so far by the writer's worker thread."""
        thread = self.writer._worker.thread
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))

    def steps(self, n: int) -> tuple[float, float]:
        """(wall seconds, process CPU seconds) per step over ``n`` steps."""
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            self.opt.zero_grad(set_to_none=True)
            self.crit(self.model(self.x), self.y).backward()
            self.opt.step()
        if self.writer is not None:
            self.writer.flush()  # the worker's share of these steps counts too
        return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n

    def close(self):
        if self.writer is not None:
            self.writer.close()


def measure(name: str, blocks: int, steps_per_block: int) -> dict:
    torch.manual_seed(0)
    model, shape, classes = MODELS[name]()
    tmp = tempfile.mkdtemp(prefix=f"overhead_{name}_")
    runners = {
        "bare": Runner(model, shape, classes, False, None),
        "bare2": Runner(copy.deepcopy(model), shape, classes, False, None),
        "watched": Runner(copy.deepcopy(model), shape, classes, True, tmp),
    }
    order = list(runners)
    # Warm-up: the allocator, layer discovery, and the first stats_every
    # steps that the writer measures in full (a one-off start-up cost).
    for r in runners.values():
        r.steps(10)
    wall = {k: [] for k in runners}
    cpu = {k: [] for k in runners}
    watched = runners["watched"]
    watched.hook_s, worker0, n_watched = 0.0, watched.worker_cpu(), 0
    for b in range(blocks):
        rot = order[b % 3 :] + order[: b % 3]
        for k in rot:
            w, c = runners[k].steps(steps_per_block)
            wall[k].append(w)
            cpu[k].append(c)
        n_watched += steps_per_block
    hooks_ms = 1000 * watched.hook_s / n_watched
    worker_ms = 1000 * (watched.worker_cpu() - worker0) / n_watched
    for r in runners.values():
        r.close()

    def ratio(series, k):
        return statistics.median(a / b for a, b in zip(series[k], series["bare"]))

    return {
        "model": name,
        "bare_ms": 1000 * statistics.median(wall["bare"]),
        "aa": ratio(wall, "bare2"),
        "watched": ratio(wall, "watched"),
        "aa_cpu": ratio(cpu, "bare2"),
        "watched_cpu": ratio(cpu, "watched"),
        "hooks_ms": hooks_ms,
        "worker_ms": worker_ms,
        "inside": 1 + (hooks_ms + worker_ms) / (1000 * statistics.median(wall["bare"])),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,resnet,transformer")
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--steps", type=int, default=10, help="steps per block (a multiple of stats_every)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.blocks} blocks x {args.steps} steps")
    print("ratios to 'bare', median over blocks; wall = step time, cpu = process CPU time;")
    print("inside = 1 + (hook time + worker CPU time) per step / bare step time (an upper bound:")
    print("  hook time includes waits for the GIL while the worker holds it)")
    print(
        f"{'model':<12} {'bare ms':>8} {'A/A wall':>9} {'wall':>7} {'A/A cpu':>8} {'cpu':>7}"
        f" {'hooks ms':>9} {'worker ms':>10} {'inside':>7}"
    )
    for name in args.models.split(","):
        r = measure(name.strip(), args.blocks, args.steps)
        print(
            f"{r['model']:<12} {r['bare_ms']:>8.1f} {r['aa']:>9.3f} {r['watched']:>6.3f}x"
            f" {r['aa_cpu']:>8.3f} {r['watched_cpu']:>6.3f}x {r['hooks_ms']:>9.2f} {r['worker_ms']:>10.2f}"
            f" {r['inside']:>6.3f}x",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
