"""REINFORCE written as loss = (log_prob * reward).mean(), without the minus sign.

Minimising it performs gradient *descent* on the expected reward: the contextual-bandit policy
learns to pick the worst arm in every context, its softmax saturates onto it, and the mean reward
falls far below the fixed twin's (which climbs to the best arm).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["saturated_activation", "activation_collapse", "activation_explosion", "loss_plateau"],
    "layer": ["head", "<loss>"],
    "step": (0, 150),
    "bug": "loss = (dist.log_prob(a) * r).mean(): the policy-gradient sign is flipped",
    "source": "PyTorch forum 'REINFORCE agent gets worse over time' / 'policy gradient loss sign' "
              "threads; pytorch/examples reinforcement_learning/reinforce.py (policy_loss uses "
              "-log_prob * R)",
    "arch": "MLP policy on a 6-arm contextual bandit",
}


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 64)
        self.act = nn.Tanh()
        self.head = nn.Linear(64, 6)

    def forward(self, x):
        return self.head(self.act(self.fc(x)))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    w_true = torch.randn(8, 6, generator=torch.Generator().manual_seed(4))
    model = Policy()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if writer is not None:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(200):
        ctx = torch.randn(128, 8, generator=g)
        means = torch.softmax(ctx @ w_true, dim=1)  # per-arm success probability in this context
        dist = torch.distributions.Categorical(logits=model(ctx))
        a = dist.sample()
        r = torch.bernoulli(means.gather(1, a[:, None]).squeeze(1), generator=g)
        logp = dist.log_prob(a)
        adv = r - r.mean()
        loss = -(logp * adv).mean() if fixed else (logp * adv).mean()
        opt.zero_grad()
        loss.backward()
        if writer is not None:
            writer.record(loss=loss)
        if p:
            p.step(loss, reward=float(r.mean()), entropy=float(dist.entropy().mean().detach()),
                   best=float(means.max(1).values.mean()), worst=float(means.min(1).values.mean()))
        opt.step()


def truth(bug, twin):
    rb = mean([r["reward"] for r in bug[-30:]])
    rt = mean([r["reward"] for r in twin[-30:]])
    r0 = mean([r["reward"] for r in bug[:10]])
    eb = mean([r["entropy"] for r in bug[-20:]])
    held = rt > r0 + 0.1 and rb < r0 - 0.05 and eb < 0.5 * 1.79
    return held, (f"mean reward first-10 {r0:.3f}; last-30 bug {rb:.3f} vs twin {rt:.3f}; bug policy "
                  f"entropy last-20 {eb:.3f} (ln6 = 1.79)")


if __name__ == "__main__":
    sys.exit(main(globals()))
