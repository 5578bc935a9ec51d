"""An MLP classifier trained with WGAN-style weight clipping copied in: every weight clamped to +-0.01.

Bug: a training loop adapted from a WGAN critic keeps its
``for p in model.parameters(): p.data.clamp_(-0.01, 0.01)`` after each step. Clamped to 0.01,
each layer shrinks its input by ~0.01 x sqrt(fan_in): the logits are ~1e-4, every hidden signal
collapses towards 0, and the loss cannot leave ln 5.
Source: Arjovsky, Chintala & Bottou ICML 2017, Algorithm 1 line 7 (clip(w, -c, c), c = 0.01);
Gulrajani et al. NeurIPS 2017 sec. 3 (weight clipping: capacity underuse, vanishing gradients).
Fixed twin: no clamp.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "WGAN weight clipping (clamp every parameter to +-0.01 after each step) left in a classifier",
    "source": "Arjovsky et al. ICML 2017 Alg. 1; Gulrajani et al. NeurIPS 2017 sec. 3",
    "arch": "MLP classifier (32 -> 128 -> 128 -> 5, GELU)",
    "kind": ["activation_collapse", "vanishing_gradient", "loss_plateau", "frozen_weights"],
    "layer": ["fc1", "fc2", "fc3", "act1", "act2", "<optimizer>", "<loss>"],
    "step": [0, 10],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 128)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(128, 128)
        self.act2 = nn.GELU()
        self.fc3 = nn.Linear(128, 5)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(5, 32, generator=g)
    model = Net()
    opt = torch.optim.RMSprop(model.parameters(), lr=5e-4)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("fc3", "act2")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 5, (64,), generator=g)
        x = centers[y] + 0.8 * torch.randn(64, 32, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()
        if not fixed:
            for prm in model.parameters():
                prm.data.clamp_(-0.01, 0.01)


def truth(bug, twin):
    sb = mean([r["act"]["fc3"]["std"] for r in bug[1:21]])
    st = mean([r["act"]["fc3"]["std"] for r in twin[1:21]])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = ratio(st, sb) > 100 and lb > 1.5 and lb > 3 * lt
    return held, f"logit std (steps 1-20) bug {sb:.3g} twin {st:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 5 = 1.61)"


if __name__ == "__main__":
    sys.exit(main(globals()))
