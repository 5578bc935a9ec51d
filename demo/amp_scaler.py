"""AMP GradScaler collapse: a hand-written softmax overflows float16.

The model ends in a softmax written as exp(x) / sum(exp(x)), without
subtracting the maximum. In float32 that works until logits reach about 88;
under float16 autocast exp overflows as soon as a logit passes 11.1, which
happens once the classifier grows confident. From then on the loss is NaN on
almost every batch; the GradScaler takes the non-finite gradients for a
too-high scale, skips optimizer.step() and halves the scale, again and again,
until the scale is 0 and the model has silently stopped training.

The first non-finite value is born in `softmax` (its input, the logits, is
finite): that is the root cause, and the scale collapse on <optimizer> is its
symptom. The fix: torch.softmax / log_softmax, which subtract the maximum.

Runs on CPU with torch.autocast("cpu", dtype=torch.float16) and
torch.amp.GradScaler("cpu"); on a GPU use "cuda" for both.
"""

import sys

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, main, mlp, run_dir
else:  # run as a script: python demo/amp_scaler.py
    from _common import CLASSES, FEATURES, classification_batches, main, mlp, run_dir

NAME = "amp_scaler"
STEPS = 160
DEVICE = "cpu"
# The planted root cause, and an event the run must also show (the symptom).
EXPECTED = {"kind": "nonfinite", "layer": "softmax", "also": ["scaler_collapse"]}


def unsupported():
    """Why this scenario cannot run with this torch, or None."""
    if not hasattr(torch.amp, "GradScaler"):
        return "needs torch>=2.3 (torch.amp.GradScaler on CPU)"
    return None


class NaiveSoftmax(nn.Module):
    """The planted bug: softmax without subtracting the row maximum."""

    def forward(self, x):
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)


def build_model() -> nn.Module:
    # fc1, relu1, fc2, relu2, head, softmax
    return mlp(FEATURES, 64, 64, CLASSES, softmax=NaiveSoftmax())


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train under float16 autocast until the scaler collapses, into logdir/amp_scaler."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.NLLLoss()
    scaler = torch.amp.GradScaler(DEVICE)
    path = run_dir(logdir, NAME)
    with DebugWriter(path) as writer:
        # With a scaler, every iteration is recorded, also those whose
        # optimizer.step() the scaler skipped, and <optimizer> shows the scale.
        writer.watch(model, optimizer=optimizer, criterion=criterion, scaler=scaler)
        for step, (x, y) in enumerate(classification_batches(steps, seed)):
            optimizer.zero_grad()
            with torch.autocast(DEVICE, dtype=torch.float16):
                loss = criterion(torch.log(model(x)), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # skipped when the gradients are not finite
            scaler.update()  # ... and then the scale is halved
            writer.add_scalar("train/loss", loss.item(), step)
            writer.add_scalar("train/grad_scale", scaler.get_scale(), step)
            if progress:
                progress(step + 1, steps)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
