"""Knowledge distillation with ``nn.KLDivLoss`` fed the student's PROBABILITIES instead of log-probabilities.

Bug: ``KLDivLoss()(softmax(student), softmax(teacher))``: the criterion computes
``sum t * (log t - input)``, linear in the student's probabilities, so minimising it pushes all
the student's mass onto the teacher's arg-max class instead of matching the teacher's soft
distribution; the "loss" goes negative and the true KL(teacher || student) ends far above the twin's.
Silent: nothing explodes or dies.
Source: PyTorch docs of KLDivLoss ("the input given is expected to contain log-probabilities",
https://pytorch.org/docs/stable/generated/torch.nn.KLDivLoss.html) and the forum thread
"KL divergence loss goes negative" class (discuss.pytorch.org).
Fixed twin: ``KLDivLoss(reduction='batchmean')(log_softmax(student), softmax(teacher))``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "KLDivLoss given probabilities instead of log-probabilities: the student matches the teacher's arg-max, not its distribution",
    "source": "https://pytorch.org/docs/stable/generated/torch.nn.KLDivLoss.html",
    "arch": "MLP student distilled from a fixed random teacher (soft targets)",
    "kind": ["loss_plateau", "saturated_activation", "activation_collapse"],
    "layer": ["<loss>", "out"],
    "step": [0, 60],
}


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.out = nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 6)

    def forward(self, x):
        return self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    teacher = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 6))
    with torch.no_grad():
        for prm in teacher.parameters():
            prm.copy_(torch.randn(prm.shape, generator=g) * 0.4)
    model = Student()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(128, 16, generator=g)
        with torch.no_grad():
            t = F.softmax(teacher(x), dim=1)
        opt.zero_grad()
        s = model(x)
        if fixed:
            loss = F.kl_div(F.log_softmax(s, dim=1), t, reduction="batchmean")
        else:
            loss = F.kl_div(F.softmax(s, dim=1), t, reduction="batchmean")
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            true_kl = F.kl_div(F.log_softmax(s, dim=1), t, reduction="batchmean")
            p.step(loss, kl=float(true_kl))
        opt.step()


def truth(bug, twin):
    kb = sum(r["kl"] for r in bug[-20:]) / 20
    kt = sum(r["kl"] for r in twin[-20:]) / 20
    held = kb > 10 * kt and kb > 0.3
    return held, f"true KL(teacher||student) last 20: bug {kb:.3g}, twin {kt:.3g}; bug's reported loss {bug[-1]['loss']:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
