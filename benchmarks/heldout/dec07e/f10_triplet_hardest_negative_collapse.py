"""A triplet-loss embedding net trained from scratch with the HARDEST negative of each batch: it collapses.

Bug: batch-hard mining (hardest positive, hardest negative per anchor) from the first step, on
noisy classes. The easiest way to stop the hardest negatives from beating the positives is to map
everything to one point: d_ap = d_an = 0 and the loss sits at the margin. The L2-normalised
embeddings collapse (their spread across the batch falls ~100x) and retrieval stays near chance.
Source: Schroff, Kalenichenko & Philbin, "FaceNet", CVPR 2015, sec. 3.2 ("Selecting the hardest
negatives can in practice lead to bad local minima early on in training, specifically it can result
in a collapsed model (i.e. f(x) = 0)"); Hermans, Beyer & Leibe 2017 "In Defense of the Triplet
Loss" sec. 2; the "triplet loss stuck at the margin" reports that follow.
Fixed twin: batch-all mining (every valid triplet, averaged over the active ones).
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "triplet loss with hardest-negative mining from step 0 on noisy classes: embeddings collapse, loss = margin",
    "source": "Schroff et al. CVPR 2015 (FaceNet) sec. 3.2; Hermans et al. 2017 sec. 2",
    "arch": "MLP embedding net (32-d inputs, 16 identities, L2-normalised 16-d embeddings)",
    "kind": ["activation_collapse", "loss_plateau", "vanishing_gradient"],
    "layer": ["embed", "<loss>"],
    "step": [0, 60],
}

MARGIN = 0.2


class EmbedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.ReLU()
        self.embed = nn.Linear(64, 16)

    def forward(self, x):
        return F.normalize(self.embed(self.act2(self.fc2(self.act1(self.fc1(x))))), dim=1)


def triplet(d, ids, hardest):
    same = ids[:, None] == ids[None]
    eye = torch.eye(len(ids), dtype=torch.bool)
    if hardest:
        d_ap = (d * (same & ~eye)).max(1).values
        d_an = d.masked_fill(same, 9.0).min(1).values
        return F.relu(d_ap - d_an + MARGIN).mean()
    per = F.relu(d[:, :, None] - d[:, None, :] + MARGIN)
    valid = (same & ~eye)[:, :, None] & (~same)[:, None, :]
    per = per[valid]
    active = per > 0
    return per[active].mean() if bool(active.any()) else per.sum()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(16, 32, generator=g)
    model = EmbedNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("embed",)) if probe else None
    for _ in range(200):
        ids = torch.randperm(16, generator=g)[:8].repeat_interleave(4)
        x = protos[ids] + 2.0 * torch.randn(32, 32, generator=g)
        opt.zero_grad()
        e = model(x)
        d = torch.cdist(e, e)
        loss = triplet(d, ids, hardest=not fixed)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            dd = d.detach().masked_fill(torch.eye(32, dtype=torch.bool), 9.0)
            nn_acc = float((ids[dd.argmin(1)] == ids).float().mean())
            p.step(loss, spread=float(e.detach().std(0).mean()), nn_acc=nn_acc)
        opt.step()


def truth(bug, twin):
    sb = mean([r["spread"] for r in bug[-30:]])
    st = mean([r["spread"] for r in twin[-30:]])
    lb = mean([r["loss"] for r in bug[-30:]])
    ab = mean([r["nn_acc"] for r in bug[-30:]])
    at = mean([r["nn_acc"] for r in twin[-30:]])
    held = sb < 0.05 * st and abs(lb - MARGIN) < 0.02 and at > ab + 0.2
    return held, (f"last-30 embedding spread bug {sb:.3g} twin {st:.3g}; bug loss {lb:.3g} (margin {MARGIN}); "
                  f"nearest-neighbour accuracy bug {ab:.3g} twin {at:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
