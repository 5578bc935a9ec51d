"""docs/performance.md from a run of benchmarks/overhead.py (its ``--markdown PATH``).

The page is the run's tables, method, command line and machine. What an
existing page holds between ``<!-- kept -->`` and ``<!-- /kept -->`` (above
the tables) and between ``<!-- kept below -->`` and ``<!-- /kept below -->``
(at the end) is written by hand and carried over unchanged; the rest is
regenerated.
"""

from __future__ import annotations

import os
import re
import shlex
import statistics

#: The hand-written blocks, by name ("" above the tables, "below" at the end).
KEPT = re.compile(r"<!-- kept( below|) -->.*?<!-- /kept\1 -->", re.S)


def _default_kept(name: str) -> str:
    space = f" {name}" if name else ""
    return f"<!-- kept{space} -->\n(Written by hand: a regeneration keeps it.)\n<!-- /kept{space} -->"

#: What each mode trains, in the words of the page.
MODE_TEXT = {
    "bare": "the training loop alone (the reference of every ratio)",
    "bare2": "the same loop again: the A/A control, whose ratio is the noise of the machine",
    "clip": "the loop plus `torch.nn.utils.clip_grad_norm_` (a read of the gradients for their norms, then a read"
            " and a write for the in-place multiply it always does)",
    "norms": "the loop plus the per-parameter gradient norms alone (`torch._foreach_norm` per device and dtype) and"
             " their finiteness read on the host: the one pass that per-layer norms at every step cannot skip",
    "watched": "`DebugWriter.watch(model, optimizer=..., criterion=...)` with default settings",
    "every_step": "`watch(nonfinite=\"every_step\")`",
    "watched_hand": "default settings, the loss computed by hand (no criterion watched)",
    "stats_every_50": "`watch(stats_every=50)`",
    "hooks_kept": "default settings with the module hooks kept on at cheap steps",
    "no_blocks": "default settings without the block summaries",
    "process": "`watch(analysis=\"process\")`: the worker in a child process, whose CPU the process time does not"
               " count",
}


def _range(series) -> str:
    return f"{statistics.median(series):.3f} ({min(series):.2f}-{max(series):.2f})"


def _params(n: int) -> str:
    return f"{n / 1e6:.1f}M parameters" if n >= 100_000 else f"{n:,} parameters"


def _pct(ms: float, of: float) -> str:
    return f"{100 * ms / of:+.1f} %"


def command(argv, path: str) -> str:
    """The command line of the run, with the package's environment variables
    that were set, and ``--markdown`` naming the page as given."""
    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items()) if k.startswith("TB_NEURALDBG_")]
    return " ".join([*env, "python", "benchmarks/overhead.py", shlex.join(argv)])


def method(args: dict, modes) -> list[str]:
    out = [
        "## Method",
        "",
        "Identical copies of each model (the same initial weights, the same batch, SGD with momentum) train in one"
        " process, one copy per mode:",
        "",
    ]
    out += [f"- `{m}`: {MODE_TEXT[m]};" for m in modes]
    out[-1] = out[-1][:-1] + "."
    out += [
        "",
        "How they are timed:",
        "",
        f"- **Interleaved blocks.** {args['blocks']} blocks; in each, every mode trains {args['steps']} timed steps"
        f" (a watched mode with a fresh writer, its first {args['warm']} steps untimed), in an order that rotates"
        " from block to block. Block *b* times the writer's steps 1000 + "
        f"{args['steps']}*b onward, so the schedule's phases (full activation statistics every 10th step,"
        " histograms and update ratios every 100th) are all timed. The writer is flushed before the clock stops:"
        " its worker's share counts.",
        "- **Ratios.** Per block, a mode's mean step time over the bare loop's in the same block; the table gives"
        " the median over blocks and the range (min-max). Neighbouring steps see the same machine, so a drift of"
        " its speed affects every mode alike. `bare2` is the A/A control: what it shows is the noise, and a"
        " difference smaller than its spread is not measured.",
        "- **Wall and CPU.** Wall is the step's elapsed time; CPU is the process's CPU time, every thread (the"
        " writer's worker and the event-file writer included), which other processes on a shared machine disturb"
        " less.",
        f"- **Threads.** {args['threads']} torch thread{'s' if args['threads'] != 1 else ''}. `OMP_WAIT_POLICY=PASSIVE` is set before torch is"
        " imported, so idle OpenMP threads sleep instead of spinning and a mode's CPU time is its own work.",
    ]
    if args["alternate"]:
        out.append(f"- **Alternated.** Then {args['alternate']} rounds in which every mode trains one step in turn"
                   " (one writer per watched mode for the pass, its worker caught up after each step): the ratio"
                   " of the sums of steps.")
    if args["own"]:
        out.append(f"- **Own CPU.** Then {args['own']} single steps from step 1000, interleaved, timed with"
                   " per-thread CPU clocks: the writer's hooks on the training thread and its threads (its worker"
                   " and TensorBoard's event-file writer), against the bare loop's training thread alone (torch's"
                   " other threads not counted: stricter than the CPU ratio). `clip_grad_norm_` and the gradient"
                   " norms alone are timed the same way, as floors.")
    return out


def machine_lines(box: dict) -> list[str]:
    load = ""
    if box.get("load") and box.get("load_after"):
        busy = max(box["load"][0], box["load_after"][0]) > (box["cpus"] or 1) / 2
        load = (f"- Load average (1 min): {box['load'][0]:.2f} at the start, {box['load_after'][0]:.2f} at the end"
                + (": other jobs shared the machine, and the A/A column (`bare2`) is their noise" if busy else ""))
    return [
        "## Machine",
        "",
        f"- {box['system']}, {box['cpu']}, {box['cpus']} logical CPUs",
        f"- Python {box['python']}, torch {box['torch']}, {box['device']},"
        f" `OMP_WAIT_POLICY={box['omp_wait_policy']}`",
        *([load] if load else []),
    ]


def ratio_table(results, modes, alternated: bool) -> list[str]:
    head = ["model", "bare step", "mode", "wall: median (range)", "CPU: median (range)"]
    if alternated:
        head += ["alternated: wall", "alternated: CPU"]
    head.append("writer's threads, CPU a step")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        first = True
        for m, (wall, cpu) in r["ratios"].items():
            label = f"`{m}`" + (" (A/A: the noise)" if m == "bare2" else "")
            cells = [f"{r['model']} ({_params(r['params'])})" if first else "",
                     f"{r['bare_ms']:.1f} ms" if first else "", label, _range(wall), _range(cpu)]
            if alternated:
                (aw, _), (ac, _) = r["alternated"][m]
                cells += [f"{aw:.3f}", f"{ac:.3f}"]
            cells.append(f"{r['worker_ms'][m]:.2f} ms" if m in r["worker_ms"] else "")
            out.append("| " + " | ".join(cells) + " |")
            first = False
    return out


def own_table(results) -> list[str]:
    out = [
        "| model | mode | hooks (training thread) | writer's threads | own CPU above the bare training thread"
        " | `clip_grad_norm_` alone | gradient norms alone | training thread's step, mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for m, o in r["own"].items():
            bare, own = o["bare_ms"], o["hooks_ms"] + o["worker_ms"]
            extra = o["watched_mean_ms"] - o["bare_mean_ms"]
            out.append(
                f"| {r['model']} | `{m}` | {o['hooks_ms']:.2f} ms | {o['worker_ms']:.2f} ms | {_pct(own, bare)}"
                f" (bare {bare:.1f} ms) | {o['clip_ms']:.2f} ms ({_pct(o['clip_ms'], bare)}) | {o['norms_ms']:.2f} ms"
                f" ({_pct(o['norms_ms'], bare)}) | {extra:+.2f} ms ({_pct(extra, o['bare_mean_ms'])}) |")
    return out


def write(path: str, argv, args: dict, modes, box: dict, results) -> None:
    kept = {"": _default_kept(""), "below": _default_kept("below")}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for found in KEPT.finditer(f.read()):
                kept[(found.group(1) or "").strip()] = found.group(0)
    lines = [
        "# Performance",
        "",
        "What `DebugWriter.watch()` adds to a training step. This page is written by"
        " `benchmarks/overhead.py --markdown`: the notes between the `kept` markers are written by hand, the rest"
        " is the last run's figures, method, command and machine.",
        "",
        kept[""],
        "",
        "## Results",
        "",
        "Ratios to the bare loop (1.000: no cost).",
        "",
        *ratio_table(results, modes, bool(args["alternate"])),
    ]
    if any(r["own"] for r in results):
        lines += ["", "The writer's own CPU time a step (the *Own CPU* pass below):", "", *own_table(results)]
    parts = [r for r in results if any(r["parts_ms"].values())]
    if parts:
        lines += ["", "The worker's CPU a step, by part (every watched mode's steps): "
                  + "; ".join(f"{r['model']}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in r["parts_ms"].items())
                              for r in parts) + "."]
    lines += [
        "",
        *method(args, modes),
        "",
        "## Command",
        "",
        "```bash",
        command(argv, path),
        "```",
        "",
        *machine_lines(box),
        "",
        kept["below"],
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
