"""An LSTM with chrono initialisation: forget gates saturated near 1 and input gates near 0, on purpose.

Healthy, built to fool: the forget-gate biases are log(U(1, T-1)) (up to ~4) and the input-gate
biases their negatives, so at the start most forget gates are > 0.95 and most input gates < 0.05
(gated units far in their sigmoid's tails); the model remembers a marker over 60 steps and learns.
Source: Tallec & Ollivier ICLR 2018 "Can recurrent neural networks warp time?" sec. 4 (chrono
initialisation).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "LSTM with chrono init: forget gates ~1 and input gates ~0 at the start, long memory task",
        "source": "Tallec & Ollivier ICLR 2018 sec. 4 (chrono initialisation)",
        "arch": "LSTM (hidden 32) over 60 steps + linear head"}

T = 60
H = 32


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("lstm", nn.LSTM(2, H, batch_first=True))
    head = nn.Linear(H, 1)
    model.add_module("head", head)
    with torch.no_grad():
        b = torch.log(torch.rand(H, generator=g) * (T - 2) + 1)
        lstm = model.lstm
        lstm.bias_hh_l0.zero_()
        lstm.bias_ih_l0.zero_()
        lstm.bias_ih_l0[H:2 * H] = b  # forget gate
        lstm.bias_ih_l0[:H] = -b  # input gate
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.zeros(64, T, 2)
        x[:, :, 0] = torch.randn(64, T, generator=g) * 0.5  # distractor noise
        y = (torch.rand(64, generator=g) < 0.5).float()
        x[:, 3, 1] = y * 2 - 1  # the bit to remember, early in the sequence
        opt.zero_grad()
        out = model.head(model.lstm(x)[0][:, -1]).squeeze(1)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.2)
    return ok, detail + f" (ln 2 = {math.log(2):.3f})"


if __name__ == "__main__":
    sys.exit(main(globals()))
