"""Plumbing shared by the demo scenarios: synthetic data, run directories and
the command-line entry point.

Nothing here touches tb_neuraldbg: each scenario shows its use of the writer
in full (DebugWriter, watch, an ordinary loop), so it reads as an example.
"""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Callable, Iterator, Optional

import torch

__all__ = [
    "DEFAULT_LOGDIR",
    "FEATURES",
    "CLASSES",
    "Progress",
    "classification_batches",
    "regression_batches",
    "run_dir",
    "main",
]

DEFAULT_LOGDIR = "neuraldbg_demo"
FEATURES = 32
CLASSES = 10
BATCH = 64

# progress(done_steps, total_steps), called after every training step.
Progress = Optional[Callable[[int, int], None]]


def _teacher(seed: int, outputs: int) -> tuple[torch.Generator, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return gen, torch.randn(FEATURES, outputs, generator=gen) / FEATURES**0.5


def classification_batches(
    steps: int, seed: int = 0, batch_size: int = BATCH
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches of a learnable 10-class task: x ~ N(0, 1), y = argmax(x @ W)."""
    gen, teacher = _teacher(seed, CLASSES)
    for _ in range(steps):
        x = torch.randn(batch_size, FEATURES, generator=gen)
        yield x, (x @ teacher).argmax(dim=1)


def regression_batches(
    steps: int, seed: int = 0, batch_size: int = BATCH
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches of a learnable regression: y = tanh(x @ W) with 4 outputs."""
    gen, teacher = _teacher(seed, 4)
    for _ in range(steps):
        x = torch.randn(batch_size, FEATURES, generator=gen)
        yield x, torch.tanh(x @ teacher)


def run_dir(logdir: str, name: str) -> str:
    """The run directory logdir/name, emptied of a previous demo run.

    TensorBoard merges every event file of a directory into one run, so a
    rerun must not leave the old file next to the new one. Only a directory
    that looks like an earlier run (it holds TensorBoard event files) is
    removed; anything else is left alone and reported.
    """
    path = os.path.join(logdir, name)
    if os.path.isdir(path) and os.listdir(path):
        if not any(f.startswith("events.out.tfevents") for f in os.listdir(path)):
            raise FileExistsError(
                f"{path} exists and is not a TensorBoard run; choose another --logdir"
            )
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    return path


def main(scenario, argv=None) -> int:
    """Entry point of `python demo/<scenario>.py [--logdir DIR] [--steps N]`."""
    parser = argparse.ArgumentParser(
        prog=f"python demo/{scenario.NAME}.py",
        description=scenario.__doc__.strip().splitlines()[0],
    )
    parser.add_argument(
        "--logdir",
        default=DEFAULT_LOGDIR,
        help=f"TensorBoard logdir; the run goes to LOGDIR/{scenario.NAME} "
        f"(default: ./{DEFAULT_LOGDIR})",
    )
    parser.add_argument("--steps", type=int, default=scenario.STEPS, help="training steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Tiny models train faster on one thread than paying for thread wake-ups.
    torch.set_num_threads(1)
    path = scenario.run(args.logdir, steps=args.steps, seed=args.seed)
    print(f"wrote {path}")
    print(f"report:      neuraldbg report {args.logdir}")
    print(f"TensorBoard: tensorboard --logdir {args.logdir}")
    return 0
