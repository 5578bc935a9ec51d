"""NaN from a bad op: torch.sqrt of a value that training drives below zero.

The model compresses features with a square root, `sqrt(proj(x))`. The
projection's bias starts at +2, so every value is positive at first and the
run trains normally. As the weights grow, some projections cross zero and
sqrt returns NaN: the first non-finite value is born in the module `sqrt`
(its input is finite), and from there it spreads to the loss, every gradient
and, through the optimizer, every weight. The fix goes into that op (a
softplus or an abs before the root, or another parametrisation).
"""

import sys
from collections import OrderedDict

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, fit, main, run_dir
else:  # run as a script: python demo/nan_op.py
    from _common import CLASSES, FEATURES, classification_batches, fit, main, run_dir

NAME = "nan_op"
STEPS = 120
EXPECTED = {"kind": "nonfinite", "layer": "sqrt"}


class Sqrt(nn.Module):
    """The planted bug: a square-root activation with no guard against x < 0."""

    def forward(self, x):
        return torch.sqrt(x)


def build_model() -> nn.Module:
    model = nn.Sequential(
        OrderedDict(
            fc1=nn.Linear(FEATURES, 64),
            tanh1=nn.Tanh(),
            proj=nn.Linear(64, 64),
            sqrt=Sqrt(),
            head=nn.Linear(64, CLASSES),
        )
    )
    nn.init.constant_(model.proj.bias, 2.0)  # "positive, so sqrt is safe" -- until it is not
    return model


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train until sqrt goes NaN, into logdir/nan_op; returns the run directory."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    path = run_dir(logdir, NAME)
    with DebugWriter(path) as writer:
        writer.watch(model, optimizer=optimizer, criterion=criterion)
        fit(writer, model, optimizer, criterion, classification_batches(steps, seed), steps, progress)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
