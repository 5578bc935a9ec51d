"""Healthy runs of the generality corpus that try to fool the detectors.

Each one is what people train on purpose and looks, to a naive rule, like a
bug of corpus_failures.py: zero-initialised residual branches (no gradient at
first), tied embeddings, a warmup from lr 0 (nothing moves at step 0), bf16
autocast, dropout, class imbalance, batches of 2, frozen pretrained
embeddings, clipped recurrent nets whose pre-clip norms burst, sigmoid
outputs that saturate by design, a VAE whose KL term grows (the loss may
rise), param groups with OneCycleLR cycling the momentum every step,
differential learning rates, gradient accumulation on purpose, zero_grad()
in its other places, a teacher run under torch.no_grad() inside the model,
gradual unfreezing, learning rates changed by hand or restarted by a
schedule, a regression's output bias set to the targets' mean, adaLN-Zero
(a zero-initialised modulation and output layer). The suite asserts that each learns (its loss falls) and raises no
warning and no error.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import models as M
from .corpus_failures import RNNLM, _delayed_copy, _resnet_groups, _resnet_two_groups, _teacher_forcing
from .harness import Spec
from .healthy import _ResNet


def _warmup_cosine(opt, warmup, total, start=0.0):
    def f(s):
        if s < warmup:
            return start + (1 - start) * s / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, total - warmup))))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def decoder_lm_rezero(steps=150):
    """ReZero: every residual branch scaled by a scalar that starts at 0, so
    the branches get no gradient until it moves."""
    def build():
        model = M.DecoderLM(rezero=True)
        return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

    return Spec("decoder_lm_rezero", build, M.tokens_lm(), steps=steps, num_classes=32)


def decoder_lm_tied_warmup(steps=150):
    """Tied input/output embeddings (initialised N(0, 0.02) as GPT-2 does:
    N(0, 1) rows as the head would give logits of std sqrt(d)), AdamW with a
    linear warmup from lr 0 then cosine decay (at step 0 nothing may move)."""
    def build():
        model = M.DecoderLM(tied=True)
        nn.init.normal_(model.emb.weight, std=0.02)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
        return model, opt, nn.CrossEntropyLoss(), _warmup_cosine(opt, 20, steps)

    return Spec("decoder_lm_tied_warmup", build, M.tokens_lm(), steps=steps, num_classes=32)


def decoder_lm_bf16(steps=120):
    """bf16 autocast without a GradScaler (its range needs none)."""
    def build():
        model = M.DecoderLM()
        return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

    return Spec("decoder_lm_bf16", build, M.tokens_lm(), steps=steps, autocast=torch.bfloat16, num_classes=32)


def mixer_dropout_cosine(steps=150):
    """An MLP-Mixer with dropout 0.3 in its channel MLPs, AdamW and cosine decay."""
    def build():
        model = M.Mixer(dropout=0.3)
        opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.05)
        return model, opt, nn.CrossEntropyLoss(), torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)

    return Spec("mixer_dropout_cosine", build, M.quadrants(), steps=steps, num_classes=4)


def imbalanced_binary(steps=200):
    """5 % positives, BCEWithLogitsLoss with pos_weight: the loss falls fast
    to the prior, then slowly."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, generator=g)

    def batch_fn(step):
        x = torch.randn(64, 16, generator=torch.Generator().manual_seed(30_000 + step))
        score = x @ w
        return x, (score > torch.quantile(score, 0.95)).float()[:, None]

    def build():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([4.0]))
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), crit, None

    return Spec("imbalanced_binary", build, batch_fn, steps=steps)


def conv_ae_batch_of_two(steps=200):
    """A convolutional autoencoder trained on batches of 2."""
    def build():
        model = M.ConvAutoencoder()
        return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.MSELoss(), None

    return Spec("conv_ae_batch_of_two", build, M.blobs(batch=2, size=12, target="image"), steps=steps)


def bag_frozen_pretrained(steps=200):
    """EmbeddingBag.from_pretrained(freeze=True): the table is frozen on
    purpose (requires_grad=False, not in the optimizer)."""
    def build():
        # "pretrained": the rows of each class's share of the vocabulary cluster
        g = torch.Generator().manual_seed(5)
        table = torch.randn(4, 32, generator=g).repeat_interleave(500, 0) + torch.randn(2000, 32, generator=g)
        model = M.BagClassifier(pretrained=table, freeze=True)
        params = [p for p in model.parameters() if p.requires_grad]
        return model, torch.optim.Adam(params, lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("bag_frozen_pretrained", build, M.bags(), steps=steps, num_classes=4)


def rnn_clipped_bursts(steps=150):
    """The vanilla RNN of corpus_failures.rnn_unclipped_gradient_burst, with
    clip_grad_norm_(0.5): its pre-clip norms burst far above their history
    (the writer records them before the clip) while the loss keeps falling."""
    def build():
        model = RNNLM()
        return model, torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("rnn_clipped_bursts", build, _delayed_copy(), steps=steps, clip=0.5)


def lstm_clipped_bursts(steps=200):
    """An LSTM on the same long-dependency task, SGD at a high rate with
    clip_grad_norm_(0.5): bursts of the pre-clip norm, a falling loss."""
    def build():
        model = RNNLM(cell=nn.LSTM)
        return model, torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("lstm_clipped_bursts", build, _delayed_copy(), steps=steps, clip=0.5)


def unet_sigmoid_bce(steps=120):
    """Segmentation with nn.Sigmoid + BCELoss: confident masks saturate the
    output sigmoid by design."""
    def build():
        model = M.UNet(sigmoid=True)
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.BCELoss(), None

    return Spec("unet_sigmoid_bce", build, M.blobs(), steps=steps)


def vae_kl_annealing(steps=200):
    """A VAE whose KL weight ramps from 0 to 1 over 100 steps: the KL term
    grows while the reconstruction falls, and the total may rise for a while."""
    def build():
        model = M.VAE()
        model.beta = 0.0
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), M.vae_loss(model), None

    def plant(step, model, opt):
        model.beta = min(1.0, step / 100)

    return Spec("vae_kl_annealing", build, M.binary_patterns(), steps=steps, plant=plant)


def seq2seq_teacher_forcing(steps=120):
    """A GRU encoder-decoder trained with teacher forcing."""
    def build():
        model = M.Seq2Seq()
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("seq2seq_teacher_forcing", build, M.sequences_pair(), steps=steps, prepare=_teacher_forcing,
                num_classes=12)


def resnet_onecycle_groups(steps=200):
    """A BatchNorm ResNet with the usual two groups (no weight decay on
    BatchNorm and biases) and OneCycleLR, which moves the rate and cycles the
    momentum at every step."""
    def build():
        model = _ResNet()
        opt = torch.optim.SGD(_resnet_two_groups(model), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec("resnet_onecycle_groups", build, M.images(size=8), steps=steps, num_classes=4)


def resnet_differential_lr(steps=200):
    """Fine-tuning with a backbone rate ten times below the head's."""
    def build():
        model = _ResNet()
        return model, torch.optim.SGD(_resnet_groups(model, 0.03, 0.3), momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("resnet_differential_lr", build, M.quadrants(channels=1), steps=steps, num_classes=4)


def mixer_gradient_accumulation(steps=80):
    """Four backward passes (micro-batches) per optimizer step, on purpose."""
    def build():
        model = M.Mixer()
        return model, torch.optim.Adam(model.parameters(), lr=5e-3), nn.CrossEntropyLoss(), None

    return Spec("mixer_gradient_accumulation", build, M.quadrants(), steps=steps, accum=4, num_classes=4)


def lstm_lm_zero_grad_keep_tensors(steps=120):
    """optimizer.zero_grad(set_to_none=False): the gradient tensors stay,
    zeroed in place."""
    def build():
        model = M.LSTMLM()
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("lstm_lm_zero_grad_keep_tensors", build, M.tokens_lm(), steps=steps, zero_grad="keep_tensors",
                num_classes=32)


def conv_ae_zero_grad_after_forward(steps=120):
    """zero_grad() after the forward pass, right before backward (the other
    common place): the previous step's gradients are still there at the
    forward."""
    def build():
        model = M.ConvAutoencoder()
        return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.MSELoss(), None

    return Spec("conv_ae_zero_grad_after_forward", build, M.blobs(size=12, target="image"), steps=steps,
                zero_grad="after_forward")


class _MeanTeacher(nn.Module):
    """A student and its exponential-moving-average teacher inside one model:
    the teacher runs under torch.no_grad() in forward, its parameters do not
    require grad and are not in the optimizer; the output mixes both."""

    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
        self.teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        with torch.no_grad():
            t = self.teacher(x)
        return self.student(x) + 0.1 * t

    @torch.no_grad()
    def ema(self, decay=0.99):
        for pt, ps in zip(self.teacher.parameters(), self.student.parameters()):
            pt.mul_(decay).add_(ps, alpha=1 - decay)


def mean_teacher_no_grad(steps=150):
    """A teacher run under torch.no_grad() inside the model on purpose."""
    from .healthy import _teacher_data

    def build():
        model = _MeanTeacher()
        return model, torch.optim.Adam(model.student.parameters(), lr=2e-3), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step:
            model.ema()

    return Spec("mean_teacher_no_grad", build, _teacher_data(20, 5, 32), steps=steps, plant=plant, num_classes=5)


def resnet_gradual_unfreeze(steps=160, at=60):
    """The backbone frozen (requires_grad=False) for the first ``at`` steps,
    then unfrozen; the optimizer holds every parameter from the start. (As
    if pretrained: the residual BatchNorms' scales are 1, not the 0 of a
    zero-initialised residual that was never trained.)"""
    def build():
        model = _ResNet()
        for b in model.blocks:
            nn.init.ones_(b.bn2.weight)
        for name, p in model.named_parameters():
            if not name.startswith("fc"):
                p.requires_grad_(False)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step == at:
            for p in model.parameters():
                p.requires_grad_(True)

    return Spec("resnet_gradual_unfreeze", build, M.images(size=8), steps=steps, plant=plant, num_classes=4)


def mixer_lr_changed_by_hand(steps=160, at=80):
    """The rate divided by 10 by hand half way (for every group)."""
    def build():
        model = M.Mixer()
        return model, torch.optim.Adam(model.parameters(), lr=5e-3), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step == at:
            for g in opt.param_groups:
                g["lr"] *= 0.1

    return Spec("mixer_lr_changed_by_hand", build, M.quadrants(), steps=steps, plant=plant, num_classes=4)


def lstm_lm_cyclic_lr(steps=160):
    """CyclicLR (triangular): the rate rises tenfold and falls back every 50 steps."""
    def build():
        model = M.LSTMLM()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.1, max_lr=1.0, step_size_up=25)
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec("lstm_lm_cyclic_lr", build, M.tokens_lm(), steps=steps, clip=1.0, num_classes=32)


def mixer_warm_restarts(steps=160):
    """CosineAnnealingWarmRestarts: the rate jumps from ~0 back to its peak
    every 40 steps (a jump, and a healthy one)."""
    def build():
        model = M.Mixer()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return model, opt, nn.CrossEntropyLoss(), torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=40)

    return Spec("mixer_warm_restarts", build, M.quadrants(), steps=steps, num_classes=4)


def _regression(batch=32, d=10, mean=150.0, spread=20.0):
    """Targets of mean ``mean``: a linear function of the inputs, plus noise."""
    w = torch.randn(d, generator=torch.Generator().manual_seed(11))

    def batch_fn(step):
        gs = torch.Generator().manual_seed(9000 + step)
        x = torch.randn(batch, d, generator=gs)
        return x, (mean + spread * (x @ w) / math.sqrt(d) + torch.randn(batch, generator=gs))[:, None]

    return batch_fn


def regression_output_bias_at_target_mean(steps=200):
    """Karpathy, "A Recipe for Training Neural Networks" (2019), "init well":
    regressing values of mean 150, the final bias starts at 150. A large
    output from step 0, but an offset, not an amplification."""
    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        with torch.no_grad():
            model[4].bias.fill_(150.0)
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

    return Spec("regression_output_bias_at_target_mean", build, _regression(), steps=steps)


class _AdaLNZero(nn.Module):
    """A denoiser block modulated by the noise level, DiT's adaLN-Zero
    (Peebles & Xie, 2023): the modulation and the final layer zero-initialised,
    so the conditioning layers get exactly no gradient for two steps, then a
    tiny, growing one for about twenty."""

    def __init__(self, d=16, h=64, c=32):
        super().__init__()
        self.d = d
        self.cond = nn.Sequential(nn.Linear(1, c), nn.SiLU(), nn.Linear(c, c))
        self.inp = nn.Linear(d, h)
        self.ada = nn.Linear(c, 2 * h)
        self.mlp = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.Linear(h, h))
        self.out = nn.Linear(h, d)
        for m in (self.ada, self.out):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        xt, t = x[:, :self.d], x[:, self.d:]
        scale, gate = self.ada(self.cond(t)).chunk(2, -1)
        h = self.inp(xt)
        h = h + gate * self.mlp(nn.functional.layer_norm(h, h.shape[-1:]) * (1 + scale))
        return self.out(h)


def adaln_zero_denoiser(steps=150):
    """Predict the noise of x_t = sqrt(1 - t) x0 + sqrt(t) eps, given t."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(9500 + step)
        x0, t, eps = (torch.randn(64, 16, generator=gs) * 0.5 + 1, torch.rand(64, 1, generator=gs),
                      torch.randn(64, 16, generator=gs))
        return torch.cat([(1 - t).sqrt() * x0 + t.sqrt() * eps, t], dim=1), eps

    def build():
        torch.manual_seed(0)
        model = _AdaLNZero()
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.MSELoss(), None

    return Spec("adaln_zero_denoiser", build, batch_fn, steps=steps)


def mixer_finetune_tiny_lr(steps=120):
    """A Mixer trained first (unwatched), then fine-tuned with a new head:
    the backbone at Adam lr=1e-6 on purpose, the head at 1e-2. Most layers,
    hence the model's median, move by ~1e-6..1e-5 of their weights per step
    (what ``update_small`` calls barely moving), but the loss falls: nothing
    to blame on the rate."""
    def build():
        torch.manual_seed(0)
        model = M.Mixer()
        pre = torch.optim.Adam(model.parameters(), lr=3e-3)
        data = M.quadrants()
        for step in range(300):
            x, y = data(10_000 + step)
            pre.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            pre.step()
        model.head = nn.Linear(16, 4)  # the new task's head
        body = [p for n, p in model.named_parameters() if not n.startswith("head.")]
        opt = torch.optim.Adam([{"params": body, "lr": 1e-6}, {"params": model.head.parameters()}], lr=1e-2)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("mixer_finetune_tiny_lr", build, M.quadrants(), steps=steps, num_classes=4)


def lstm_probe_on_frozen_lm(steps=150):
    """A linear probe (one trainable layer, in the optimizer) on an LSTM
    language model frozen on purpose: the one trainable layer is the one the
    optimizer moves."""
    def build():
        torch.manual_seed(0)
        model = M.LSTMLM()
        for p in list(model.emb.parameters()) + list(model.lstm.parameters()):
            p.requires_grad_(False)
        return model, torch.optim.Adam(model.head.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("lstm_probe_on_frozen_lm", build, M.tokens_lm(), steps=steps, num_classes=32)


def all_specs():
    """Every healthy run of the corpus."""
    return [
        decoder_lm_rezero(), decoder_lm_tied_warmup(), decoder_lm_bf16(), mixer_dropout_cosine(),
        imbalanced_binary(), conv_ae_batch_of_two(), bag_frozen_pretrained(), rnn_clipped_bursts(),
        lstm_clipped_bursts(), unet_sigmoid_bce(), vae_kl_annealing(), seq2seq_teacher_forcing(),
        resnet_onecycle_groups(), resnet_differential_lr(), mixer_gradient_accumulation(),
        lstm_lm_zero_grad_keep_tensors(), conv_ae_zero_grad_after_forward(), mean_teacher_no_grad(),
        resnet_gradual_unfreeze(), mixer_lr_changed_by_hand(), lstm_lm_cyclic_lr(), mixer_warm_restarts(),
        regression_output_bias_at_target_mean(), adaln_zero_denoiser(), mixer_finetune_tiny_lr(),
        lstm_probe_on_frozen_lm(),
    ]
