"""An LSTM language model trained like pytorch/examples' word_language_model (SGD lr 20, clip 0.25)
whose clipping receives an exhausted parameter generator.

Bug: ``params = model.parameters()`` is handed to the optimizer (which consumes the generator)
and later to ``clip_grad_norm_(params, 0.25)``: the generator is empty, nothing is clipped, no
warning, and SGD at lr 20 with raw LSTM gradients blows the model up once the gradients grow (loss x3 at step 30, gradient norm 5e4 at 33).
Source: https://github.com/pytorch/pytorch/issues/148259 ("Raise a warning when clip_grad_norm_
receives an exhausted generator ... no clipping occurs—silently"), https://github.com/pytorch/torchtitan/pull/1258
("will silently fail if a generator of parameters is passed in"); lr/clip values from
https://github.com/pytorch/examples/blob/main/word_language_model/main.py.
Fixed twin: ``params = list(model.parameters())``.
"""

import math
import os
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "clip_grad_norm_ given the generator the optimizer already consumed: no clipping at SGD lr 20",
    "source": "https://github.com/pytorch/pytorch/issues/148259; https://github.com/pytorch/torchtitan/pull/1258",
    "arch": "LSTM language model (embedding 64, 2-layer LSTM 128, linear decoder), vocab 30",
    "kind": ["exploding_gradient", "loss_spike", "nonfinite", "activation_explosion"],
    "layer": ["<optimizer>", "lstm", "decoder", "encoder", "<loss>"],
    "step": [0, 34],  # unclipped from step 0; loss x1.3 at 28, x3 at 30, grad norm 5e4 at 33 (measured)
}

V = 30


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(V, 64)
        self.lstm = nn.LSTM(64, 128, num_layers=2, batch_first=True)
        self.decoder = nn.Linear(128, V)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)  # word_language_model's init_weights
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x):
        return self.decoder(self.lstm(self.encoder(x))[0])


def batch(g, n=32, length=35):
    """Tokens from a noisy cyclic grammar: next = (prev * 7 + 3) % V most of the time."""
    x = torch.empty(n, length + 1, dtype=torch.long)
    x[:, 0] = torch.randint(0, V, (n,), generator=g)
    for t in range(1, length + 1):
        rule = (x[:, t - 1] * 7 + 3) % V
        noise = torch.randint(0, V, (n,), generator=g)
        x[:, t] = torch.where(torch.rand(n, generator=g) < 0.8, rule, noise)
    return x[:, :-1], x[:, 1:]


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LM()
    params = list(model.parameters()) if fixed else model.parameters()
    opt = torch.optim.SGD(params, lr=20.0)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        raw = nn.utils.clip_grad_norm_(list(model.parameters()), float("inf"))  # measure only
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # recent torch warns once about the empty generator; logs go unread
            clipped = nn.utils.clip_grad_norm_(params, 0.25)
        if p:
            p.step(loss, raw=float(raw), clipped_seen=float(clipped))
        opt.step()


def truth(bug, twin):
    first_big = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"]) or r["loss"] > 2 * bug[0]["loss"]), None)
    seen = max(r["clipped_seen"] for r in bug)
    lt0, lt = twin[0]["loss"], mean([r["loss"] for r in twin[-20:]])
    lb = mean([r["loss"] for r in bug[-20:]])
    held = seen == 0.0 and first_big is not None and first_big <= 34 and lt < 0.6 * lt0 and not (lb < 1.5 * lt)
    return held, (f"bug clip saw total norm {seen} (empty generator); bug loss first > 2x initial or non-finite at step {first_big}, "
                  f"last-20 {lb:.3g}; twin loss {lt0:.3g} -> {lt:.3g}; bug raw grad norm steps 0-5 {[round(r['raw'], 2) for r in bug[:6]]}")


if __name__ == "__main__":
    sys.exit(main(globals()))
