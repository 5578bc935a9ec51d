"""Healthy: an RL-style value head regressing raw discounted returns (3-56) with the Huber loss.

The targets are Monte-Carlo returns of a chain task, left in their natural units (they are not
normalised), and the critic is trained with SmoothL1 (Huber, beta 1), as DQN does: the loss starts
in the tens, its gradient is bounded (|dL/dv| <= 1 per sample) so nothing explodes, and the value
error falls by orders of magnitude.
Source: Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015,
Methods ("error clipping": the Huber loss); Sutton & Barto 2018 sec. 9.3 (gradient Monte-Carlo
value estimation).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "value head on raw returns 3-56 (not normalised), SmoothL1 loss: large but bounded-gradient start",
    "source": "Mnih et al. Nature 2015 Methods (Huber error clipping); Sutton & Barto 2018 sec. 9.3",
    "arch": "MLP critic (one-hot state of a 20-state chain + noise features -> V(s))",
}

N_STATES = 20
GAMMA = 0.95


def returns():
    # reward 3 per step until the end of the chain: V(s) = 3 (1 - gamma^(N - s)) / (1 - gamma)
    s = torch.arange(N_STATES).float()
    return 3 * (1 - GAMMA ** (N_STATES - s)) / (1 - GAMMA)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(N_STATES + 4, 64)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.Tanh()
        self.value = nn.Linear(64, 1)

    def forward(self, x):
        return self.value(self.act2(self.fc2(self.act1(self.fc1(x))))).squeeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    v_true = returns()
    model = Critic()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.SmoothL1Loss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        s = torch.randint(0, N_STATES, (64,), generator=g)
        x = torch.cat([nn.functional.one_hot(s, N_STATES).float(), torch.randn(64, 4, generator=g)], 1)
        target = v_true[s] + 0.5 * torch.randn(64, generator=g)  # sampled returns are noisy
        opt.zero_grad()
        v = model(x)
        loss = crit(v, target)
        loss.backward()
        if p:
            p.step(loss, err=float((v.detach() - v_true[s]).abs().mean()))
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.05)
    e = mean([r["err"] for r in bug[-20:]])
    return fell and e < 1.5, f"{detail}; last-20 mean |V - V_true| {e:.3g} (returns 3-56)"


if __name__ == "__main__":
    sys.exit(main(globals()))
