"""Healthy: REINFORCE with a baseline on a contextual 6-armed bandit: a noisy loss that means little.

Fools: the surrogate loss -(log pi(a|s) * advantage) is small, negative on almost every step
(better actions are the likelier ones) and noisy; it does not track progress, which is in the
reward, not the loss.
Source of the recipe: Williams 1992 (REINFORCE) with a mean-reward baseline; Sutton & Barto 2018
sec. 13.4.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "policy-gradient surrogate loss: small, negative, noisy; the reward rises, not the loss that falls",
        "source": "Williams 1992; Sutton & Barto 2018 sec. 13.4", "arch": "softmax policy MLP (contextual bandit)"}

A = 6


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, A))
    arm_w = torch.randn(8, A, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        s = torch.randn(128, 8, generator=g)
        dist = torch.distributions.Categorical(logits=model(s))
        a = dist.sample()
        best = (s @ arm_w).argmax(1)
        reward = (a == best).float() + 0.5 * torch.randn(128, generator=g)
        adv = reward - reward.mean()
        loss = -(dist.log_prob(a) * adv).mean()
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, reward=float((a == best).float().mean()))
        opt.step()


def truth(bug, twin):
    r0, r1 = mean([r["reward"] for r in bug[:20]]), mean([r["reward"] for r in bug[-20:]])
    signs = sum(1 for r in bug if r["loss"] < 0)
    return r1 > 2.5 * r0 and signs > 0.5 * len(bug), (
        f"hit rate first-20 {r0:.3g} -> last-20 {r1:.3g}; loss negative on {signs}/{len(bug)} steps")


if __name__ == "__main__":
    sys.exit(main(globals()))
