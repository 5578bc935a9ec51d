"""A corrupted data batch: missing values parsed as NaN reach the model.

Training is healthy until step BAD_STEP, when the loader yields a batch in
which some records have NaN features (think of a CSV with empty cells). One
step with NaN inputs makes the loss and every gradient NaN, and the optimizer
writes NaN into every weight, so the run never recovers. The first
non-finite value is in the batch itself: the report names <input>, where the
fix goes (validate or clean the data). The writer also saves that batch, as
neuraldbg_batch_step100.npz in the run directory (numpy.load reads it, no
pickle), so the bad records can be looked at.
"""

import sys

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, fit, main, mlp, run_dir
else:  # run as a script: python demo/bad_batch.py
    from _common import CLASSES, FEATURES, classification_batches, fit, main, mlp, run_dir

NAME = "bad_batch"
STEPS = 150
BAD_STEP = 100
EXPECTED = {"kind": "data_anomaly", "layer": "<input>"}


def corrupted(batches):
    """The data pipeline with the planted bug: every 8th record of one batch is NaN."""
    for step, (x, y) in enumerate(batches):
        if step == BAD_STEP:
            x = x.clone()
            x[::8] = float("nan")
        yield x, y


def build_model() -> nn.Module:
    return mlp(FEATURES, 64, 64, CLASSES)  # fc1, relu1, fc2, relu2, head


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train on a stream with one corrupted batch into logdir/bad_batch."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    path = run_dir(logdir, NAME)
    with DebugWriter(path) as writer:
        writer.watch(model, optimizer=optimizer, criterion=criterion)
        fit(writer, model, optimizer, criterion, corrupted(classification_batches(steps, seed)), steps,
            progress)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
