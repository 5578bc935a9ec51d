"""An LSTM sequence regressor whose gradient clipping is called before ``backward()``.

Bug: ``clip_grad_norm_(params, 1.0)`` runs right after ``zero_grad()`` and before
``loss.backward()``: it clips the empty gradients and the optimizer then uses the raw ones
(norms ~1e2 here). The SGD rate (0.3, momentum 0.9) was chosen with the clipping on: without it
the first update throws the loss from ~40 to ~1e6.
Source: Cranial-XIX/FAMO issue #4 ("Why should clip_grad_norm_ before loss.backward()?", a bug
confirmed by the author, https://github.com/Cranial-XIX/FAMO/issues/4); jongwook/onsets-and-frames
issue #24 (clipping in the wrong place, https://github.com/jongwook/onsets-and-frames/issues/24).
Fixed twin: clip between backward and step.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "clip_grad_norm_ called before backward: the lr chosen for clipped gradients meets raw ones",
    "source": "https://github.com/Cranial-XIX/FAMO/issues/4; https://github.com/jongwook/onsets-and-frames/issues/24",
    "arch": "LSTM sequence regressor (50 steps, hidden 64) + linear head",
    "kind": ["exploding_gradient", "loss_spike", "nonfinite", "activation_explosion"],
    "layer": ["<optimizer>", "rnn", "head"],
    "step": [0, 10],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 64, batch_first=True)
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(32, 50, 4, generator=g)
        y = x[:, :, 0].sum(1, keepdim=True)
        opt.zero_grad()
        if not fixed:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        loss = crit(model(x), y)
        loss.backward()
        if fixed:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = [r["loss"] for r in bug]
    peak = max((v for v in lb[:11] if v == v), default=float("inf"))
    lt_first, lt_last = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    raw = bug[0]["grad"]["head"]
    held = (peak > 100 * lb[0] or any(v != v for v in lb[:11])) and lt_last < 0.8 * lt_first and raw > 1.0
    return held, (f"bug max loss steps 0-10 {peak:.3g} vs step 0 {lb[0]:.3g} (head raw grad {raw:.3g}, clip 1.0 never applied); "
                  f"twin loss first-10 {lt_first:.3g} -> last-20 {lt_last:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
