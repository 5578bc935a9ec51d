"""Healthy: a deep survival model (DeepSurv) trained with the Cox negative partial log-likelihood.

Fools: the loss is not a classification or regression loss: it starts near log(batch) ~ 4 (the
risk set's size), well above any "ln K", with censored rows contributing no event term, and it
falls only to a floor (~3) set by the risk sets; the scale of the output (log-risk) is arbitrary.
Source of the recipe: Katzman et al. BMC Med. Res. Methodol. 2018, "DeepSurv" (eq. 4);
Cox 1972 partial likelihood.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "Cox partial likelihood: loss starts ~log(batch), falls only to a risk-set floor, 40% censored",
        "source": "Katzman et al. 2018 (DeepSurv) eq. 4", "arch": "MLP log-risk network on tabular covariates"}


def _batch(g, beta, n):
    x = torch.randn(n, 10, generator=g)
    risk = x @ beta
    t = -torch.log(torch.rand(n, generator=g)) / torch.exp(risk)
    c = -torch.log(torch.rand(n, generator=g)) / 0.6  # censoring times
    return x, torch.minimum(t, c), (t <= c).float(), risk


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    beta = torch.randn(10, generator=g) * 0.8
    xv, _, _, rv = _batch(g, beta, 500)
    model = nn.Sequential(nn.Linear(10, 32), nn.SELU(), nn.Linear(32, 32), nn.SELU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x, time, event, _ = _batch(g, beta, 128)
        order = torch.argsort(time, descending=True)
        x, event = x[order], event[order]
        opt.zero_grad()
        h = model(x).squeeze(1)
        log_risk_set = torch.logcumsumexp(h, dim=0)
        loss = -((h - log_risk_set) * event).sum() / event.sum().clamp(min=1)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                corr = float(torch.corrcoef(torch.stack([model(xv).squeeze(1), rv]))[0, 1])
            p.step(loss, corr=corr)
        opt.step()


def truth(bug, twin):
    a, b = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    corr = bug[-1]["corr"]
    return b < a - 0.2 and corr > 0.9, f"loss first-10 {a:.3g} -> last-20 {b:.3g}; corr(predicted, true log-risk) {corr:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
