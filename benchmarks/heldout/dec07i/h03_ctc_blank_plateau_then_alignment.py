"""Healthy: a BiGRU speech recogniser trained with CTC (log_softmax, blank 0) on synthetic
"utterances".

What looks wrong: CTC's well-known first phase: the network first predicts blank on (almost)
every frame, the output softmax saturates on the blank class, the loss falls quickly and then
sits on a plateau for a while before the symbol spikes appear and it falls again; the loss starts
far above ln(C) (it is a sum over the label sequence).
Source: Graves et al. ICML 2006 (CTC), sec. 5 (peaky blank-dominated outputs);
https://distill.pub/2017/ctc/; torch.nn.CTCLoss docs.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "what": "CTC: blank-dominated saturated outputs and a plateau before alignment",
        "source": "Graves et al. ICML 2006 sec. 5; https://distill.pub/2017/ctc/",
        "arch": "BiGRU acoustic model (16 mel-like features, 40 frames) + linear, CTC over 5 symbols + blank"}

T, F_IN, C, L = 40, 16, 6, 4


class AM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(F_IN, 48, batch_first=True, bidirectional=True)
        self.out = nn.Linear(96, C)

    def forward(self, x):  # (N, T, F) -> (T, N, C) log-probs
        return self.out(self.rnn(x)[0]).log_softmax(-1).transpose(0, 1)


def batch(g, protos, n=32):
    x = torch.randn(n, T, F_IN, generator=g) * 0.3
    y = torch.randint(1, C, (n, L), generator=g)
    for i in range(n):
        t = int(torch.randint(0, 6, (1,), generator=g))
        for s in y[i].tolist():
            d = int(torch.randint(4, 8, (1,), generator=g))
            x[i, t:t + d] += protos[s]
            t += d + int(torch.randint(1, 3, (1,), generator=g))
    return x, y


def greedy_ok(logp, y):
    pred = logp.argmax(-1).T
    ok = 0
    for i in range(pred.size(0)):
        seq = torch.unique_consecutive(pred[i])
        seq = seq[seq != 0]
        ok += int(seq.tolist() == y[i].tolist())
    return ok / pred.size(0)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(C, F_IN, generator=g)
    model = AM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CTCLoss(blank=0)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    in_len = torch.full((32,), T, dtype=torch.long)
    tgt_len = torch.full((32,), L, dtype=torch.long)
    for _ in range(200):
        x, y = batch(g, protos)
        logp = model(x)
        loss = crit(logp, y, in_len, tgt_len)
        opt.zero_grad()
        loss.backward()
        if p:
            with torch.no_grad():
                blank = float((logp.argmax(-1) == 0).float().mean())
            p.step(loss, blank=blank, seq=greedy_ok(logp.detach(), y))
        opt.step()


def truth(bug, twin):
    l0, l1 = bug[0]["loss"], mean([r["loss"] for r in bug[-20:]])
    peak_blank = max(r["blank"] for r in bug[:60])
    seq = mean([r["seq"] for r in bug[-20:]])
    ok = l1 < 0.1 * l0 and peak_blank > 0.95 and seq > 0.7
    return ok, f"loss {l0:.3g} -> last-20 {l1:.3g}; blank argmax on {peak_blank:.2f} of frames at its early peak; exact greedy transcripts last-20 {seq:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
