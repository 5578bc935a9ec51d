"""Step-time cost of DebugWriter.watch(): instrumented / bare, side by side in one process.

Models (``--models``): ``mlp`` (8x1024 ReLU MLP, batch 256), ``resnet`` (a
small CIFAR ResNet, batch 32), ``transformer`` (encoder, d_model 256, 4
layers, seq 128, batch 16), ``big`` (1,000 watched modules: 250 pre-norm MLP
blocks of LayerNorm, Linear, GELU, Linear, d 64, 512 tokens), ``tiny`` (25 of
those blocks at d 16, 16 tokens: a step bound by Python and dispatch, the
regime of a small model on a GPU; run it with ``--threads 1``), ``micro`` (a
two-layer MLP whose step takes 0.2 ms: the writer's fixed cost a step is
several times the step; ``--threads 1`` too) and ``gpt`` (a
GPT-2-medium-sized decoder, 355M parameters, seq 1024, batch 8: for
``--device cuda --amp bf16``).

Modes (``--modes``), identical copies of the model trained in one process:
``bare`` (the loop alone), ``bare2`` (the same loop again: the A/A control,
whose ratio is the noise), ``clip`` (the loop plus ``clip_grad_norm_``: a read of the gradients for
their norms, then a read and a write of them for the in-place multiply it
always does), ``norms`` (the loop plus the per-parameter gradient norms
alone, ``torch._foreach_norm`` per device and dtype as the writer takes
them, and their finiteness read on the host: the one pass that per-layer
gradient norms every step cannot skip, the floor of the writer's defaults),
``watched`` (``DebugWriter.watch`` with default settings), ``stats_every_50``
(``watch(stats_every=50)``: full activation statistics every 50th step, the
cost a user can choose instead), ``stats_every_1`` (``watch(stats_every=1)``:
every step a full-statistics step, the cost of one: what the per-module
statistics, gains and unit spreads add to a step), ``hooks_kept`` (default settings with the
module hooks kept on at cheap steps: what switching them off saves),
``no_blocks`` (default settings without the block summaries the worker
writes every 8 rows: their cost), ``every_step``
(``watch(nonfinite="every_step")``), ``process`` (``watch(analysis="process")``:
the worker in a child process, whose CPU the process time does not count)
and ``watched_hand`` (default settings,
no criterion watched: the loss is computed by hand from a cast and a view of
the output, so a replay would need the kept gradient of the model's output,
whose memory shows in ``peak``). Each block runs every mode, in an order
that rotates from block to block; a watched mode gets a fresh writer per
block, whose first ``--warm`` steps are not timed. Block ``b`` times the
writer's steps ``1000 + steps*b ...``, so that over 10 blocks of 10 steps
every phase of the schedules is timed once (10 full-statistics steps, one
update-ratio step). A ratio is, per block, a mode's mean step time over the
bare loop's in the same block; printed: the median over blocks and the range
(min-max), for wall time and for the process's CPU time (every thread, the
writer's worker included), which other processes on a shared machine
disturb less. ``writer's threads``: CPU time per step of the writer's
worker and of TensorBoard's event-file writer thread (records serialised and
checksummed), and the worker's parts (assemble the row, the diagnosis
engine, the summaries' protobuf and writes). ``--own N``: N single steps
that time the writer's own CPU, its hooks on the training thread and its
threads, and ``clip_grad_norm_`` and the gradient norms alone (``norms``)
the same way in loops of their own (the floors), with the writer's cost above
each.
``--alternate N``: N rounds in which every mode trains one step in turn (a
writer per watched mode for the whole pass, its worker caught up after each
step): neighbouring steps see the same machine, so the drift that makes
block ratios noisy cancels out; printed, the ratio of the sums of steps and
the median (min-max) over chunks of 10 rounds. On CUDA, ``peak``: the most
memory a step allocated above what was allocated before it (activations,
gradients, the writer's own).
``--markdown PATH``: after the run, PATH is rewritten as a page (the tables,
the method, the command line and the machine of this run) by
``performance_page.py``, which keeps the hand-written parts of an existing
PATH (between its ``kept`` markers).

Usage:
    python benchmarks/overhead.py                          # the three CPU models
    python benchmarks/overhead.py --models mlp,resnet,transformer --modes bare,bare2,clip,watched \\
        --blocks 8 --markdown docs/performance.md          # the published page
    python benchmarks/overhead.py --models big --steps 10
    python benchmarks/overhead.py --models mlp --modes bare,bare2,watched,every_step
    python benchmarks/overhead.py --device cuda --amp bf16 --models gpt
    python benchmarks/overhead.py --amp bf16_model --models mlp  # a model trained in bfloat16
    python benchmarks/overhead.py --models tiny --threads 1 --alternate 100  # bound by Python
"""

from __future__ import annotations

import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch is imported: idle threads must not spin

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from tb_neuraldbg import DebugWriter  # noqa: E402
from tb_neuraldbg.training.hooks import forward as forward_hooks  # noqa: E402
from tb_neuraldbg.training.hooks.instrument import Instrument  # noqa: E402
from tb_neuraldbg.training.step.rows import RowAssembler  # noqa: E402
from tb_neuraldbg.training.worker.thread import Worker  # noqa: E402

# -- models ---------------------------------------------------------------------


def mlp(act=nn.ReLU):
    layers = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), act()]
    return nn.Sequential(*layers, nn.Linear(1024, 10)), (256, 1024), 10


def mlp_tanh():
    """The MLP with bounded activations, whose full steps also count the
    saturated outputs."""
    return mlp(nn.Tanh)


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


def resnet_cl():
    """The ResNet in channels_last (PyTorch's advice for CNNs on CPUs: 1.6x
    faster here): its activations, weights and gradients lie
    channel-innermost."""
    return ResNet().to(memory_format=torch.channels_last), (32, 3, 32, 32), 10


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


class MLPBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))


class Deep(nn.Module):
    """250 residual blocks of 4 watched modules: 1,000 rows (plus the head's)."""

    def __init__(self, d=64, blocks=250, classes=10):
        super().__init__()
        self.blocks = nn.Sequential(*[MLPBlock(d) for _ in range(blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(1))


def big():
    return Deep(), (32, 16, 64), 10


def tiny():
    """101 watched modules whose ops take microseconds: the step is bound by
    Python and PyTorch's dispatch, as a small model's on a GPU is by its
    kernel launches (with ``--threads 1`` the other core is free, as a GPU
    host's are), so the writer's fixed cost a step shows, and its worker's
    Python shares the GIL with the training thread's."""
    return Deep(d=16, blocks=25), (4, 4, 16), 10


def micro():
    """A two-layer MLP (32 -> 64 -> 10, batch 32) whose step takes a fifth of
    a millisecond on one thread: the smallest models (a policy network, a
    toy experiment), where the writer's fixed cost a step is several times
    the step itself."""
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)), (32, 32), 10


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GPTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2 medium's shape: 24 layers, d 1024, 16 heads, 50257 tokens (355M parameters)."""

    def __init__(self, vocab=50257, d=1024, layers=24, heads=16, seq=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[GPTBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def gpt():
    return GPT(), (8, 1024), 50257


MODELS = {"mlp": mlp, "mlp_tanh": mlp_tanh, "resnet": resnet, "resnet_cl": resnet_cl, "transformer": transformer,
          "big": big, "tiny": tiny, "micro": micro, "gpt": gpt}
MODES = ("bare", "bare2", "clip", "norms", "watched", "every_step", "watched_hand", "stats_every_50", "stats_every_1",
         "hooks_kept", "no_blocks", "process")
WATCH = {"watched": {}, "every_step": {"nonfinite": "every_step"}, "watched_hand": {},
         "stats_every_50": {"stats_every": 50}, "stats_every_1": {"stats_every": 1}, "hooks_kept": {}, "no_blocks": {},
         "process": {"analysis": "process"}}


#: ``--amp``: an autocast's type, or the type a model and its inputs are cast to.
_AUTOCAST = {"bf16": torch.bfloat16, "f16": torch.float16}
_MODEL_DTYPES = {"bf16_model": torch.bfloat16, "f16_model": torch.float16}


class _NoBlocks:
    """A block builder that builds nothing (mode ``no_blocks``)."""

    pending = 0

    def add(self, *_):
        return None

    def close(self, final=False):
        return None


def grad_norms_finite(params) -> bool:
    """Mode ``norms``: each parameter's gradient norm, one
    ``torch._foreach_norm`` per device and dtype as the writer's hooks take
    them, and whether all are finite, read on the host (the writer's check of
    every step; on CUDA its one planned synchronisation)."""
    groups: dict = {}
    for p in params:
        if p.grad is not None:
            groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    if not groups:
        return True
    finite = [torch.isfinite(torch.stack(torch._foreach_norm(g))).all() for g in groups.values()]
    return all(bool(f) for f in finite)


# -- the worker's parts (CPU time of its thread) ------------------------------------


class WorkerParts:
    """Accumulates the worker thread's CPU time in the row assembly, the
    engine and the summary writes, by wrapping them (class attributes: every
    writer of the process)."""

    def __init__(self):
        self.seconds = {"assemble": 0.0, "engine": 0.0, "write": 0.0}
        self._undo = []

    def _wrap(self, owner, name, part):
        original = getattr(owner, name)
        seconds = self.seconds

        def timed(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[part] += time.thread_time() - t0

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def install(self):
        assembler, worker = RowAssembler, Worker
        for name in ("row", "assembled"):  # (one row; a burst's rows)
            if hasattr(assembler, name):
                self._wrap(assembler, name, "assemble")
        for name in ("_write_row", "_grow_layers"):
            if hasattr(worker, name):
                self._wrap(worker, name, "write")
        import tb_neuraldbg.diagnosis as diagnosis

        self._wrap(diagnosis.Engine, "update", "engine")
        return self

    def reset(self):
        for k in self.seconds:
            self.seconds[k] = 0.0


# -- the instrumentation's own CPU time ------------------------------------------------

# The methods that hooks call (and the factories of the hook closures), by
# class: wrapped to time the hooks on the training thread, in a separate pass
# only (the wrapping costs about a microsecond a call).
_HOOKS = {
    Instrument: ("_on_model_input", "_on_model_output", "_on_loss", "_on_backward_end", "_on_step_pre",
                 "_on_step_post", "_commit"),
    forward_hooks._GoutHook: ("__call__",),
}
_HOOK_FACTORIES = {Instrument: ("_make_output_hook",), forward_hooks.ForwardHooks: ("_make_forward_hook",)}


@contextlib.contextmanager
def timed_hooks(seconds: list):
    """Adds the training thread's CPU time inside every hook to ``seconds[0]``
    (outermost calls only: ``_commit`` runs inside ``_on_step_post``)."""
    depth = [0]

    def timed(f):
        def g(*args, **kwargs):
            depth[0] += 1
            t0 = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    seconds[0] += time.thread_time() - t0

        return g

    saved = [(cls, n, getattr(cls, n)) for table in (_HOOKS, _HOOK_FACTORIES) for cls, names in table.items()
             for n in names]
    for cls, n, f in saved:
        if n in _HOOKS.get(cls, ()):
            setattr(cls, n, timed(f))
        else:
            setattr(cls, n, (lambda make: lambda self, *a: timed(make(self, *a)))(f))
    try:
        yield
    finally:
        for cls, n, f in saved:
            setattr(cls, n, f)


def own_cost(name, steps, device, amp, mode="watched") -> dict:
    """Training-thread CPU time per step of the bare loop, of the watched
    loop's hooks (watched ``mode``), of the writer's threads (timed per
    thread: less disturbed by other processes than wall time), and of
    ``clip_grad_norm_`` and of mode ``norms``'s norms in loops of their own
    (the floors, timed the same way: the training thread's CPU); and the means of
    the bare and the watched loop's whole steps on the training thread
    (PyTorch's slower calls of hooked modules, which the hooks' own time
    does not see)."""
    torch.manual_seed(0)
    with device:
        model, shape, classes = MODELS[name]()
    bare = Runner("bare", model, shape, classes, device, amp)
    clip = Runner("clip", copy.deepcopy(model), shape, classes, device, amp)
    norms = Runner("norms", copy.deepcopy(model), shape, classes, device, amp)
    hooks = [0.0]
    with timed_hooks(hooks), tempfile.TemporaryDirectory(prefix=f"overhead_{name}_") as tmp:
        watched = Runner(mode, copy.deepcopy(model), shape, classes, device, amp)
        bare.steps(2)
        clip.steps(2)
        norms.steps(2)
        watched.begin_block(tmp, 1000 - 3, 3)
        bare_cpu, watched_cpu, hooks[0], clip.clip_s, norms.clip_s = [], [], 0.0, 0.0, 0.0
        w0 = watched._worker_cpu()
        for _ in range(steps):  # interleaved single steps
            t0 = time.thread_time()
            bare.steps(1)
            bare_cpu.append(time.thread_time() - t0)
            clip.steps(1)
            norms.steps(1)
            t0 = time.thread_time()
            watched.steps(1)
            watched_cpu.append(time.thread_time() - t0)
        watched._sync()
        worker = watched._worker_cpu() - w0
        watched.end_block()
    b = statistics.median(bare_cpu)
    return {"bare_ms": 1000 * b, "hooks_ms": 1000 * hooks[0] / steps, "worker_ms": 1000 * worker / steps,
            "clip_ms": 1000 * clip.clip_s / steps, "norms_ms": 1000 * norms.clip_s / steps,
            # Means (the full steps included), the watched step's whole
            # training-thread time: PyTorch's slower calls of hooked modules too.
            "bare_mean_ms": 1000 * statistics.fmean(bare_cpu), "watched_mean_ms": 1000 * statistics.fmean(watched_cpu)}


# -- one model --------------------------------------------------------------------


class Runner:
    """One copy of the model, its optimizer and batch, trained in one mode."""

    def __init__(self, mode, model, shape, classes, device, amp):
        self.mode = mode
        self.model = model.to(device)
        self.device = device
        self.amp = amp
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.crit = nn.CrossEntropyLoss()
        gen = torch.Generator().manual_seed(0)
        if len(shape) == 2 and classes > 1000:  # token ids, next-token targets
            self.x = torch.randint(0, classes, shape, generator=gen).to(device)
            self.y = torch.randint(0, classes, shape, generator=gen).to(device)
        else:
            self.x = torch.randn(shape, generator=gen).to(device)
            self.y = torch.randint(0, classes, (shape[0],), generator=gen).to(device)
        if amp in _MODEL_DTYPES:  # trained in bfloat16 or float16: weights, gradients, activations
            self.model.to(_MODEL_DTYPES[amp])
            if self.x.is_floating_point():
                self.x = self.x.to(_MODEL_DTYPES[amp])
        self.classes = classes
        self.writer = None
        self.worker_s = 0.0
        self.clip_s = 0.0  # training-thread CPU seconds inside clip_grad_norm_ or the norms (modes "clip", "norms")
        self.peak = 0

    def begin_block(self, logdir, start_step, warm):
        """A fresh writer for a watched mode, and its first steps untimed."""
        if self.mode in WATCH:
            self.writer = DebugWriter(logdir)
            crit = None if self.mode == "watched_hand" else self.crit
            handle = self.writer.watch(self.model, optimizer=self.opt, criterion=crit, start_step=start_step,
                                       **WATCH[self.mode])
            if self.mode == "hooks_kept":
                handle.instrument.fwd.module_hooks.can_detach = False
            if self.mode == "no_blocks":
                self.writer._worker.blocks = _NoBlocks()
        self.steps(warm)
        self._sync()
        self._worker0 = self._worker_cpu()

    def _worker_cpu(self):
        """CPU seconds so far of the writer's threads: its worker and
        TensorBoard's event-file writer (which serialises and checksums the
        records: pure Python without google-crc32c's C code)."""
        if self.writer is None or self.writer._worker is None or self.writer._worker.thread is None:
            return 0.0
        threads = [self.writer._worker.thread]
        try:  # (private attributes of TensorBoard's writer: left out if they moved)
            threads.append(self.writer._get_file_writer().inner.event_writer._async_writer._worker)
        except AttributeError:
            pass
        total = 0.0
        for t in threads:
            if t is not None and t.ident is not None and t.is_alive():
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        return total

    def _sync(self):
        if self.writer is not None:
            self.writer.flush()  # the worker's share of these steps counts too
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def steps(self, n):
        autocast = (
            torch.autocast(self.device.type, dtype=_AUTOCAST[self.amp]) if self.amp in _AUTOCAST
            else contextlib.nullcontext()
        )
        for _ in range(n):
            self.opt.zero_grad(set_to_none=True)
            with autocast:
                out = self.model(self.x)
            if self.mode == "watched_hand":
                loss = F.cross_entropy(out.float().view(-1, self.classes), self.y.view(-1))
                if self.writer is not None:
                    self.writer.record(loss=loss)
            elif out.dim() == 3:  # a language model: logits per token
                loss = self.crit(out.view(-1, self.classes), self.y.view(-1))
            else:
                loss = self.crit(out, self.y)
            loss.backward()
            if self.mode == "clip":
                t0 = time.thread_time()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1e9)
                self.clip_s += time.thread_time() - t0
            elif self.mode == "norms":
                t0 = time.thread_time()
                grad_norms_finite(self.model.parameters())
                self.clip_s += time.thread_time() - t0
            self.opt.step()

    def timed(self, n):
        """(wall seconds, process CPU seconds) per step over ``n`` steps."""
        cuda = self.device.type == "cuda"
        if cuda:
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        t0, c0 = time.perf_counter(), time.process_time()
        self.steps(n)
        self._sync()
        if cuda:
            self.peak = max(self.peak, torch.cuda.max_memory_allocated(self.device) - base)
        wall, cpu = (time.perf_counter() - t0) / n, (time.process_time() - c0) / n
        self.worker_s += self._worker_cpu() - self._worker0
        return wall, cpu

    def end_block(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def one_step(self):
        """(wall, process CPU) seconds of one step, the writer's worker caught
        up with it before the clock stops (its share counts in the step)."""
        t0, c0 = time.perf_counter(), time.process_time()
        self.steps(1)
        if self.writer is not None:
            self.writer._worker.sync(60)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, time.process_time() - c0


def _runners(name, modes, device, amp) -> tuple[nn.Module, dict]:
    """The model, and a runner for each mode training an identical copy
    of it, each past its first two steps (the allocator, caches, lazy
    initialisation)."""
    torch.manual_seed(0)
    with device:  # initialised where it trains (a 355M model initialises slowly on a CPU)
        model, shape, classes = MODELS[name]()
    runners = {m: Runner(m, copy.deepcopy(model) if i else model, shape, classes, device, amp)
               for i, m in enumerate(modes)}
    for r in runners.values():
        r.steps(2)
    return model, runners


def measure(name, modes, blocks, steps, warm, device, amp, parts: WorkerParts) -> dict:
    model, runners = _runners(name, modes, device, amp)
    wall = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    parts.reset()
    with tempfile.TemporaryDirectory(prefix=f"overhead_{name}_") as tmp:
        for b in range(blocks):
            order = modes[b % len(modes):] + modes[: b % len(modes)]
            start = 1000 + steps * b - warm
            for m in order:
                r = runners[m]
                r.begin_block(os.path.join(tmp, f"{m}_{b}"), start, warm)
                w, c = r.timed(steps)
                r.end_block()
                wall[m].append(w)
                cpu[m].append(c)
    out = {"model": name, "bare_ms": 1000 * statistics.median(wall["bare"]), "ratios": {}}
    for m in modes:
        if m == "bare":
            continue
        out["ratios"][m] = (
            [a / b for a, b in zip(wall[m], wall["bare"])],
            [a / b for a, b in zip(cpu[m], cpu["bare"])],
        )
    watched_steps = blocks * steps * sum(1 for m in modes if m in WATCH)
    out["worker_ms"] = {m: 1000 * runners[m].worker_s / (blocks * steps) for m in modes if m in WATCH}
    out["parts_ms"] = {k: 1000 * v / max(watched_steps, 1) for k, v in parts.seconds.items()}
    out["params"] = sum(p.numel() for p in model.parameters())
    out["peak_gib"] = {m: r.peak / 2**30 for m, r in runners.items()} if device.type == "cuda" else None
    return out


def alternated(name, modes, rounds, warm, device, amp, chunk=10) -> dict:
    """Every mode one step in turn, ``rounds`` times (the order rotating
    from round to round), each watched mode with one writer that times its
    steps 1000, 1001, ... (its first ``warm`` untimed). Neighbouring steps
    see the same machine, so the drift that makes block ratios noisy cancels
    out. Returns, per mode, (wall, CPU) ratios to the bare loop over chunks
    of ``chunk`` rounds (a sum of steps over a sum of steps: each chunk of
    10 holds one full-statistics step) and over the whole pass."""
    _, runners = _runners(name, modes, device, amp)
    times = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix=f"alternated_{name}_") as tmp:
        for m, r in runners.items():
            r.begin_block(os.path.join(tmp, m), 1000 - warm, warm)
        for i in range(rounds):
            for m in modes[i % len(modes):] + modes[: i % len(modes)]:
                times[m].append(runners[m].one_step())
        for r in runners.values():
            r.end_block()
    out = {}
    for m in modes:
        if m == "bare":
            continue
        ratios = []
        for k in (0, 1):  # wall, CPU
            mine, bare = [t[k] for t in times[m]], [t[k] for t in times["bare"]]
            chunks = [sum(mine[j : j + chunk]) / sum(bare[j : j + chunk]) for j in range(0, rounds, chunk)]
            ratios.append((sum(mine) / sum(bare), chunks))
        out[m] = ratios
    return out


def _fmt(series):
    med = statistics.median(series)
    return f"{med:.3f} ({min(series):.2f}-{max(series):.2f})"


def machine(threads: int, device: torch.device) -> dict:
    """What the figures depend on: the system, the CPU, Python, torch, the
    threads, and the load average (other processes on the machine)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "system": platform.platform(),
        "cpu": cpu or "unknown",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                   else f"CPU, {threads} torch thread{'s' if threads != 1 else ''}"),
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "load": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,resnet,transformer", help=f"comma-separated, of {','.join(MODELS)}")
    p.add_argument("--modes", default="bare,bare2,clip,watched", help=f"comma-separated, of {','.join(MODES)}")
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--steps", type=int, default=10, help="timed steps per block")
    p.add_argument("--warm", type=int, default=3, help="untimed steps of each fresh writer")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", choices=("none", *_AUTOCAST, *_MODEL_DTYPES), default="none",
                   help="bf16, f16: autocast to bfloat16, float16; bf16_model, f16_model: the model and its inputs"
                        " cast to it")
    p.add_argument("--own", type=int, default=20, metavar="STEPS",
                   help="steps of the pass that times the instrumentation itself (0: none)")
    p.add_argument("--alternate", type=int, default=0, metavar="ROUNDS",
                   help="rounds of a pass that alternates the modes step by step (0: none; 100 covers the schedule)")
    p.add_argument("--markdown", metavar="PATH",
                   help="after the run, write the page of its method, command, machine and tables to PATH")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "bare" not in modes:
        modes.insert(0, "bare")
    unknown = [m for m in modes if m not in MODES] + [m for m in args.models.split(",") if m.strip() not in MODELS]
    if unknown:
        p.error(f"unknown: {unknown}")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    box = machine(args.threads, device)
    print(f"torch {box['torch']}, {box['device']}, OMP_WAIT_POLICY={box['omp_wait_policy']}, amp {args.amp}")
    print(f"machine: {box['system']}, {box['cpu']}, {box['cpus']} logical CPUs, Python {box['python']}"
          + (f", load average {box['load'][0]:.2f}" if box["load"] else ""))
    print(f"{args.blocks} blocks x {args.steps} timed steps per mode (+{args.warm} untimed per fresh writer),"
          f" modes interleaved")
    print("ratio to 'bare' in the same block: median (min-max) over blocks; wall = step time,")
    print("cpu = process CPU time (all threads); bare2 is the A/A control (the noise); clip and norms: floors")
    parts = WorkerParts().install()
    results = []
    for name in (n.strip() for n in args.models.split(",") if n.strip()):
        r = measure(name, modes, args.blocks, args.steps, args.warm, device, args.amp, parts)
        r["alternated"], r["own"] = None, {}
        results.append(r)
        print(f"\n{name}: {r['params'] / 1e6:.1f}M parameters, bare step {r['bare_ms']:.1f} ms")
        peak = r["peak_gib"]
        print(f"  {'mode':<12} {'wall':>22} {'cpu':>22}" + ("   peak GiB" if peak else ""))
        if peak:
            print(f"  {'bare':<12} {'1':>22} {'1':>22} {peak['bare']:>10.2f}")
        for m, (w, c) in r["ratios"].items():
            print(f"  {m:<12} {_fmt(w):>22} {_fmt(c):>22}" + (f" {peak[m]:>10.2f}" if peak else ""))
        for m, ms in r["worker_ms"].items():
            print(f"  writer's threads ({m}: its worker and the event-file writer): {ms:.2f} ms CPU per step")
        print("  worker parts, all watched modes: " + ", ".join(f"{k} {v:.2f} ms" for k, v in r["parts_ms"].items()))
        if args.alternate:
            print(f"  alternated step by step ({args.alternate} rounds of one step a mode from step 1000, the writer's"
                  f" worker caught up after each step): ratio of the sums, and median (min-max) over chunks of 10")
            r["alternated"] = alternated(name, modes, args.alternate, args.warm, device, args.amp)
            for m, ((w, wc), (c, cc)) in r["alternated"].items():
                print(f"  {m:<12} wall {w:.3f} {_fmt(wc):>22}   cpu {c:.3f} {_fmt(cc):>22}")
        for m in (m for m in modes if m in WATCH and args.own):
            o = r["own"][m] = own_cost(name, args.own, device, args.amp, m)
            print(f"  own CPU time per step ({m}, {args.own} steps 1000..): hooks {o['hooks_ms']:.2f} ms on the"
                  f" training thread + writer's threads {o['worker_ms']:.2f} ms, against {o['bare_ms']:.1f} ms of the"
                  f" bare loop's training thread: 1 + {(o['hooks_ms'] + o['worker_ms']) / o['bare_ms']:.3f}")
            own = o["hooks_ms"] + o["worker_ms"]
            for what, floor in (("clip_grad_norm_", o["clip_ms"]), ("the gradient norms", o["norms_ms"])):
                print(f"    {what} alone, timed the same way: {floor:.2f} ms (1 + {floor / o['bare_ms']:.3f});"
                      f" the writer {'above' if own >= floor else 'below'} that floor: {own - floor:+.2f} ms"
                      f" ({100 * (own - floor) / o['bare_ms']:+.1f} %)")
            extra = o["watched_mean_ms"] - o["bare_mean_ms"]
            print(f"    the training thread's whole step, mean: {o['watched_mean_ms']:.1f} ms against the bare"
                  f" loop's {o['bare_mean_ms']:.1f} ms: {extra:+.2f} ms ({100 * extra / o['bare_mean_ms']:+.1f} %,"
                  f" PyTorch's calls of hooked modules included)")
    if args.markdown:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import performance_page

        box["load_after"] = os.getloadavg() if hasattr(os, "getloadavg") else None
        performance_page.write(args.markdown, argv, vars(args), modes, box, results)
        print(f"\nwrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
