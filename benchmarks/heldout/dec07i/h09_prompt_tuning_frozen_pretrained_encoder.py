"""Healthy: prompt tuning. A transformer encoder pretrained (before the watched run) on one task
is frozen; only 4 soft-prompt vectors prepended to the input and a new 2-way head are trained on
a new task.

What looks wrong: every encoder layer has no gradient-carrying parameter and never changes (all
frozen on purpose), the trainable parameters are 0.5 % of the model, and the only "layer" that
learns besides the head is a bare nn.Parameter in front of the embeddings.
Source: Lester et al. EMNLP 2021 "The Power of Scale for Parameter-Efficient Prompt Tuning";
Liu et al. ACL 2022 (P-Tuning v2, prompt + head); https://github.com/huggingface/peft (PromptTuning).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "what": "prompt tuning: encoder frozen on purpose, 4 soft prompts + head train",
        "source": "Lester et al. EMNLP 2021; Liu et al. ACL 2022 (P-Tuning v2); https://github.com/huggingface/peft",
        "arch": "2-layer transformer encoder (d=48) pretrained then frozen, soft prompt (4 x 48), new linear head"}

V, L, D, P = 16, 12, 48, 4


class Prompted(nn.Module):
    def __init__(self):
        super().__init__()
        self.prompt = nn.Parameter(torch.zeros(1, P, D))
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(1, P + L, D) * 0.1)
        layer = nn.TransformerEncoderLayer(D, 4, 96, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.pre_head = nn.Linear(D, V)  # pretraining head (multi-label token presence)
        self.head = nn.Linear(D, 2)  # the new task's head

    def features(self, x):
        h = torch.cat([self.prompt.expand(x.size(0), -1, -1), self.emb(x)], 1) + self.pos
        return self.encoder(h).mean(1)


def pretrain(model, g):
    opt = torch.optim.Adam([q for n, q in model.named_parameters() if n not in ("prompt", "head.weight", "head.bias")], lr=3e-3)
    for _ in range(150):
        x = torch.randint(0, V, (64, L), generator=g)
        present = torch.zeros(64, V).scatter_(1, x, 1.0)
        loss = nn.functional.binary_cross_entropy_with_logits(model.pre_head(model.features(x)), present)
        opt.zero_grad()
        loss.backward()
        opt.step()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Prompted()
    pretrain(model, g)
    for n, q in model.named_parameters():
        q.requires_grad_(n in ("prompt", "head.weight", "head.bias"))
    opt = torch.optim.Adam([model.prompt, model.head.weight, model.head.bias], lr=1e-2)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randint(0, V, (64, L), generator=g)
        y = ((x == 3).any(1) & ~(x == 5).any(1)).long()  # new task: token 3 present and token 5 absent
        opt.zero_grad()
        out = model.head(model.features(x))
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, msg = loss_fell(bug, 0.6)
    acc = mean([r["acc"] for r in bug[-20:]])
    enc_moved = bug[0]["weight"]["encoder.layers.0.linear1"] != bug[-1]["weight"]["encoder.layers.0.linear1"]
    return ok and acc > 0.85 and not enc_moved, f"{msg}; last-20 accuracy {acc:.3f}; frozen encoder moved: {enc_moved}"


if __name__ == "__main__":
    sys.exit(main(globals()))
