"""A WGAN-GP on 2-D data whose gradient penalty is computed with ``create_graph=False``.

Bug: ``torch.autograd.grad(D(interp).sum(), interp)`` without ``create_graph=True`` returns
gradients outside the graph: the penalty's value is added to the critic loss but has no gradient,
so the critic trains on the bare Wasserstein term, which is unbounded: its weights and outputs
grow step after step (x25 the twin's at the end), and so does the recorded loss, whose penalty value
(never minimised) reaches ~8e3.
Source: https://github.com/ooples/AiDotNet/issues/1844 ("gradient penalty not backpropagating
into discriminator weights (createGraph=false)"), https://github.com/mlpack/mlpack/issues/2891
("the term is added to the critic's loss function but its gradient is not computed");
Gulrajani et al. NeurIPS 2017, Algorithm 1.
Fixed twin: ``create_graph=True``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "WGAN-GP penalty from autograd.grad without create_graph: no Lipschitz constraint, critic outputs grow without bound",
    "source": "https://github.com/ooples/AiDotNet/issues/1844; https://github.com/mlpack/mlpack/issues/2891",
    "arch": "WGAN-GP, MLP critic and MLP generator, 2-D data (critic's optimizer watched)",
    "kind": ["activation_explosion", "exploding_gradient", "loss_spike", "nonfinite"],
    "layer": ["critic", "critic.*", "<loss>", "<optimizer>"],
    "step": [0, 100],
}


class WGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
        self.critic = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = WGAN()
    opt_d = torch.optim.Adam(model.critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    opt_g = torch.optim.Adam(model.gen.parameters(), lr=1e-3, betas=(0.5, 0.9))
    if writer:
        writer.watch(model, optimizer=opt_d)
    p = probe(model, acts=("critic",)) if probe else None
    for step in range(200):
        real = torch.randn(128, 2, generator=g) * 0.5 + torch.tensor([2.0, -1.0])
        fake = model.gen(torch.randn(128, 4, generator=g)).detach()
        eps = torch.rand(128, 1, generator=g)
        interp = (eps * real + (1 - eps) * fake).requires_grad_(True)
        grad = torch.autograd.grad(model.critic(interp).sum(), interp, create_graph=fixed)[0]
        gp = ((grad.norm(dim=1) - 1) ** 2).mean()
        d_loss = model.critic(fake).mean() - model.critic(real).mean() + 10 * gp
        opt_d.zero_grad()
        d_loss.backward()
        if writer:
            writer.record(loss=d_loss)
        if p:
            p.step(d_loss, gnorm=float(grad.detach().norm(dim=1).mean()))
        opt_d.step()
        if step % 5 == 4:  # n_critic = 5
            opt_g.zero_grad()
            g_loss = -model.critic(model.gen(torch.randn(128, 4, generator=g))).mean()
            g_loss.backward()
            opt_g.step()


def truth(bug, twin):
    mb, mt = bug[-1]["act"]["critic"]["maxabs"], twin[-1]["act"]["critic"]["maxabs"]
    nb, nt = mean([r["gnorm"] for r in bug[-20:]]), mean([r["gnorm"] for r in twin[-20:]])
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = mb > 20 * mt and nb > 10 * nt
    return held, (f"critic max|output| at the end bug {mb:.3g} twin {mt:.3g}; critic input-gradient norm last-20 bug {nb:.3g} twin {nt:.3g} (target 1); "
                  f"critic loss last-20 bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
