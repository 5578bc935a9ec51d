"""Healthy: a GRU encoder-decoder on sequence reversal whose teacher-forcing ratio decays to 0.

Fools: the decoder is fed the ground truth with a probability that falls linearly from 1 to 0 over
the first 150 steps, so the task gets harder as training goes: the loss falls slowly through the
decay (the model meets its own mistakes) and the decoder's input distribution shifts under it.
Source of the recipe: Bengio et al., "Scheduled Sampling for Sequence Prediction with Recurrent
Neural Networks", NeurIPS 2015; the PyTorch seq2seq translation tutorial (teacher_forcing_ratio).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "teacher forcing decays 1 -> 0: the task hardens as it trains, decoder inputs shift",
        "source": "Bengio et al. NeurIPS 2015 (scheduled sampling)", "arch": "GRU encoder-decoder, sequence reversal"}

V, T, H = 12, 8, 64
BOS = 0


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(V, 32)
        self.tgt_emb = nn.Embedding(V, 32)
        self.encoder = nn.GRU(32, H, batch_first=True)
        self.decoder = nn.GRUCell(32, H)
        self.out = nn.Linear(H, V)

    def forward(self, src, tgt, tf_ratio, g):
        _, h = self.encoder(self.src_emb(src))
        h = h[0]
        inp = torch.full((src.size(0),), BOS, dtype=torch.long)
        logits = []
        for t in range(tgt.size(1)):
            h = self.decoder(self.tgt_emb(inp), h)
            step = self.out(h)
            logits.append(step)
            forced = torch.rand(src.size(0), generator=g) < tf_ratio
            inp = torch.where(forced, tgt[:, t], step.argmax(1))
        return torch.stack(logits, 1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Seq2Seq()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for k in range(250):
        src = torch.randint(1, V, (64, T), generator=g)
        tgt = src.flip(1)
        ratio = max(0.0, 1.0 - k / 150)
        opt.zero_grad()
        loss = crit(model(src, tgt, ratio, g).reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.6)
    return fell, said + f"; loss at steps 100-150 {mean([r['loss'] for r in bug[100:150]]):.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
