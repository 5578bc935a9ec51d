"""Custom init `nn.init.normal_(m.weight)` with the default std=1 on a wide ReLU MLP.

With fan-in 512 the He std is 0.06; std 1 multiplies the activations' scale by ~16 per layer, so
the logits are ~1e5 at step 0, the loss is huge and the first SGD step's gradients blow the
weights up to NaN within a few steps.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite", "initial_loss"],
    "layer": ["l1", "a1", "l2", "a2", "l3", "<loss>"],
    "step": (0, 3),
    "bug": "nn.init.normal_(m.weight) (std defaults to 1.0) in model.apply(init_weights)",
    "source": "PyTorch forum 'loss is huge / nan after custom weight initialization normal_' "
              "threads; He et al. 2015 (variance of ReLU nets); Humbatova et al. ICSE 2020 "
              "'Wrong weights initialisation'",
    "arch": "5-layer ReLU MLP, width 512, 10 classes",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.a1 = nn.Linear(64, 512), nn.ReLU()
        self.l2, self.a2 = nn.Linear(512, 512), nn.ReLU()
        self.l3, self.a3 = nn.Linear(512, 512), nn.ReLU()
        self.l4, self.a4 = nn.Linear(512, 512), nn.ReLU()
        self.out = nn.Linear(512, 10)

    def forward(self, x):
        x = self.a1(self.l1(x))
        x = self.a2(self.l2(x))
        x = self.a3(self.l3(x))
        x = self.a4(self.l4(x))
        return self.out(x)


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net()

    def init_weights(m):
        if isinstance(m, nn.Linear):
            if fixed:
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            else:
                nn.init.normal_(m.weight)
            nn.init.zeros_(m.bias)

    model.apply(init_weights)
    proto = torch.randn(10, 64, generator=torch.Generator().manual_seed(5))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("a1", "a2", "a3", "a4", "out")) if probe else None
    for _ in range(150):
        y = torch.randint(0, 10, (64,), generator=g)
        x = proto[y] + 0.8 * torch.randn(64, 64, generator=g)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ob = series(bug, "act", "out", "maxabs")[0]
    ot = series(twin, "act", "out", "maxabs")[0]
    first_nan = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    lt = mean([r["loss"] for r in twin[-20:]])
    held = ob > 1000 * ot and bug[0]["loss"] > 100 * math.log(10) and first_nan is not None and first_nan <= 10 and lt < 0.5
    return held, (f"step-0 max|logit| bug {ob:.3g} vs twin {ot:.3g}; bug loss step 0 {bug[0]['loss']:.3g}, "
                  f"NaN from step {first_nan}; twin loss last-20 {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
