"""A SimCLR-style NT-Xent loss written with exp() on projections that were never L2-normalised.

Bug: the loss follows the common hand-written form ``-log(exp(pos / t) / sum(exp(sim / t)))`` which
is only safe when the projections are unit vectors (then |sim / t| <= 1 / t). The projections are
fed raw: their dot products divided by t = 0.1 exceed ~88, ``exp`` overflows float32 to inf, inf / inf
and inf * 0 give NaN, and the NaN reaches every weight through backward.
Source: https://github.com/Lightning-Universe/lightning-bolts/issues/320 ("nt_xent_loss numerical
instability ... loss becomes nan"; maintainer: out_1 and out_2 are normalized vectors and should not
create numerical instability); Chen et al. ICML 2020 (SimCLR) eq. 1 uses cosine similarity.
Fixed twin: ``F.normalize`` on both projections before the similarities.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "hand-written NT-Xent with exp(sim / 0.1) on unnormalised projections: exp overflows, loss NaN",
    "source": "https://github.com/Lightning-Universe/lightning-bolts/issues/320",
    "arch": "MLP encoder + projection head, contrastive (two noisy views of 32-d vectors)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "proj", "proj_act", "head"],
    "step": [0, 20],
}


class SimCLRNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(32, 64)
        self.enc_act = nn.ReLU()
        self.proj = nn.Linear(64, 64)
        self.proj_act = nn.ReLU()
        self.head = nn.Linear(64, 32)

    def forward(self, x):
        return self.head(self.proj_act(self.proj(self.enc_act(self.enc(x)))))


def nt_xent(z1, z2, t, normalise):
    if normalise:
        z1, z2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    out = torch.cat([z1, z2])
    sim = torch.exp(out @ out.t() / t)
    off_diag = 1 - torch.eye(len(out))
    neg = (sim * off_diag).sum(1)
    pos = torch.exp((z1 * z2).sum(1) / t)
    pos = torch.cat([pos, pos])
    return -torch.log(pos / neg).mean()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(64, 32, generator=g) * 2
    model = SimCLRNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(150):
        x = protos[torch.randperm(64, generator=g)[:32]]
        v1 = x + 0.3 * torch.randn(32, 32, generator=g)
        v2 = x + 0.3 * torch.randn(32, 32, generator=g)
        opt.zero_grad()
        loss = nt_xent(model(v1), model(v2), 0.1, normalise=fixed)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first_nan = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    mx = bug[0]["act"]["head"]["maxabs"]
    twin_finite = all(r["loss"] == r["loss"] for r in twin)
    a = mean([r["loss"] for r in twin[:10]])
    b = mean([r["loss"] for r in twin[-20:]])
    held = first_nan is not None and first_nan <= 20 and twin_finite and b < 0.7 * a
    return held, (f"bug loss first NaN at step {first_nan} (step-0 projection max|x| {mx:.3g}); twin all "
                  f"finite {twin_finite}, loss first-10 {a:.3g} -> last-20 {b:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
