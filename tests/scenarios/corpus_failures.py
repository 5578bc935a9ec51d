"""The generality corpus: realistic training bugs, ported from public reports.

Each scenario is a bug that people report (the thread or issue is named in
its docstring), planted in one of the architectures of models.py, with the
same run without the bug as ``fixed`` and a ``truth`` check that measures,
on the raw statistics and losses and without the diagnosis, that the fault
is real and where the case says it is. The expected root cause follows
DESIGN.md's rules (the first link of a failure chain; a cause outside the
layers on its pseudo-layer).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import models as M
from .failures import Case
from .harness import Spec

# --- helpers of the truth checks ----------------------------------------------


def _first(steps, mask):
    """The first step where ``mask`` holds (None: never)."""
    idx = np.flatnonzero(mask)
    return int(steps[idx[0]]) if len(idx) else None


def _param_rows(result):
    """Names of the rows with parameters (a finite grad_missing somewhere)."""
    out = []
    for name in (l["name"] for l in result.layers):
        if name.startswith("<"):
            continue
        _, v = result.series(name, "grad_missing")
        if np.isfinite(v).any():
            out.append(name)
    return out


def _moved(result, layer):
    """Whether the layer's weights ever changed (update ratio > 0, or a
    weight norm that differs between measurements)."""
    _, ur = result.series(layer, "update_ratio")
    _, w = result.series(layer, "weight_norm")
    w = w[np.isfinite(w)]
    return bool(np.nanmax(ur, initial=0) > 0 or (len(w) > 1 and np.ptp(w) > 0))


def _loss_fell(result, frac=0.8):
    return sum(result.losses[-20:]) < frac * sum(result.losses[:20])


def _first_nonfinite(result, metric="act_nonfinite"):
    """(step, first row in forward order) where ``metric`` turns non-finite."""
    names = [l["name"] for l in result.layers]
    j = None
    for step, row in result.rows:
        bad = np.flatnonzero(np.nan_to_num(row[:, _col(metric)], nan=0.0) > 0)
        bad = [i for i in bad if names[i] != "<optimizer>"]
        if bad:
            return step, names[bad[0]]
    return None, j


def _col(metric):
    from tb_neuraldbg import metadata

    return metadata.METRIC_INDEX[metric]


# --- 1. bugs that leave healthy-looking statistics -------------------------------


def decoder_lm_no_zero_grad():
    """A decoder-only LM whose loop never calls ``optimizer.zero_grad()``:
    every backward adds to the gradients of all the steps before. Reports:
    fastai/course22#58 ("if you run this loop for more than 10 iterations the
    loss starts growing again ... the gradients are accumulated rather than
    recomputed"), jcjohnson/pytorch-examples#31 ("training will be very
    unstable"), meta-pytorch/torchforge#71 ("a dumb bug where we weren't
    zeroing grad on optimizers after each step")."""
    def spec(zero):
        def build():
            model = M.DecoderLM()
            return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"decoder_lm_no_zero_grad{'' if zero == 'never' else '_fixed'}", build, M.tokens_lm(),
                    steps=60, zero_grad=zero)

    def truth(bug, fixed):
        # every layer's gradient still holds the previous steps' from step 1 on
        for layer in _param_rows(bug):
            steps, carried = bug.series(layer, "grad_carried")
            assert _first(steps, carried > 0) == 1, layer
            assert not (fixed.series(layer, "grad_carried")[1] > 0).any(), layer
        # ... so the norms grow: the head's is far above the fixed run's
        _, g_bug = bug.series("head", "grad_norm")
        _, g_fix = fixed.series("head", "grad_norm")
        assert np.median(g_bug[30:]) > 5 * np.median(g_fix[30:])

    return Case(spec("never"), ("exploding_gradient",), "<optimizer>", 1, fixed=spec("before"), truth=truth)


def mixer_zero_grad_before_step():
    """An MLP-Mixer whose loop calls ``optimizer.zero_grad()`` between
    ``loss.backward()`` and ``optimizer.step()``: every step updates with no
    gradient, nothing moves. Reports: patrickloeber/pytorchTutorial#19 (how
    can the optimizer update the parameters once zero_grad() has cleared
    them?), and the usual advice that zero_grad() may go anywhere "but
    between loss.backward() and optimizer.step()" (velog.io/@rhss10)."""
    def spec(zero):
        def build():
            model = M.Mixer()
            return model, torch.optim.Adam(model.parameters(), lr=5e-3), nn.CrossEntropyLoss(), None

        return Spec(f"mixer_zero_grad_before_step{'' if zero == 'before_step' else '_fixed'}", build,
                    M.quadrants(), steps=60, zero_grad=zero)

    def truth(bug, fixed):
        layers = _param_rows(bug)
        assert layers and not any(_moved(bug, l) for l in layers)
        assert all(_moved(fixed, l) for l in layers)
        # the gradients were there at backward's end
        assert all(np.nanmin(bug.series(l, "grad_norm")[1][:10]) > 0 for l in ("patch", "head"))

    return Case(spec("before_step"), ("frozen_weights",), "<optimizer>", 0, fixed=spec("before"), truth=truth)


def unet_optimizer_for_old_model():
    """A U-Net instantiated twice: the optimizer holds the first instance's
    parameters, the loop trains the second. Report: spro/practical-pytorch#9
    ("I have the model instantiated twice ... move the optimizer below the
    second one"); pytorch/pytorch#14467 asks for a warning when the
    optimizer's parameters are not the model's."""
    def spec(bug):
        def build():
            model = M.UNet()
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            if bug:
                model = M.UNet()  # e.g. re-created for the next fold
            return model, opt, nn.BCEWithLogitsLoss(), None

        return Spec(f"unet_optimizer_for_old_model{'' if bug else '_fixed'}", build, M.blobs(), steps=40)

    def truth(bug, fixed):
        layers = _param_rows(bug)
        assert not any(_moved(bug, l) for l in layers) and all(_moved(fixed, l) for l in layers)
        assert all((bug.series(l, "opt_group")[1] == -1).all() for l in layers)

    return Case(spec(True), ("frozen_weights",), "<optimizer>", 0, fixed=spec(False), truth=truth)


def seq2seq_detached_encoder():
    """A GRU encoder-decoder whose decoder starts from
    ``encoder_hidden.detach()``: the encoder never gets a gradient. Reports:
    keras-team/keras#2995 (a state that is not in the graph: "there
    effectively is no connection between the two during backprop"),
    vturrisi/solo-learn#135 ("calling feats.detach() will prevent the
    gradient from flowing ... will not it prevent the encoder to learn?")."""
    def spec(bug):
        def build():
            model = M.Seq2Seq(detach_hidden=bug)
            return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

        return Spec(f"seq2seq_detached_encoder{'' if bug else '_fixed'}", build, M.sequences_pair(), steps=60,
                    prepare=_teacher_forcing)

    def truth(bug, fixed):
        for enc in ("src_emb", "encoder"):
            assert (bug.series(enc, "grad_missing")[1] > 0).all(), enc
            assert (fixed.series(enc, "grad_missing")[1] == 0).all(), enc
        assert (bug.series("decoder", "grad_missing")[1] == 0).all()

    # the highest layer of the cut-off part
    return Case(spec(True), ("no_gradient",), "encoder", 0, fixed=spec(False), truth=truth)


def _teacher_forcing(model, x, y):
    model.target = y


class _NoGradBackbone(nn.Module):
    """A conv backbone and a head; ``no_grad``: the backbone's forward runs
    under torch.no_grad() (copied from a feature-extraction recipe, while the
    backbone is meant to be fine-tuned: its parameters require grad and are
    in the optimizer)."""

    def __init__(self, no_grad):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(64, 4)
        self.no_grad = no_grad

    def features(self, x):
        return self.pool(self.relu2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))).flatten(1)

    def forward(self, x):
        if self.no_grad:
            with torch.no_grad():
                f = self.features(x)
        else:
            f = self.features(x)
        return self.head(f)


def backbone_under_no_grad():
    """A CNN whose backbone runs under ``torch.no_grad()`` inside forward
    while it is meant to train. Reports: edreisMD/ConVIRT-pytorch#7 ("why
    is the text encoder wrapped in a 'with torch.no_grad()' block?"),
    bowang-lab/MedSAM#233 ("my understanding is that you cannot tweak the
    prompt_encoder after doing so")."""
    def spec(bug):
        def build():
            model = _NoGradBackbone(bug)
            return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

        return Spec(f"backbone_under_no_grad{'' if bug else '_fixed'}", build, M.quadrants(), steps=60)

    def truth(bug, fixed):
        for layer in ("conv1", "bn1", "conv2"):
            assert (bug.series(layer, "ran_without_grad")[1] == 1).all(), layer
            assert (bug.series(layer, "grad_missing")[1] > 0).all(), layer
            assert not _moved(bug, layer) and _moved(fixed, layer), layer
        assert _moved(bug, "head")

    return Case(spec(True), ("no_gradient",), "conv2", 0, fixed=spec(False), truth=truth)


def _resnet_groups(model, backbone_lr, head_lr=0.05):
    head = list(model.fc.parameters())
    ids = {id(p) for p in head}
    return [{"params": [p for p in model.parameters() if id(p) not in ids], "lr": backbone_lr},
            {"params": head, "lr": head_lr}]


def resnet_backbone_lr_zero():
    """A BatchNorm ResNet fine-tuned with differential learning rates whose
    backbone group gets ``base_lr * (epoch // 10)``: 0 for the first ten
    epochs, so the backbone is bit-identical after every step while the head
    trains. Reports of a rate that silently became 0: leftthomas/SRGAN#94
    ("the learning rate is quickly becoming zero ... the SRGAN does not seem
    to train"), samet-akcay/skip-ganomaly#4 (a lambda rule that never does
    what it says)."""
    from .healthy import _ResNet

    def spec(bug):
        def build():
            model = _ResNet()
            opt = torch.optim.SGD(_resnet_groups(model, 0.05 * (0 // 10) if bug else 0.05), momentum=0.9)
            return model, opt, nn.CrossEntropyLoss(), None

        return Spec(f"resnet_backbone_lr_zero{'' if bug else '_fixed'}", build, M.images(size=8), steps=120)

    def truth(bug, fixed):
        assert not _moved(bug, "stem") and not _moved(bug, "blocks.2.conv2") and _moved(bug, "fc")
        assert _moved(fixed, "stem")
        assert (bug.series("blocks.2.conv2", "lr")[1] == 0).all()

    # the highest layer that does not move (the last of the backbone group)
    return Case(spec(True), ("frozen_weights",), "blocks.2.bn2", 0, fixed=spec(False), truth=truth)


def bag_optimizer_only_head():
    """An EmbeddingBag classifier whose optimizer was built from the layers
    after the embedding (left from a run with a frozen pretrained table):
    the embedding gets gradients every step and never moves. Reports:
    Z-Zheng/SimpleCV#7 (pass all parameters of the model to the optimizer,
    not only a part), pytorch/pytorch#14467."""
    def spec(bug):
        def build():
            model = M.BagClassifier()
            params = list(model.fc.parameters()) + list(model.out.parameters()) if bug else model.parameters()
            return model, torch.optim.Adam(params, lr=1e-2), nn.CrossEntropyLoss(), None

        return Spec(f"bag_optimizer_only_head{'' if bug else '_fixed'}", build, M.bags(), steps=60)

    def truth(bug, fixed):
        assert not _moved(bug, "emb") and _moved(fixed, "emb") and _moved(bug, "fc")
        assert (bug.series("emb", "grad_norm")[1] > 0).all()
        assert (bug.series("emb", "opt_group")[1] == -1).all()

    return Case(spec(True), ("frozen_weights",), "emb", 0, fixed=spec(False), truth=truth)


# --- 2. failure chains ------------------------------------------------------------------


def decoder_lm_causal_mask_diagonal():
    """A decoder-only LM whose boolean causal mask is built with
    ``torch.triu(ones, diagonal=0)``: the first position may attend to
    nothing, softmax over all -inf is NaN inside nn.MultiheadAttention.
    Reports: pytorch/pytorch#41508 ("the root cause is that an entire row
    may be masked out. This in turn causes NaN gradients"),
    pytorch/pytorch#127055."""
    def spec(diag):
        def build():
            model = M.DecoderLM(mask_diagonal=diag)
            return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"decoder_lm_causal_mask_diagonal{'' if diag == 0 else '_fixed'}", build, M.tokens_lm(),
                    steps=40)

    def truth(bug, fixed):
        assert _first_nonfinite(bug) == (0, "blocks.0.attn")
        assert _first_nonfinite(fixed) == (None, None)

    return Case(spec(0), ("nonfinite",), "blocks.0.attn", 0, fixed=spec(1), truth=truth)


def decoder_lm_rmsnorm_without_eps(pad_from=23):
    """A LLaMA-style decoder (RMSNorm, no position embedding, padding_idx=0)
    whose hand-written RMSNorm has no epsilon: the first left-padded batch
    (step ``pad_from``) gives a zero vector, 0/0 = NaN in the first norm.
    Reports: apple/coremltools#2822 ("a 0/0 -> NaN on all-zero rows, which
    the epsilon was originally there to prevent"), NVIDIA/apex#1295."""
    def spec(eps):
        def build():
            model = M.DecoderLM(norm={"eps": eps}, positions=False, padding_idx=0)
            return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"decoder_lm_rmsnorm_without_eps{'' if eps == 0 else '_fixed'}", build,
                    M.tokens_lm(pad_from=pad_from), steps=pad_from + 10)

    def truth(bug, fixed):
        assert _first_nonfinite(bug) == (pad_from, "blocks.0.norm1")
        assert _first_nonfinite(fixed) == (None, None)

    return Case(spec(0.0), ("nonfinite",), "blocks.0.norm1", pad_from, fixed=spec(1e-6), truth=truth)


class _HandBCE(nn.Module):
    """Binary cross-entropy written by hand on probabilities, without a clamp."""

    def __init__(self, eps=0.0):
        super().__init__()
        self.eps = eps

    def forward(self, p, t):
        return -(t * torch.log(p + self.eps) + (1 - t) * torch.log(1 - p + self.eps)).mean()


def unet_hand_written_bce():
    """A U-Net segmenting blobs with a sigmoid output and a hand-written BCE:
    once the network is confident, sigmoid rounds to exactly 1.0 in float32
    and ``log(1 - p)`` is -inf. Reports: tiny-dnn/tiny-dnn#410 ("an output
    probability reaching 1.0 precisely ... evaluates to 0*log(0) which
    returns NaN"), huggingface/candle#2561, hwalsuklee/tensorflow-mnist-VAE#4."""
    def spec(eps):
        def build():
            model = M.UNet(sigmoid=True)
            return model, torch.optim.Adam(model.parameters(), lr=5e-2), _HandBCE(eps), None

        return Spec(f"unet_hand_written_bce{'' if eps == 0 else '_fixed'}", build, M.blobs(), steps=80)

    def onset(bug):
        step, layer = _first_nonfinite(bug)
        assert layer == "<loss>", (step, layer)  # the loss is the first non-finite value
        return step

    def truth(bug, fixed):
        assert onset(bug) > 20  # born once the network is confident, not at its init
        assert _first_nonfinite(fixed) == (None, None) and _loss_fell(fixed)

    return Case(spec(0.0), ("nonfinite",), "<loss>", None, fixed=spec(1e-7), truth=truth, measure_onset=onset)


# --- 3. causes outside the layers --------------------------------------------------


def _resnet_two_groups(model, lr=0.05, wd=5e-4):
    """The usual split: no weight decay on BatchNorm parameters and biases."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim == 1 else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def lstm_lm_weight_decay_typo(at=64):
    """An LSTM language model trained with AdamW whose "phase 2" config sets
    ``weight_decay = 10`` (1e-1 meant, a dropped "e-") by hand at step
    ``at``: every weight shrinks by lr x 10 = 10 % a step and the model
    forgets what it learnt. Reports: tinghuiz/SfMLearner#34 (a weight decay
    of 0.05: "my two networks just go to zero very quickly"), fastai/fastai#1806
    ("try 1000, it will go nan in one epoch")."""
    def spec(wd):
        def build():
            model = M.LSTMLM()
            return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1), nn.CrossEntropyLoss(), None

        def plant(step, model, opt):
            if step == at:
                opt.param_groups[0]["weight_decay"] = wd

        return Spec(f"lstm_lm_weight_decay_typo{'' if wd > 1 else '_fixed'}", build, M.tokens_lm(),
                    steps=at + 80, plant=plant, num_classes=32)

    def truth(bug, fixed):
        _, w = bug.series("head", "weight_norm")
        _, w0 = fixed.series("head", "weight_norm")
        # the weights shrink several times over (the fixed run's keep growing)
        assert np.nanmin(w[-10:]) < np.nanmax(w[:at]) / 3 and np.nanmin(w0[-10:]) > np.nanmax(w0[:at])
        steps, wd = bug.series("lstm", "weight_decay")
        assert _first(steps, wd == 10) == at
        assert np.mean(bug.losses[-10:]) > 2 * np.mean(bug.losses[at - 10:at]) and _loss_fell(fixed)

    return Case(spec(10.0), ("activation_collapse", "vanishing_gradient", "loss_plateau", "loss_spike",
                             "exploding_gradient", "dead_activation", "saturated_activation"), "<optimizer>", at,
                fixed=spec(0.1), truth=truth)


def mixer_backbone_lr_typo(at=41):
    """An MLP-Mixer trained with SGD and one param group for the backbone
    (patch embedding and mixing blocks), one for the head; at step ``at`` the
    user sets the backbone's rate for a fine-tuning phase and types
    ``lr = 5.0`` (5e-2 meant): that group diverges. A rate changed by hand,
    per group, right before the failure. Reports: keras-team/keras#3425
    ("sudden accuracy drop ... with a proper setting of the learning rate
    this is less frequently an issue"), huggingface/transformers#4240."""
    def spec(lr):
        def build():
            model = M.Mixer()
            head = list(model.head.parameters())
            ids = {id(p) for p in head}
            body = [p for p in model.parameters() if id(p) not in ids]
            opt = torch.optim.SGD([{"params": body}, {"params": head}], lr=0.05, momentum=0.9)
            return model, opt, nn.CrossEntropyLoss(), None

        def plant(step, model, opt):
            if step == at:
                opt.param_groups[0]["lr"] = lr

        return Spec(f"mixer_backbone_lr_typo{'' if lr > 1 else '_fixed'}", build, M.quadrants(), steps=at + 40,
                    plant=plant)

    def truth(bug, fixed):
        steps, lr = bug.series("blocks.0.tok1", "lr")
        assert _first(steps, lr == 5.0) == at
        assert np.allclose(bug.series("head", "lr")[1], 0.05)
        after = np.asarray(bug.losses[at + 1:])
        assert not np.isfinite(after).all() or np.max(after) > 3 * np.max(bug.losses[at - 10:at])
        assert _loss_fell(fixed)

    return Case(spec(5.0), ("exploding_gradient", "activation_explosion", "loss_spike", "nonfinite"),
                "<optimizer>", at, fixed=spec(0.05), truth=truth)


def lstm_lm_scheduler_per_batch():
    """An LSTM language model with ``StepLR(step_size=2, gamma=0.1)`` meant
    per epoch but stepped after every batch: the rate is 1e-3 of its start
    from step 6 and the model stops learning near chance. Reports:
    leftthomas/SRGAN#94 and Lornatang/SRGAN-PyTorch#1 ("they are called at
    each training step which means that learning rate is quickly becoming
    zero after a few training steps")."""
    def spec(per_batch):
        def build():
            model = M.LSTMLM()
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2 if per_batch else 10_000, gamma=0.1)
            return model, opt, nn.CrossEntropyLoss(), sched

        return Spec(f"lstm_lm_scheduler_per_batch{'' if per_batch else '_fixed'}", build, M.tokens_lm(),
                    steps=160, num_classes=32)

    def truth(bug, fixed):
        steps, lr = bug.series("lstm", "lr")
        assert _first(steps, lr <= 1.001e-3 * lr[0]) == 6
        assert np.mean(bug.losses[-20:]) > 0.9 * math.log(32) and _loss_fell(fixed, 0.5)

    # where the rate fell a thousandfold: from then the loss stays at chance
    # and, once the rate underflows, the weights stop changing
    return Case(spec(True), ("loss_plateau", "frozen_weights"), "<optimizer>", 6, fixed=spec(False), truth=truth)


class _SignBugSGD(torch.optim.Optimizer):
    """SGD written by hand: ``p += lr * grad`` (the sign of the update
    flipped), or the correct ``p -= lr * grad``."""

    def __init__(self, params, lr, sign=+1.0):
        super().__init__(params, {"lr": lr})
        self.sign = sign

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=self.sign * g["lr"])


def mixer_gradient_ascent():
    """An MLP-Mixer trained with a hand-written SGD whose update has the
    wrong sign: gradient ascent, the loss climbs from the first update on. Reports: torch/optim#52 ("the code works when the update to the
    parameters is positive not negative?"), Yorko/mlcourse.ai#640 ("minus
    ... is critical")."""
    def spec(sign):
        def build():
            model = M.Mixer()
            return model, _SignBugSGD(model.parameters(), lr=0.2, sign=sign), nn.CrossEntropyLoss(), None

        return Spec(f"mixer_gradient_ascent{'' if sign > 0 else '_fixed'}", build, M.quadrants(), steps=80)

    def truth(bug, fixed):
        climb = np.asarray(bug.losses)
        assert np.nanmax(climb[:40]) > 2 * np.mean(climb[:3]) and _loss_fell(fixed)
        assert climb[10] > climb[0]  # it climbs from the start

    # the cause is the update itself, from the first one (step 1)
    return Case(spec(+1.0), ("loss_spike", "exploding_gradient"), "<optimizer>", 1, fixed=spec(-1.0), truth=truth)


def conv_ae_adam_lr_too_high():
    """A convolutional autoencoder with Adam at lr=1 (1e-3 meant): the first updates
    push the pre-activations far out: most ReLUs die and the output sigmoid
    is pinned, every pixel saturated. Reports: dangitstam/topic-rnn#9 ("smaller learning rate to
    prevent dying ReLU"), MollyZhang/Multi-task-TCGA-learning#16 ("all
    hidden layers linear output is negative, thus giving a 0 activation
    through out")."""
    def spec(lr):
        def build():
            model = M.ConvAutoencoder()
            return model, torch.optim.Adam(model.parameters(), lr=lr), nn.MSELoss(), None

        return Spec(f"conv_ae_adam_lr_too_high{'' if lr > 0.05 else '_fixed'}", build,
                    M.blobs(size=12, target="image"), steps=60)

    def truth(bug, fixed):
        # the output sigmoid is pinned at a constant: every value saturated
        steps, sat = bug.series("out", "act_sat_frac")
        assert np.nanmin(sat[5:]) == 1.0 and np.nanmax(fixed.series("out", "act_sat_frac")[1]) < 0.5
        assert not _loss_fell(bug) and _loss_fell(fixed)

    return Case(spec(1.0), ("dead_activation", "exploding_gradient", "activation_collapse"), "<optimizer>", 0,
                tolerance=5, fixed=spec(1e-3), truth=truth)


def conv_ae_partial_zero_grad():
    """A convolutional autoencoder whose loop clears only the decoder's
    gradients (``model.dec2.zero_grad()`` where ``model.zero_grad()`` was
    meant, as in GAN code that zeroes one network of two): the encoder's
    gradients accumulate. Reports: Lightning-AI/pytorch-lightning#557 ("the
    optimizer.zero_grad() for discriminator is then only called once all the
    gradients are accumulated"), ajbrock/BigGAN-PyTorch#25."""
    def zero(part):
        def f(model, opt):
            (model.dec2 if part else model).zero_grad()

        return f

    def spec(part):
        def build():
            model = M.ConvAutoencoder()
            return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.MSELoss(), None

        return Spec(f"conv_ae_partial_zero_grad{'' if part else '_fixed'}", build, M.blobs(size=12, target="image"),
                    steps=40, zero_grad=zero(part))

    def truth(bug, fixed):
        for layer in ("enc1", "enc2", "dec1"):
            steps, c = bug.series(layer, "grad_carried")
            assert _first(steps, c > 0) == 1, layer
        assert not (bug.series("dec2", "grad_carried")[1] > 0).any()
        assert not (fixed.series("enc1", "grad_carried")[1] > 0).any()

    return Case(spec(True), ("exploding_gradient",), "<optimizer>", 1, fixed=spec(False), truth=truth)


# --- 4. bursts, divergences, chains ----------------------------------------------------


class RNNLM(nn.Module):
    """Embedding -> a recurrent layer (vanilla tanh RNN, or ``cell``) ->
    Linear, logits [B, V, T]; the recurrent row is named ``rnn``."""

    def __init__(self, vocab=8, d=8, h=64, cell=nn.RNN):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = cell(d, h, batch_first=True)
        self.head = nn.Linear(h, vocab)

    def forward(self, x):
        return self.head(self.rnn(self.emb(x))[0]).transpose(1, 2)


def _delayed_copy(batch=16, seq=30, delay=6, vocab=8):
    """Predict the token seen ``delay`` steps earlier (a long dependency)."""
    def batch_fn(step):
        g = torch.Generator().manual_seed(step)
        x = torch.randint(1, vocab, (batch, seq), generator=g)
        y = torch.zeros_like(x)
        y[:, delay:] = x[:, :-delay]
        return x, y

    return batch_fn


def rnn_unclipped_gradient_burst():
    """A vanilla RNN on a long-dependency task, SGD with momentum and no
    gradient clipping: at one step the gradient bursts two orders of
    magnitude above its recent level (the exploding-gradient cliff), the
    update wrecks the weights and the loss climbs to four times its level
    and never recovers. The same run with clip_grad_norm_(0.5) learns.
    Reports: asappresearch/sru#2 ("I suspect LSTM gets gradient explosion"),
    Marcovaldong/lstmp.pytorch#2 ("might be problem of exploding gradient?")."""
    def spec(clip):
        def build():
            model = RNNLM()
            return model, torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9), nn.CrossEntropyLoss(), None

        return Spec(f"rnn_unclipped_gradient_burst{'' if clip is None else '_fixed'}", build, _delayed_copy(),
                    steps=120, clip=clip)

    def onset(bug):
        steps, g = bug.series("rnn", "grad_norm")
        # the first step far above the layer's own last ten
        for i in range(10, len(g)):
            if g[i] > 30 * np.median(g[i - 10:i]):
                return int(steps[i])
        return None

    def truth(bug, fixed):
        s = onset(bug)
        assert s is not None
        assert np.max(bug.losses[s + 1:s + 20]) > 1.5 * np.median(bug.losses[s - 10:s])
        assert _loss_fell(fixed) and not _loss_fell(bug)

    return Case(spec(None), ("exploding_gradient",), "rnn", None, fixed=spec(0.5), truth=truth,
                measure_onset=onset)


class _ContrastiveLoss(nn.Module):
    """Hand-written contrastive loss on the pairwise Euclidean distances of
    a batch of embeddings, the diagonal included: sqrt(0) has an infinite
    derivative, so the gradient is NaN whatever the values (``eps`` is the
    fix)."""

    def __init__(self, eps=0.0, margin=1.0):
        super().__init__()
        self.eps, self.margin = eps, margin

    def forward(self, z, y):
        d = torch.sqrt((z[:, None] - z[None]).pow(2).sum(-1) + self.eps)
        same = (y[:, None] == y[None]).float()
        return (same * d.pow(2) + (1 - same) * torch.relu(self.margin - d).pow(2)).mean()


def contrastive_sqrt_under_gradscaler():
    """A metric-learning MLP under AMP (bf16 autocast and a GradScaler) with
    a hand-written contrastive loss that takes sqrt of the pairwise squared
    distances, zero on the diagonal: every backward is NaN, the scaler skips
    every step and its scale collapses. The NaN is born in the loss's
    backward (the root); the collapse is its symptom. Reports:
    keras-team/keras#9097 ("NaN loss when using euclidean distance for
    siamese network (due to K.sqrt)"), pytorch/pytorch#37154,
    lilanxiao/Rotated_IoU#20 ("the backprop of torch.sqrt() would generate
    nan if the input is zero")."""
    def spec(eps):
        def build():
            model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
            return model, torch.optim.Adam(model.parameters(), lr=1e-3), _ContrastiveLoss(eps), None

        from .failures import _teacher

        return Spec(f"contrastive_sqrt_under_gradscaler{'' if eps == 0 else '_fixed'}", build, _teacher(), steps=40,
                    amp=True)

    def truth(bug, fixed):
        steps, nf = bug.series("4", "gout_nonfinite")
        assert (nf > 0).all() and not (fixed.series("4", "gout_nonfinite")[1] > 0).any()
        _, scale = bug.series("<optimizer>", "scale")
        assert scale[-1] <= scale[0] * 2.0 ** -12
        # finite forward: the loss value itself is fine
        assert np.isfinite(bug.losses).all()

    return Case(spec(0.0), ("nonfinite",), "<loss>", 0, fixed=spec(1e-8), truth=truth)


def contrastive_sqrt_of_a_zero_distance():
    """The same hand-written contrastive loss in float32, without a scaler:
    the loss is finite, its backward through sqrt(0) is NaN, and every layer
    receives it. Born in the loss's backward, the root is ``<loss>``, not the
    last layer. Reports: pytorch/pytorch#2421 ("Gradient of zero norm is
    nan"), keras-team/keras#9097."""
    def spec(eps):
        def build():
            model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
            return model, torch.optim.Adam(model.parameters(), lr=1e-3), _ContrastiveLoss(eps), None

        from .failures import _teacher

        return Spec(f"contrastive_sqrt_of_a_zero_distance{'' if eps == 0 else '_fixed'}", build, _teacher(),
                    steps=40)

    def truth(bug, fixed):
        # step 0: a finite loss and forward, and every layer's output gradient non-finite
        assert np.isfinite(bug.losses[0]) and _first_nonfinite(bug)[0] != 0
        assert all(bug.series(name, "gout_nonfinite")[1][0] > 0 for name in ("0", "2", "4"))
        assert _first_nonfinite(fixed) == (None, None) and _loss_fell(fixed)

    return Case(spec(0.0), ("nonfinite",), "<loss>", 0, fixed=spec(1e-8), truth=truth)


def mlp_every_linear_zero_initialised():
    """Every Linear's weight and bias set to 0 ("why don't weights get
    adjusted when initialised to 0", community.deeplearning.ai/t/431799;
    stats.stackexchange.com/q/294332): the hidden outputs are exactly 0, the
    ReLUs dead, the hidden weights never get a gradient; only the output
    bias learns the class prior. The chain of dead layers starts at its
    first link, the first Linear, whose input (the batch) is alive."""
    def spec(zero):
        def build():
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
            if zero:
                for m in model:
                    if isinstance(m, nn.Linear):
                        nn.init.zeros_(m.weight)
                        nn.init.zeros_(m.bias)
            return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

        from .failures import _teacher

        return Spec(f"mlp_every_linear_zero_initialised{'' if zero else '_fixed'}", build, _teacher(), steps=120,
                    num_classes=4)

    def truth(bug, fixed):
        assert bug.series("0", "act_absmax")[1][0] == 0.0  # the first layer's output is exactly 0
        for name in ("0", "2"):  # the hidden layers never get a gradient
            g = bug.series(name, "grad_norm")[1]
            assert (g[np.isfinite(g)] == 0).all()
        assert _loss_fell(fixed)

    return Case(spec(True), ("dead_activation",), "0", 0, fixed=spec(False), truth=truth)


def vae_kl_summed_posterior_collapse():
    """A VAE whose KL term is summed over the batch while the reconstruction
    is averaged (a weight of batch_size on the KL): the encoder's means
    collapse onto the prior, the same for every input, and the decoder
    ignores z. Reports: AppliedDataSciencePartners/WorldModels#12 ("vae_kl_loss:
    3.8347e-07 ... it looks like the posterior is collapsing", with loss
    reductions that differ from the original code), molecularsets/moses#45,
    Lightning-Universe/lightning-bolts#328."""
    def spec(beta):
        def build():
            model = M.VAE()
            model.beta = beta
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), M.vae_loss(model), None

        return Spec(f"vae_kl_summed_posterior_collapse{'' if beta > 1 else '_fixed'}", build, M.binary_patterns(),
                    steps=150)

    def truth(bug, fixed):
        _, s_bug = bug.series("mu", "act_std")
        _, s_fix = fixed.series("mu", "act_std")
        assert np.nanmedian(s_bug[-30:]) < 1e-2 * np.nanmedian(s_fix[-30:])

    return Case(spec(32.0), ("activation_collapse",), "mu", None, fixed=spec(1.0), truth=truth,
                measure_onset=lambda r: _first(*_collapse_series(r, "mu")))


def _collapse_series(result, layer):
    """(steps, mask): where the layer's output std fell below 1e-3 of its first."""
    steps, s = result.series(layer, "act_std")
    ok = np.isfinite(s)
    return steps[ok], s[ok] < 1e-3 * s[ok][0]


def mixer_double_softmax():
    """An MLP-Mixer with a softmax in its head, trained with
    CrossEntropyLoss (which applies log-softmax again): the loss cannot go
    below ~0.74 and stays near chance. Reports: ariecattan/SciCo#2 ("this
    bounds the minimum possible loss per example to roughly 0.74"),
    bowang-lab/Transformer-GCN-QA#32."""
    def spec(bug):
        def build():
            model = M.Mixer(softmax_head=bug)
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"mixer_double_softmax{'' if bug else '_fixed'}", build, M.quadrants(), steps=320, num_classes=4)

    def truth(bug, fixed):
        assert np.mean(bug.losses[-50:]) > 0.9 * math.log(4) and np.mean(fixed.losses[-50:]) < 0.5 * math.log(4)

    return Case(spec(True), ("loss_plateau",), "<loss>", 0, fixed=spec(False), truth=truth)


def decoder_lm_padding_batch(at=37):
    """A decoder-only LM fed, at step ``at``, a batch that is padding only
    (a collate function that pads an empty shard): every token is 0, a
    constant batch. Reports: pytorch/pytorch#81077 (sequences of length 0 in
    a batch: "I was able to fix it by forcing all sequence lengths to" be
    positive), alexTsaptsinos/lyricsHAN#3 ("the issue is due to empty
    padding. If there is a row that is entirely made up of zeros")."""
    base = M.tokens_lm()

    def batch_fn(bug):
        def f(step):
            x, y = base(step)
            if bug and step == at:
                x = torch.zeros_like(x)
            return x, y

        return f

    def spec(bug):
        def build():
            model = M.DecoderLM(padding_idx=0)
            return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"decoder_lm_padding_batch{'' if bug else '_fixed'}", build, batch_fn(bug), steps=at + 20)

    def truth(bug, fixed):
        steps, std = bug.series("<input>", "act_std")
        assert _first(steps, std == 0) == at and not (fixed.series("<input>", "act_std")[1] == 0).any()

    return Case(spec(True), ("data_anomaly",), "<input>", at, fixed=spec(False), truth=truth)


def bag_labels_shuffled():
    """An EmbeddingBag classifier whose data pipeline shuffles the labels
    separately from the texts: labels unrelated to the inputs, the loss stays
    at chance while gradients flow. Reports: wasidennis/AdaptSegNet#109 (a loss
    "almost always 0.693"), ariecattan/SciCo#2 (a loss stuck near 1.0)."""
    base = M.bags()

    def batch_fn(bug):
        def f(step):
            x, y = base(step)
            if bug:
                y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(99_000 + step))]
            return x, y

        return f

    def spec(bug):
        def build():
            model = M.BagClassifier()
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"bag_labels_shuffled{'' if bug else '_fixed'}", build, batch_fn(bug), steps=320, num_classes=4)

    def truth(bug, fixed):
        assert np.mean(bug.losses[-50:]) > 0.95 * math.log(4) and _loss_fell(fixed, 0.5)

    return Case(spec(True), ("loss_plateau",), "<loss>", 0, fixed=spec(False), truth=truth)


def conv_ae_pruned_layer(at=43):
    """A convolutional autoencoder pruned mid-run with
    ``prune.l1_unstructured(model.enc2, "weight", amount=1.0)`` (100 % of the
    weights: 0.1 meant): the layer's output is its bias whatever its input,
    and every gradient before it is exactly 0. The root is the pruned layer
    (the one that passes no gradient on), not the first that starves. Reports:
    kentaroy47/Deep-Compression.Pytorch#4 ("no matter which percentage, test
    on testloader only 10% accuracy"), pytorch/pytorch#32928 (pruning "is
    only zeroing out the weights")."""
    from torch.nn.utils import prune

    def spec(amount):
        def build():
            model = M.ConvAutoencoder()
            return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.MSELoss(), None

        def plant(step, model, opt):
            if step == at:
                prune.l1_unstructured(model.enc2, "weight", amount=amount)

        return Spec(f"conv_ae_pruned_layer{'' if amount == 1.0 else '_fixed'}", build,
                    M.blobs(size=12, target="image"), steps=at + 40, plant=plant)

    def truth(bug, fixed):
        # from the prune on, every gradient before enc2 is exactly 0, its own is not
        _, g = bug.series("enc1", "grad_norm")
        assert (g[at:] == 0).all() and (g[:at] > 0).all()
        assert (bug.series("enc2", "grad_norm")[1] > 0).all()
        assert (fixed.series("enc1", "grad_norm")[1] > 0).all()

    return Case(spec(1.0), ("vanishing_gradient",), "enc2", at, fixed=spec(0.1), truth=truth)


class _EveryEpoch:
    """A scheduler stepped once per epoch of ``batches`` (the loop calls
    ``step()`` after every batch)."""

    def __init__(self, sched, batches):
        self.sched, self.batches, self.calls = sched, batches, 0

    def step(self):
        self.calls += 1
        if self.calls % self.batches == 0:
            self.sched.step()


def mixer_warmup_in_epochs_of_batches():
    """An MLP-Mixer whose LinearLR warmup (start_factor=1e-3, over 50
    iterations) is stepped once per epoch: the first epoch (longer than the
    run) trains at 1e-3 of the rate, the whole model barely moves and the
    loss stays at chance. Source: LinearLR's contract (the factor rises from
    start_factor over total_iters calls of step(), whatever they count: the
    torch.optim.lr_scheduler docs step per epoch); Humbatova et al. ICSE
    2020, Training > Hyperparameters > "Suboptimal learning rate". Fixed:
    the scheduler stepped every batch, as its total_iters meant."""
    def spec(per_epoch):
        def build():
            model = M.Mixer()
            opt = torch.optim.Adam(model.parameters(), lr=5e-4)
            sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1e-3, total_iters=50)
            return model, opt, nn.CrossEntropyLoss(), _EveryEpoch(sched, 200 if per_epoch else 1)

        return Spec(f"mixer_warmup_in_epochs_of_batches{'' if per_epoch else '_fixed'}", build, M.quadrants(),
                    steps=150, num_classes=4)

    def truth(bug, fixed):
        _, lr = bug.series("head", "lr")
        assert np.nanmax(lr) <= 1.01e-3 * 5e-4  # the rate never left start_factor x its base
        # every layer moves by under a hundredth of the healthy 1e-3 per step
        for layer in _param_rows(bug):
            assert np.nanmax(bug.series(layer, "update_ratio")[1], initial=0) < 1e-5, layer
        assert np.mean(bug.losses[-20:]) > 0.97 * math.log(4) and _loss_fell(fixed, 0.8)

    return Case(spec(True), ("loss_plateau", "frozen_weights"), "<optimizer>", 0, tolerance=10,
                fixed=spec(False), truth=truth)


class _ProbeLM(nn.Module):
    """A frozen LSTM language model's features, a new head (``fc``)."""

    def __init__(self, vocab=32):
        super().__init__()
        self.lm = M.LSTMLM(vocab=vocab)
        self.fc = nn.Linear(64, vocab)

    def forward(self, x):
        return self.fc(self.lm.lstm(self.lm.emb(x))[0]).transpose(1, 2)


def lstm_probe_head_after_optimizer():
    """A linear probe on a frozen (on purpose) LSTM language model whose new
    head is attached after the optimizer was built: the optimizer holds the
    old head, the new one gets gradients and never moves. Source: the
    torch.optim note that parameters must stay the same objects over the
    optimizer's life (https://pytorch.org/docs/stable/optim.html). Fixed:
    the head replaced before the optimizer is built."""
    def spec(bug):
        def build():
            model = _ProbeLM()
            for p in model.lm.parameters():
                p.requires_grad_(False)  # the backbone is frozen on purpose
            if not bug:
                model.fc = nn.Linear(64, 32)
            opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
            if bug:
                model.fc = nn.Linear(64, 32)
            return model, opt, nn.CrossEntropyLoss(), None

        return Spec(f"lstm_probe_head_after_optimizer{'' if bug else '_fixed'}", build, M.tokens_lm(),
                    steps=60, num_classes=32)

    def truth(bug, fixed):
        assert _param_rows(bug) == ["fc"]  # the only trainable layer
        assert not _moved(bug, "fc") and _moved(fixed, "fc")
        assert (bug.series("fc", "opt_group")[1] == -1).all()
        assert np.nanmin(bug.series("fc", "grad_norm")[1]) > 0

    return Case(spec(True), ("frozen_weights",), "fc", 0, fixed=spec(False), truth=truth)


def all_cases():
    """Every corpus scenario."""
    return [
        decoder_lm_no_zero_grad(), mixer_zero_grad_before_step(), unet_optimizer_for_old_model(),
        seq2seq_detached_encoder(), backbone_under_no_grad(), resnet_backbone_lr_zero(),
        bag_optimizer_only_head(), decoder_lm_causal_mask_diagonal(), decoder_lm_rmsnorm_without_eps(),
        unet_hand_written_bce(), lstm_lm_weight_decay_typo(), mixer_backbone_lr_typo(),
        lstm_lm_scheduler_per_batch(), mixer_gradient_ascent(), conv_ae_adam_lr_too_high(),
        conv_ae_partial_zero_grad(), rnn_unclipped_gradient_burst(),
        contrastive_sqrt_under_gradscaler(), decoder_lm_padding_batch(), bag_labels_shuffled(),
        conv_ae_pruned_layer(), contrastive_sqrt_of_a_zero_distance(), mlp_every_linear_zero_initialised(),
        mixer_warmup_in_epochs_of_batches(), lstm_probe_head_after_optimizer(),
    ]


_ = (math, F)
