"""Outputs that stop depending on the input (docs/diagnosis.md, "Whether a
layer's output still differs between samples"), and healthy runs built to
look like it.

A model is useful only while its output depends on its input. The failure:
a small conv net trained BYOL-style (two noisy views of each image, the
squared distance between their embeddings) without a predictor, a
stop-gradient or negatives: the cheapest minimum maps every image to one
point. The
controls: the same net with a variance term that keeps the embeddings apart
(VICReg's), an autoencoder whose code has inactive dimensions (an L1 penalty
on it) while it reconstructs, and a classifier whose head starts at zero
(its prior) and then learns.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .failures import Case
from .harness import Spec


def _images(batch=32, seed=7, classes=4, size=8):
    """Step -> (pairs of noisy views [batch, 2, 1, size, size], class ids):
    each image a class's pattern with its own noise, each view more noise."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(classes, 1, size, size, generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(seed * 1000 + step)
        ids = torch.randint(0, classes, (batch,), generator=gs)
        x = protos[ids] + 0.5 * torch.randn(batch, 1, size, size, generator=gs)
        views = x[:, None] + 0.3 * torch.randn(batch, 2, 1, size, size, generator=gs)
        return views, ids

    return batch_fn


class _TwinConv(nn.Module):
    """A conv encoder and a projector applied to both views of each image:
    returns their embeddings, [2 * batch, d] (first views, then second)."""

    def __init__(self, d=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.Tanh()
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.act2 = nn.Tanh()
        self.flat = nn.Flatten()
        self.proj = nn.Linear(8 * 4 * 4, d)

    def forward(self, views):
        x = torch.cat([views[:, 0], views[:, 1]])
        return self.proj(self.flat(self.act2(self.conv2(self.act1(self.conv1(x))))))


def _views_apart(z, _ids):
    """The squared distance between the two views' embeddings (BYOL's loss,
    here without the predictor, the stop-gradient and the normalisation)."""
    a, b = z.chunk(2)
    return (a - b).pow(2).sum(1).mean()


def _variance_term(z):
    """VICReg's variance term: a hinge on each dimension's std over the batch."""
    return F.relu(1.0 - torch.sqrt(z.var(dim=0) + 1e-4)).mean()


def conv_siamese_without_stop_gradient():
    """BYOL without its predictor and its stop-gradient (Grill et al., NeurIPS 2020,
    sec. 3.1: the loss alone "admits collapsed solutions, e.g. outputting the same
    vector for all images"; Chen & He, CVPR 2021, sec. 4.1): the squared distance
    between two views' embeddings is minimised by one embedding for every image.
    The collapse begins at ``conv2``: its between-sample variance falls an order
    of magnitude below its first while its input's (``act1``) does not, and the
    projector's after it falls further. Fixed: a variance term (VICReg)."""
    def spec(fixed):
        def build():
            torch.manual_seed(0)
            model = _TwinConv()

            def loss(z, ids):
                out = _views_apart(z, ids)
                return out + _variance_term(z) if fixed else out

            return model, torch.optim.Adam(model.parameters(), lr=3e-3), loss, None

        return Spec(f"conv_siamese_without_stop_gradient{'_fixed' if fixed else ''}", build, _images(),
                    steps=150)

    def truth(bug, fixed):
        proj, conv2, act1 = (_between_var(bug, n) for n in ("proj", "conv2", "act1"))
        assert proj[-1] * 10 <= proj[0] and conv2[-1] * 10 <= conv2[0], (proj, conv2)  # collapsed
        assert act1[-1] * 10 > act1[0], act1  # the images still differ before conv2
        proj_f = _between_var(fixed, "proj")
        assert proj_f[-1] >= proj_f[0], proj_f

    return Case(spec(False), ("activation_collapse",), "conv2", None, fixed=spec(True), truth=truth,
                measure_onset=_collapse_step, tolerance=20)


def _between_var(result, layer):
    """The between-sample variance of ``layer``'s output at each full step."""
    _, ss = result.series(layer, "sample_spread")
    _, std = result.series(layer, "act_std")
    b = ss * std
    return b[np.isfinite(b)] ** 2


def _collapse_step(result):
    """The first full step at which conv2's between-sample variance is below a
    tenth of its first."""
    steps, ss = result.series("conv2", "sample_spread")
    _, std = result.series("conv2", "act_std")
    b2 = (ss * std) ** 2
    ok = np.isfinite(b2)
    return int(steps[ok][np.argmax(b2[ok] * 10 <= b2[ok][0])])


# --- healthy: outputs that keep depending on the input -------------------------


def conv_siamese_with_variance_term():
    """The net above with VICReg's variance term: its embeddings stay apart."""
    return conv_siamese_without_stop_gradient().fixed


class _SparseCodeAE(nn.Module):
    """A conv autoencoder with a 16-d code under an L1 penalty: many code units
    go quiet (the same for every sample) while the reconstruction learns."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.act = nn.ReLU()
        self.flat = nn.Flatten()
        self.code = nn.Linear(8 * 4 * 4, 16)
        self.code_act = nn.ReLU()
        self.dec = nn.Linear(16, 64)
        self.last_code = None

    def forward(self, views):
        x = views[:, 0]
        self.last_code = self.code_act(self.code(self.flat(self.act(self.conv(x)))))
        return self.dec(self.last_code).view(-1, 1, 8, 8)


def conv_ae_code_with_inactive_units():
    """An autoencoder whose code has inactive units (an L1 penalty on it): a
    code that varies less between samples is what the penalty asks for, and
    the reconstruction still depends on the input."""
    def build():
        torch.manual_seed(0)
        model = _SparseCodeAE()

        def loss(out, views):
            return F.mse_loss(out, views[:, 0]) + 0.05 * model.last_code.abs().mean()

        return model, torch.optim.Adam(model.parameters(), lr=3e-3), loss, None

    batch = _images()

    def ae_batch(step):
        views, _ = batch(step)
        return views, views

    return Spec("conv_ae_code_with_inactive_units", build, ae_batch, steps=150)


class _ZeroHead(nn.Module):
    """A conv classifier whose head starts at zero: its prior, the same output
    for every sample, until it learns."""

    def __init__(self, classes=4):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.flat = nn.Flatten()
        self.head = nn.Linear(32, classes)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, views):
        return self.head(self.flat(self.pool(self.act(self.conv(views[:, 0])))))


def conv_classifier_from_zero_head():
    """A classifier whose head is zero-initialised: at its prior for every sample
    first (no spread at step 0), then its output comes to depend on the input."""
    return Spec("conv_classifier_from_zero_head", _zero_head_build, _images(), steps=150, num_classes=4)


def _zero_head_build():
    torch.manual_seed(0)
    model = _ZeroHead()
    return model, torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9), nn.CrossEntropyLoss(), None


def all_cases():
    """Every output that stopped depending on the input."""
    return [conv_siamese_without_stop_gradient()]


def all_specs():
    """Every healthy run built to look like one."""
    return [conv_siamese_with_variance_term(), conv_ae_code_with_inactive_units(), conv_classifier_from_zero_head()]
