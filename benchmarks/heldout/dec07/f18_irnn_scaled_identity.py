"""An Elman ReLU RNN ("IRNN") whose recurrent matrix is initialised to 1.2 x identity, not identity.

Bug: the IRNN recipe initialises ``weight_hh`` to the identity; a "slightly larger to remember
longer" 1.2 x I with ReLU makes the hidden state grow like 1.2^t over 60 steps (~6e4) and the
backward pass through time explodes.
Source: Le, Jaitly & Hinton, "A Simple Way to Initialize Recurrent Networks of Rectified Linear
Units" (arXiv:1504.00941, section 2: identity init, scaled-down variants for stability); Pascanu
et al., "On the difficulty of training recurrent neural networks" (ICML 2013, section 2: spectral
radius > 1 explodes).
Fixed twin: ``weight_hh = I``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "ReLU RNN weight_hh initialised 1.2 x I: hidden state and BPTT gradients grow 1.2^t",
    "source": "Le, Jaitly & Hinton arXiv:1504.00941 sec. 2; Pascanu et al. ICML 2013 sec. 2",
    "arch": "Elman RNN (nonlinearity='relu'), 60 steps",
    "kind": ["exploding_gradient", "activation_explosion", "nonfinite"],
    "layer": ["rnn"],
    "step": [0, 2],
}


class Net(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.rnn = nn.RNN(2, 64, nonlinearity="relu", batch_first=True)
        self.out = nn.Linear(64, 1)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(torch.eye(64) * scale)
            self.rnn.bias_hh_l0.zero_()
            self.rnn.bias_ih_l0.zero_()

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h[:, -1])


def batch(g, n=32, t=60):
    v = torch.rand(n, t, generator=g)
    m = torch.zeros(n, t)
    i = torch.randint(0, t // 2, (n,), generator=g)
    j = torch.randint(t // 2, t, (n,), generator=g)
    m[torch.arange(n), i] = 1
    m[torch.arange(n), j] = 1
    return torch.stack([v, m], 2), (v * m).sum(1, keepdim=True)     # the adding problem


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(1.0 if fixed else 1.2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("rnn",)) if probe else None
    for _ in range(150):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    a = ratio(bug[0]["act"]["rnn"]["maxabs"], twin[0]["act"]["rnn"]["maxabs"])
    g = ratio(bug[0]["grad"]["rnn"], twin[0]["grad"]["rnn"])
    b, t = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = a > 100 and g > 100 and t == t and (b != b or b > 2 * t)
    return held, f"step 0 rnn max|h| bug/twin {a:.3g}, rnn grad bug/twin {g:.3g}; last-20 loss bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
