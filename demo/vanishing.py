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

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, fit, main, mlp, run_dir
else:  # run as a script: python demo/vanishing.py
    from _common import CLASSES, FEATURES, classification_batches, fit, main, mlp, run_dir

NAME = "vanishing"
STEPS = 150
# The root cause is the saturated layer; the vanishing gradients below it are
# its symptom, and the report shows them too.
EXPECTED = {"kind": "saturated_activation", "layer": "tanh2", "also": ["vanishing_gradient"]}


def build_model() -> nn.Module:
    # fc1, tanh1, fc2, tanh2, fc3, tanh3, head
    model = mlp(FEATURES, 128, 128, 128, CLASSES, activation=nn.Tanh)
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
        fit(writer, model, optimizer, criterion, classification_batches(steps, seed), steps, progress)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
