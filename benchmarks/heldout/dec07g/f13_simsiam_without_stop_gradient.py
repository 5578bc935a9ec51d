"""SimSiam trained without the stop-gradient on the target branch: the representation collapses.

Chen & He (CVPR 2021, Fig. 2) show that removing the stop-gradient lets the optimiser reach the
trivial solution at once: the inputs map to (nearly) the same vector, the per-dimension std of the
l2-normalised output falls several times below the twin's (here to ~0.02 against a spread of
0.125) and the loss sits at its minimum -1. The twin keeps z.detach().
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["activation_collapse"],
    "layer": ["enc", "enc.*", "proj", "proj.*", "pred", "pred.*", "<loss>"],
    "step": (0, 150),
    "bug": "loss = -cos(p1, z2) - cos(p2, z1) without z.detach(): the Siamese outputs collapse",
    "source": "Chen & He, 'Exploring Simple Siamese Representation Learning', CVPR 2021, Sec. 4.1 "
              "and Fig. 2 (without stop-gradient the output std goes to 0)",
    "arch": "MLP encoder + projector + predictor (SimSiam) on augmented synthetic vectors",
}


class SimSiam(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64))
        self.proj = nn.Sequential(nn.ReLU(), nn.Linear(64, 64))
        self.pred = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 64))

    def forward(self, x):
        z = self.proj(self.enc(x))
        return z, self.pred(z)


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = torch.randn(20, 32, generator=torch.Generator().manual_seed(15)) * 2
    model = SimSiam()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    if writer is not None:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        base = protos[torch.randint(0, 20, (128,), generator=g)] + 0.5 * torch.randn(128, 32, generator=g)
        x1 = base + 0.5 * torch.randn(128, 32, generator=g)
        x2 = base * (0.8 + 0.4 * torch.rand(128, 1, generator=g)) + 0.5 * torch.randn(128, 32, generator=g)
        z1, p1 = model(x1)
        z2, p2 = model(x2)
        t1, t2 = (z1.detach(), z2.detach()) if fixed else (z1, z2)
        loss = -(F.cosine_similarity(p1, t2).mean() + F.cosine_similarity(p2, t1).mean()) / 2
        opt.zero_grad()
        loss.backward()
        if writer is not None:
            writer.record(loss=loss)
        if p:
            zn = F.normalize(z1.detach(), dim=1)
            pn = F.normalize(p1.detach(), dim=1)
            p.step(loss, zstd=float(zn.std(0).mean()), pstd=float(pn.std(0).mean()))
        opt.step()


def truth(bug, twin):
    # 1/sqrt(64) = 0.125 is the per-dimension std of well-spread unit vectors
    pb = mean([r["pstd"] for r in bug[-20:]])
    pt = mean([r["pstd"] for r in twin[-20:]])
    lb = mean([r["loss"] for r in bug[-20:]])
    held = pb < 0.3 * pt and pb < 0.03 and pt > 0.08 and lb < -0.99
    return held, (f"per-dim std of normalised predictor output last-20 bug {pb:.4f} vs twin {pt:.4f} "
                  f"(spread 0.125); bug loss last-20 {lb:.4f}")


if __name__ == "__main__":
    sys.exit(main(globals()))
