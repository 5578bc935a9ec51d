"""PPO on a contextual bandit whose "old" log-probabilities come from the update's own forward pass.

Bug: ``old_logp = dist.log_prob(a)`` is taken from the same forward as ``logp`` inside the update,
without ``detach()`` and without a stored behaviour policy, so ``ratio = exp(logp - old_logp)`` is
exactly 1 and its gradient exactly 0: the clipped surrogate gives the actor no gradient at all.
Only the separate critic learns (the loss still falls a little), the policy stays uniform.
Source: https://github.com/tensorforce/tensorforce/issues/312 ("prob_ratio always 1"),
https://github.com/huggingface/trl/issues/2769 (ratio always 1),
https://github.com/sidhantls/ppo_lightning/issues/3 (logp and log_oldp the same).
Fixed twin: old log-probabilities stored (detached) when the actions were sampled.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "PPO ratio from old_logp of the same forward pass: ratio == 1, actor gradient exactly 0",
    "source": "https://github.com/tensorforce/tensorforce/issues/312; https://github.com/huggingface/trl/issues/2769",
    "arch": "PPO actor-critic (separate MLP actor and critic), 4-armed contextual bandit",
    "kind": ["no_gradient", "frozen_weights", "vanishing_gradient", "loss_plateau"],
    "layer": ["actor", "actor.*", "<optimizer>"],
    "step": [0, 5],
}


class AC(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 4))
        self.critic = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = AC()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    proj = torch.randn(8, 4, generator=g)
    for _ in range(40):  # rollouts
        s = torch.randn(256, 8, generator=g)
        best = (s @ proj).argmax(1)
        with torch.no_grad():
            dist = torch.distributions.Categorical(logits=model.actor(s))
            a = dist.sample()
            stored_logp = dist.log_prob(a)
        r = (a == best).float()
        for _ in range(5):  # PPO epochs on the rollout: 200 optimizer steps
            dist = torch.distributions.Categorical(logits=model.actor(s))
            logp = dist.log_prob(a)
            old_logp = stored_logp if fixed else dist.log_prob(a)
            v = model.critic(s).squeeze(1)
            adv = (r - v).detach()
            ratio = torch.exp(logp - old_logp)
            pg = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            loss = pg + 0.5 * (r - v).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if writer:
                writer.record(loss=loss)
            if p:
                p.step(loss, reward=float(r.mean()))
            opt.step()


def truth(bug, twin):
    gb = max(v for v in series(bug, "grad", "actor.0") if v is not None)
    gt = mean(series(twin, "grad", "actor.0"))
    rb = mean([r["reward"] for r in bug[-25:]])
    rt = mean([r["reward"] for r in twin[-25:]])
    held = gb < 1e-6 and gt > 1e-3 and rb < 0.35 and rt > 0.5
    return held, f"actor.0 grad norm bug max {gb:.3g} twin mean {gt:.3g}; last rollouts reward bug {rb:.3f} twin {rt:.3f} (uniform 0.25)"


if __name__ == "__main__":
    sys.exit(main(globals()))
