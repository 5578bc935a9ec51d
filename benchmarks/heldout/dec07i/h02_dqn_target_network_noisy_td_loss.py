"""Healthy: DQN on a small chain MDP (10 states, reward only at the far end) with a target network
synced every 25 steps, a replay of random-policy transitions and Huber TD loss.

What looks wrong: the TD loss is noisy and does not fall monotonically, it RISES after each
target sync as the bootstrapped values grow towards the discounted return, and most sampled
transitions carry reward 0. The greedy policy still learns to walk to the goal.
Source: Mnih et al. Nature 2015 (target network, replay, Huber loss);
https://pytorch.org/tutorials/intermediate/reinforcement_q_learning.html.
"""

import copy
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {"healthy": True, "what": "DQN: noisy TD loss that rises after each target sync, sparse reward",
        "source": "Mnih et al. Nature 2015; https://pytorch.org/tutorials/intermediate/reinforcement_q_learning.html",
        "arch": "MLP Q-network (one-hot state -> 2 actions) + target network, chain MDP"}

S, GAMMA = 10, 0.9


def step_env(s, a):
    s2 = (s + 2 * a - 1).clamp(0, S - 1)
    r = (s2 == S - 1).float()
    done = s2 == S - 1
    return s2, r, done


def greedy_return(q):
    s, total = torch.tensor(0), 0.0
    for t in range(30):
        a = q(F.one_hot(s, S).float()).argmax()
        s, r, done = step_env(s, a)
        total += float(r) * GAMMA ** t
        if done:
            break
    return total


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    q = nn.Sequential(nn.Linear(S, 64), nn.ReLU(), nn.Linear(64, 2))
    target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    crit = nn.SmoothL1Loss()
    if writer:
        writer.watch(q, optimizer=opt, criterion=crit)
    p = probe(q) if probe else None
    # a fixed replay of transitions from a uniform random behaviour policy (offline DQN)
    buf_s = torch.randint(0, S - 1, (2000,), generator=g)
    buf_a = torch.randint(0, 2, (2000,), generator=g)
    buf_s2, buf_r, buf_d = step_env(buf_s, buf_a)
    for step in range(250):
        idx = torch.randint(0, 2000, (64,), generator=g)
        s, a, s2, r, d = buf_s[idx], buf_a[idx], buf_s2[idx], buf_r[idx], buf_d[idx]
        with torch.no_grad():
            y = r + GAMMA * (1 - d.float()) * target(F.one_hot(s2, S).float()).max(1)[0]
        qsa = q(F.one_hot(s, S).float()).gather(1, a[:, None]).squeeze(1)
        loss = crit(qsa, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, ret=greedy_return(q) if step % 10 == 9 else None)
        opt.step()
        if step % 25 == 24:
            target.load_state_dict(q.state_dict())


def truth(bug, twin):
    rets = [r["ret"] for r in bug if r.get("ret") is not None]
    best = GAMMA ** (S - 2)
    losses = [r["loss"] for r in bug]
    rises = sum(1 for i in range(25, 250, 25) if sum(losses[i:i + 5]) > sum(losses[i - 5:i]))
    ok = rets[-1] > 0.99 * best and rets[0] < 0.5 * best
    return ok, f"greedy discounted return first {rets[0]:.3f} -> last {rets[-1]:.3f} (optimal {best:.3f}); loss rises after {rises}/9 target syncs"


if __name__ == "__main__":
    sys.exit(main(globals()))
