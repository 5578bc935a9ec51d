"""A 1-D CNN over log-power spectrogram frames computed with torch.log and no floor: silence gives -inf.

Bug: the features are ``torch.log(power)`` without an epsilon. Clips shorter than the fixed
length are zero-padded (digital silence), whose power is exactly 0, so their padded frames are
``-inf``. The first batch holding such a clip is step 23: the input is non-finite there, the
forward pass and the loss turn NaN, and the optimizer writes NaN into the weights.
Source: https://github.com/SeanNaren/deepspeech.pytorch/issues/272 (zero-valued audio gives a NaN
loss); https://github.com/KimythAnly/AGAIN-VC/issues/5 (mel arrays with -inf elements);
https://github.com/Kyubyong/tacotron/pull/36 (log of a silent spectrogram is -inf).
Fixed twin: ``torch.log(power + 1e-6)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

FIRST_SHORT = 23

CASE = {
    "bug": "log-power spectrogram as torch.log(power) without eps: zero-padded (silent) frames are -inf from step 23",
    "source": "https://github.com/SeanNaren/deepspeech.pytorch/issues/272; https://github.com/KimythAnly/AGAIN-VC/issues/5",
    "arch": "1-D CNN over spectrogram frames (Conv1d x2 over 16 bands + global pool + linear), 3 classes",
    "kind": ["nonfinite", "data_anomaly"],
    "layer": ["<input>"],
    "step": [23, 23],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(16, 32, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(32, 32, 3, padding=1)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.act2(self.conv2(self.act1(self.conv1(x)))).mean(-1))


def batch(g, step, n=16):
    y = torch.randint(0, 3, (n,), generator=g)
    power = torch.rand(n, 16, 40, generator=g) * 0.1 + 1e-3
    for i in range(n):  # class k: energy in band group k
        power[i, int(y[i]) * 5:int(y[i]) * 5 + 5] += 1.0
    if step >= FIRST_SHORT and step % 3 == 2:  # from step 23 on, some clips are short, zero-padded
        length = int(torch.randint(20, 36, (1,), generator=g))
        power[0, :, length:] = 0.0
    return power, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(150):
        power, y = batch(g, step)
        x = torch.log(power + 1e-6) if fixed else torch.log(power)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, input_finite=bool(torch.isfinite(x).all()))
        opt.step()


def truth(bug, twin):
    first_bad_in = next((i for i, r in enumerate(bug) if not r["input_finite"]), None)
    first_nan = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    twin_ok = all(r["input_finite"] and r["loss"] == r["loss"] for r in twin)
    held = first_bad_in == FIRST_SHORT and first_nan == FIRST_SHORT and twin_ok
    return held, (f"bug: first non-finite input at step {first_bad_in}, first NaN loss at step {first_nan}; "
                  f"twin finite throughout = {twin_ok}, last loss {twin[-1]['loss']:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
