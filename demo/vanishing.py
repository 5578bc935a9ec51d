"""Vanishing gradients below one saturated tanh layer.

fc2's biases are initialised to +-4 (a sign pattern meant to be +-0.04: a
units slip). Every unit of tanh2 then sits deep in a flat tail of tanh, where
its derivative 1 - tanh^2 is about 1e-3, so the gradient that reaches fc2 and
fc1 is a thousand times smaller than at the layers above: they stop learning
from step 0 and the loss hardly moves. The saturated layer, tanh2, is where
the fix goes (a sane init, normalisation before the activation, or a
non-saturating activation).
"""

import sys
from collections import OrderedDict

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, main, run_dir
else:  # run as a script: python demo/vanishing.py
    from _common import CLASSES, FEATURES, classification_batches, main, run_dir

NAME = "vanishing"
STEPS = 150
# The root cause is the saturated layer; the vanishing gradients below it are
# its symptom, and the report shows them too.
EXPECTED = {"kind": "saturated_activation", "layer": "tanh2", "also": ["vanishing_gradient"]}


def build_model() -> nn.Module:
    model = nn.Sequential(
        OrderedDict(
            fc1=nn.Linear(FEATURES, 128),
            tanh1=nn.Tanh(),
            fc2=nn.Linear(128, 128),
            tanh2=nn.Tanh(),
            fc3=nn.Linear(128, 128),
            tanh3=nn.Tanh(),
            head=nn.Linear(128, CLASSES),
        )
    )
    # The planted bug: +-4 where +-0.04 was meant.
    with torch.no_grad():
        model.fc2.bias.copy_(4.0 * torch.sign(torch.randn(128)))
    return model


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train the saturating tanh net into logdir/vanishing; returns the run directory."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    path = run_dir(logdir, NAME)
    with DebugWriter(path) as writer:
        writer.watch(model, optimizer=optimizer, criterion=criterion)
        for step, (x, y) in enumerate(classification_batches(steps, seed)):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            writer.add_scalar("train/loss", loss.item(), step)
            if progress:
                progress(step + 1, steps)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
