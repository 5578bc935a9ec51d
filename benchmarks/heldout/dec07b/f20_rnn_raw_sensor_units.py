"""A tanh RNN fed raw sensor readings (temperature in kelvin ~290, pressure in hPa ~1000): saturated.

Bug: the sensor channels are not standardised; with default init the pre-activations are ~1e2 and
the tanh hidden state is pinned at +-1 from the first step: its derivative is ~0, no gradient
flows through time, and the forecaster learns far less than the twin.
Source: Humbatova et al. ICSE 2020, 'Missing normalisation of the data' (Training data quality);
Zhang et al. ISSTA 2018; LeCun et al. "Efficient BackProp" 1998 sec. 4.3 (normalise the inputs;
sigmoid saturation).
Fixed twin: each channel standardised with the training statistics.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "raw sensor units (~290 K, ~1000 hPa) into a tanh RNN: hidden state saturated at +-1",
    "source": "Humbatova et al. ICSE 2020 (missing normalisation); LeCun et al. Efficient BackProp 1998 sec. 4.3",
    "arch": "Elman RNN (tanh, hidden 32) + linear forecaster",
    "kind": ["saturated_activation", "vanishing_gradient", "data_anomaly"],
    "layer": ["rnn", "<input>"],
    "step": [0, 2],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(3, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def batch(g, n=64, t=30):
    phase = torch.rand(n, 1, generator=g) * 6.28
    tt = torch.arange(t + 1).float() * 0.3 + phase
    temp = 290 + 8 * torch.sin(tt) + 0.5 * torch.randn(n, t + 1, generator=g)
    pres = 1000 + 15 * torch.cos(0.5 * tt) + torch.randn(n, t + 1, generator=g)
    hum = 60 + 20 * torch.sin(tt + 1)
    x = torch.stack([temp, pres, hum], -1)
    return x[:, :-1], temp[:, -1:]


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    mu, sd = torch.tensor([290.0, 1000.0, 60.0]), torch.tensor([5.7, 10.6, 14.1])
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("rnn",)) if probe else None
    for _ in range(200):
        x, y = batch(g)
        if fixed:
            x = (x - mu) / sd
        opt.zero_grad()
        loss = crit(model(x), (y - 290) / 5.7)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    sb, st = bug[0]["act"]["rnn"]["sat99"], twin[0]["act"]["rnn"]["sat99"]
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = sb > 0.8 and st < 0.2 and lb > 3 * lt
    return held, f"step 0 rnn outputs |h| >= 0.99: bug {sb:.2f} twin {st:.2f}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
