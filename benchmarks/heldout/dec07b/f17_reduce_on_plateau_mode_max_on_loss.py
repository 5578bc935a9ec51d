"""A 1-D CNN regressor whose ReduceLROnPlateau watches the training loss in mode='max'.

Bug: ``ReduceLROnPlateau(opt, mode='max', patience=0)`` stepped each epoch (10 batches) with the
epoch's loss: a falling loss is "no improvement" in max mode, so the rate is cut x0.1 after every
epoch from the second on, ~1e-6 of its value by step 70, and the model stops learning while the
twin keeps improving.
Source: Lightning-AI/pytorch-lightning issue #673 ("Although the validation loss keeps decreasing,
the lr scheduler seems to be decreasing the learning rate",
https://github.com/Lightning-AI/pytorch-lightning/issues/673); md-mohaiminul/ViS4mer issue #4
(mode does not match the monitored metric, https://github.com/md-mohaiminul/ViS4mer/issues/4).
Fixed twin: mode='min'.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "ReduceLROnPlateau(mode='max') fed the loss: the rate is cut x0.1 every epoch while the loss falls",
    "source": "https://github.com/Lightning-AI/pytorch-lightning/issues/673; https://github.com/md-mohaiminul/ViS4mer/issues/4",
    "arch": "1-D CNN regressor over a signal (Conv1d x2 + linear)",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>"],
    "step": [10, 90],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.Conv1d(16, 16, 7, padding=3), nn.ReLU(),
                          nn.AdaptiveAvgPool1d(4), nn.Flatten(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min" if fixed else "max", patience=0)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    epoch_loss = 0.0
    for step in range(200):
        f = torch.rand(32, 1, generator=g) * 0.3 + 0.05
        t = torch.arange(64).float()
        x = (torch.sin(t * f * 6.28) + 0.2 * torch.randn(32, 64, generator=g)).unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), f * 10)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        epoch_loss += loss.item()
        if step % 10 == 9:
            sched.step(epoch_loss / 10)
            epoch_loss = 0.0


def truth(bug, twin):
    lr_b, lr_t = bug[80]["lr"], twin[80]["lr"]
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lr_b < 1e-5 * lr_t and lb > 3 * lt
    return held, f"lr at step 80 bug {lr_b:.3g} twin {lr_t:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
