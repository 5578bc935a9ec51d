"""Dead ReLUs: a layer whose bias starts at -10 never lets a unit through.

With inputs of unit scale, fc2's pre-activations sit around -10, so relu2
outputs exact zeros for every unit of every sample from step 0: no signal
flows forward through it and no gradient flows back, and fc1 and fc2 never
learn. The dead layer is relu2 (the fix: a sane bias init, LeakyReLU,
normalisation, or a lower learning rate when ReLUs die during training).
"""

import sys

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, fit, main, mlp, run_dir
else:  # run as a script: python demo/dead_relu.py
    from _common import CLASSES, FEATURES, classification_batches, fit, main, mlp, run_dir

NAME = "dead_relu"
STEPS = 150
EXPECTED = {"kind": "dead_activation", "layer": "relu2"}


def build_model() -> nn.Module:
    model = mlp(FEATURES, 64, 64, 64, CLASSES)  # fc1, relu1, fc2, relu2, fc3, relu3, head
    nn.init.constant_(model.fc2.bias, -10.0)  # the planted bug
    return model


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train the net with a dead layer into logdir/dead_relu; returns the run directory."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    path = run_dir(logdir, NAME)
    with DebugWriter(path) as writer:
        writer.watch(model, optimizer=optimizer, criterion=criterion)
        fit(writer, model, optimizer, criterion, classification_batches(steps, seed), steps, progress)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
