"""Plumbing shared by the demo scenarios: synthetic data, the MLP they are
built from, the ordinary training loop, run directories and the command line.

Nothing here imports tb_neuraldbg: each scenario creates its DebugWriter and
calls watch() itself, so it reads as an example. healthy.py and amp_scaler.py
also spell out their loop (the plain one, and the one with a GradScaler);
the other scenarios plant their bug in the model, the data or the schedule
and train with fit(), the same plain loop.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections import OrderedDict
from typing import Callable, Iterable, Iterator, Optional

import torch
from torch import nn

__all__ = [
    "DEFAULT_LOGDIR",
    "FEATURES",
    "CLASSES",
    "Progress",
    "classification_batches",
    "regression_batches",
    "mlp",
    "fit",
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


def mlp(*widths: int, activation=nn.ReLU, **after: nn.Module) -> nn.Sequential:
    """An MLP through `widths` (inputs, hidden..., outputs) with named children.

    mlp(FEATURES, 64, 64, CLASSES) is fc1, relu1, fc2, relu2, head: the names
    the report and the heatmap show. The activation's name is its class name
    in lower case (tanh1, ...); modules in `after` follow the head, in order.
    """
    act = activation.__name__.lower()
    layers = OrderedDict()
    for i, (n_in, n_out) in enumerate(zip(widths[:-2], widths[1:-1]), start=1):
        layers[f"fc{i}"] = nn.Linear(n_in, n_out)
        layers[f"{act}{i}"] = activation()
    layers["head"] = nn.Linear(widths[-2], widths[-1])
    layers.update(after)
    return nn.Sequential(layers)


def fit(
    writer,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    criterion: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    progress: Progress = None,
    after_step: Optional[Callable[[], None]] = None,
) -> None:
    """The ordinary training loop of healthy.py over `batches` (`steps` of them).

    Logs train/loss to `writer` at every step; `after_step` (e.g. a
    scheduler's step) runs after every optimizer.step().
    """
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if after_step:
            after_step()
        writer.add_scalar("train/loss", loss.item(), step)
        if progress:
            progress(step + 1, steps)


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
