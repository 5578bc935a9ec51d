"""Healthy training runs: the diagnosis must stay silent on all of them.

Tasks are learnable (labels from a fixed random teacher, or a simple rule on
the input), so a healthy run's loss falls. Variety on purpose: widths and
depths, SGD with momentum and Adam(W), warmup + decay schedules, dropout,
weight decay, small noisy batches, BatchNorm in train mode, zero-initialised
residual BatchNorms, GELU, residual nets, an LSTM whose gates saturate a
little, an embedding whose gradients are legitimately tiny.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .harness import Spec
from .models import images, quadrants


def _teacher_data(d_in, k, batch, seed=1, noise=0.0):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(d_in, k, generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(batch, d_in, generator=gs)
        logits = x @ teacher
        if noise:
            logits = logits + noise * torch.randn(logits.shape, generator=gs)
        return x, logits.argmax(1)

    return batch_fn


def _warmup_cosine(opt, warmup, total):
    def f(s):
        if s < warmup:
            return (s + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, total - warmup))))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def mlp_relu(optim="sgd", batch=32, width=64, depth=4, steps=300):
    def build():
        layers, d = [], 20
        for _ in range(depth - 1):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        model = nn.Sequential(*layers, nn.Linear(d, 5))
        if optim == "sgd":
            # smaller steps for small batches, as a user would tune them
            opt = torch.optim.SGD(model.parameters(), lr=0.05 * min(1.0, 0.4 + batch / 32), momentum=0.9)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec(f"mlp_relu_{optim}_b{batch}_w{width}_d{depth}", build,
                _teacher_data(20, 5, batch, noise=0.5), steps=steps, num_classes=5)


def mlp_gelu_adamw(steps=300):
    """GELU, dropout, AdamW with weight decay, warmup + cosine decay, batch 8."""
    def build():
        model = nn.Sequential(nn.Linear(20, 128), nn.GELU(), nn.Dropout(0.1),
                              nn.Linear(128, 128), nn.GELU(), nn.Dropout(0.1), nn.Linear(128, 5))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
        return model, opt, nn.CrossEntropyLoss(), _warmup_cosine(opt, 30, steps)

    return Spec("mlp_gelu_adamw", build, _teacher_data(20, 5, 8, noise=1.0), steps=steps, num_classes=5)


def deep_mlp_tanh(steps=300):
    """8 tanh layers with Xavier init and SGD: healthy, a little saturation."""
    def build():
        layers, d = [], 16
        for _ in range(7):
            lin = nn.Linear(d, 48)
            nn.init.xavier_normal_(lin.weight, gain=5 / 3)
            layers += [lin, nn.Tanh()]
            d = 48
        model = nn.Sequential(*layers, nn.Linear(d, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("deep_mlp_tanh", build, _teacher_data(16, 4, 32), steps=steps, num_classes=4)


def _images(batch, k=4, size=12, channels=1, seed=2):
    """A bright blob in one of k quadrants-ish positions, plus noise."""
    return images(batch=batch, size=size, k=k, channels=channels, seed=seed)


def cnn_bn(optim="sgd", steps=200):
    def build():
        model = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(16, 4))
        if optim == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.1)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=3e-3)
            sched = None
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec(f"cnn_bn_{optim}", build, _images(16), steps=steps, num_classes=4)


class _Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        nn.init.zeros_(self.bn2.weight)  # "zero-init residual", as in torchvision
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class _ResNet(nn.Module):
    def __init__(self, c=8, blocks=3, k=4):
        super().__init__()
        self.stem = nn.Conv2d(1, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.blocks = nn.Sequential(*[_Block(c) for _ in range(blocks)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, k)

    def forward(self, x):
        x = self.relu(self.bn(self.stem(x)))
        x = self.pool(self.blocks(x)).flatten(1)
        return self.fc(x)


def resnet(optim="sgd", steps=200):
    def build():
        model = _ResNet()
        if optim == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
            sched = _warmup_cosine(opt, 20, steps)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=2e-3)
            sched = None
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec(f"resnet_{optim}", build, _images(16, size=8), steps=steps, num_classes=4)


class _Encoder(nn.Module):
    """Token classification of the first token; learned positions; vocab 200."""

    def __init__(self, vocab=200, d=32, k=4, seq=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, k)

    def forward(self, x):
        h = self.encoder(self.emb(x) + self.pos)
        return self.head(h[:, 0])


def _tokens(batch, vocab=200, seq=8, k=4):
    def batch_fn(step):
        gs = torch.Generator().manual_seed(7000 + step)
        x = torch.randint(0, vocab, (batch, seq), generator=gs)
        return x, x[:, 0] % k

    return batch_fn


def transformer(optim="adam", steps=250):
    def build():
        model = _Encoder()
        if optim == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=2e-3)
            sched = _warmup_cosine(opt, 25, steps)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            sched = None
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec(f"transformer_{optim}", build, _tokens(32), steps=steps, num_classes=4)


class _LSTMNet(nn.Module):
    def __init__(self, f=8, h=32, k=4):
        super().__init__()
        self.lstm = nn.LSTM(f, h, num_layers=2, batch_first=True)
        self.head = nn.Linear(h, k)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def _sequences(batch, f=8, t=10, k=4, seed=3):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(f, k, generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(9000 + step)
        x = torch.randn(batch, t, f, generator=gs)
        return x, (x[:, -1] @ teacher + 0.5 * x[:, -2] @ teacher).argmax(1)

    return batch_fn


def lstm(optim="adam", steps=250):
    def build():
        model = _LSTMNet()
        if optim == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec(f"lstm_{optim}", build, _sequences(16), steps=steps, num_classes=4, clip=1.0)


def embedding_bag(steps=250):
    """Large vocabulary with N(0,1) embeddings: legitimately tiny gradients."""
    def build():
        model = nn.Sequential(nn.EmbeddingBag(5000, 32, mode="mean"), nn.Linear(32, 64), nn.ReLU(),
                              nn.Linear(64, 4))
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        return model, opt, nn.CrossEntropyLoss(), None

    def batch_fn(step):
        # every token of a bag comes from its class's quarter of the vocabulary
        gs = torch.Generator().manual_seed(11000 + step)
        y = torch.randint(0, 4, (16,), generator=gs)
        x = y[:, None] * 1250 + torch.randint(0, 1250, (16, 6), generator=gs)
        return x, y

    return Spec("embedding_bag", build, batch_fn, steps=steps, num_classes=4)


def zero_init_head(steps=250):
    """The classifier initialised to zero (a common recipe): every gradient
    before it is exactly 0 at step 0 and tiny for the first updates."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        nn.init.zeros_(model[4].weight)
        nn.init.zeros_(model[4].bias)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("zero_init_head", build, _teacher_data(20, 5, 32), steps=steps, num_classes=5)


def warmup_from_zero(steps=300):
    """Linear warmup from lr 0 (step-to-step lr ratios are huge at first)."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 50))
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec("warmup_from_zero", build, _teacher_data(20, 5, 32), steps=steps, num_classes=5)


def amp_mlp(steps=200):
    """bf16 autocast with a GradScaler, gradient clipping after unscale_."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.CrossEntropyLoss(), None

    return Spec("amp_mlp", build, _teacher_data(20, 5, 32), steps=steps, num_classes=5, amp=True, clip=1.0)


def overfit_small_dataset(steps=600):
    """64 fixed samples cycled in batches of 8 until the loss is ~0: gradients
    shrink together, late batch losses are noisy and tiny."""
    data = _teacher_data(20, 5, 64)(0)

    def batch_fn(step):
        i = (step % 8) * 8
        return data[0][i:i + 8], data[1][i:i + 8]

    def build():
        model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 5))
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec("overfit_small_dataset", build, batch_fn, steps=steps, num_classes=5)


def plain_cnn(steps=200):
    """Six convolutions without normalisation (VGG-like), Adam."""
    def build():
        layers, c = [], 1
        for i, w in enumerate((8, 8, 16, 16, 32, 32)):
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.ReLU()]
            if i % 2 == 1:
                layers.append(nn.MaxPool2d(2) if i < 5 else nn.AdaptiveAvgPool2d(1))
            c = w
        model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(c, 4))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("plain_cnn", build, _images(16, size=16), steps=steps, num_classes=4)


# --- more variety: output saturation, ReLU6, frozen parameters, outlier
# batches, GRU, BatchNorm with tiny batches, LSTM language model, autoencoder


def binary_sigmoid_bce(steps=400):
    """nn.Sigmoid + BCELoss: confident outputs saturate the last sigmoid."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, generator=g)

    def batch_fn(step):
        x = torch.randn(64, 10, generator=torch.Generator().manual_seed(step))
        return x, (x @ w > 0).float()[:, None]

    def build():
        model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.BCELoss(), None

    return Spec("binary_sigmoid_bce", build, batch_fn, steps=steps)


class _GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 32, batch_first=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.gru(x)[0][:, -1])


def gru_sgd(steps=300):
    g = torch.Generator().manual_seed(3)
    teacher = torch.randn(8, 3, generator=g)

    def batch_fn(step):
        x = torch.randn(16, 12, 8, generator=torch.Generator().manual_seed(step))
        return x, (x.mean(1) @ teacher).argmax(1)

    def build():
        model = _GRUNet()
        return model, torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("gru_sgd", build, batch_fn, steps=steps, clip=1.0, num_classes=3)


def bn_mlp_tiny_batch(steps=400):
    """BatchNorm in train mode with batches of 4: noisy statistics."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64),
                              nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 5))
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("bn_mlp_tiny_batch", build, _teacher_data(20, 5, 4), steps=steps, num_classes=5)


def autoencoder_sigmoid_mse(steps=400):
    """Binary patterns reconstructed through a bottleneck, sigmoid output, MSE."""
    g = torch.Generator().manual_seed(0)
    protos = (torch.rand(6, 64, generator=g) > 0.5).float()

    def batch_fn(step):
        idx = torch.randint(0, 6, (32,), generator=torch.Generator().manual_seed(step))
        return protos[idx], protos[idx]

    def build():
        model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 32),
                              nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid())
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

    return Spec("autoencoder_sigmoid_mse", build, batch_fn, steps=steps)


def mobilenetish(steps=250):
    """Depthwise-separable convolutions, BatchNorm, ReLU6 (its zeros are not saturation)."""
    def separable(c_in, c_out, stride):
        return [nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in),
                nn.ReLU6(), nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU6()]

    def build():
        model = nn.Sequential(nn.Conv2d(1, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                              *separable(8, 16, 2), *separable(16, 32, 2), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("mobilenetish", build, _images(16, size=12), steps=steps, num_classes=4)


def frozen_first_layer(steps=250):
    """A first layer frozen on purpose (requires_grad=False): not a failure."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        for p in model[0].parameters():
            p.requires_grad_(False)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=2e-3)
        return model, opt, nn.CrossEntropyLoss(), None

    return Spec("frozen_first_layer", build, _teacher_data(20, 5, 32), steps=steps, num_classes=5)


def heavy_tail_regression(steps=500):
    """MSE with Student-t noise: single outlier batches spike the loss."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 1, generator=g)
    noise = torch.distributions.StudentT(2.0)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(step)
        x = torch.randn(16, 8, generator=gs)
        torch.manual_seed(50000 + step)
        return x, x @ w + 0.3 * noise.sample((16, 1))

    def build():
        model = nn.Sequential(nn.Linear(8, 32), nn.SiLU(), nn.Linear(32, 32), nn.SiLU(), nn.Linear(32, 1))
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

    return Spec("heavy_tail_regression", build, batch_fn, steps=steps)


def leaky_elu_cnn(steps=250):
    def build():
        model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(8, 8, 3, padding=1),
                              nn.ELU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 36, 4))
        return model, torch.optim.RMSprop(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Spec("leaky_elu_cnn", build, _images(16, size=12), steps=steps, num_classes=4)


class _LSTMLM(nn.Module):
    def __init__(self, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.lstm = nn.LSTM(16, 64, num_layers=2, batch_first=True, dropout=0.2)
        self.head = nn.Linear(64, vocab)

    def forward(self, x):
        return self.head(self.lstm(self.emb(x))[0]).transpose(1, 2)


def lstm_lm(steps=300):
    """Next-token prediction of arithmetic sequences (logits [B, V, T])."""
    def batch_fn(step):
        start = torch.randint(0, 50, (16, 1), generator=torch.Generator().manual_seed(step))
        seq = (start + 3 * torch.arange(13)) % 50
        return seq[:, :12], seq[:, 1:]

    def build():
        model = _LSTMLM()
        return model, torch.optim.Adam(model.parameters(), lr=5e-3), nn.CrossEntropyLoss(), None

    return Spec("lstm_lm", build, batch_fn, steps=steps, num_classes=50)


# --- unseen-style controls (stress round 2) -------------------------------------


def _quadrant_images(batch=32, size=8):
    """The class is the quadrant that is brighter: a task a CNN learns."""
    return quadrants(batch=batch, size=size)


def vgg_no_bn(steps=200):
    """Four plain convs + two Linears, no normalisation, Adam."""
    def build():
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 4, 64), nn.ReLU(), nn.Linear(64, 4))
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Spec("vgg_no_bn", build, _quadrant_images(), steps=steps, num_classes=4)


def groupnorm_prelu_cnn(steps=250):
    """GroupNorm, PReLU, a depthwise conv, Softplus, global average pooling."""
    def build():
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.PReLU(),
                              nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Conv2d(16, 32, 1), nn.GroupNorm(4, 32),
                              nn.Softplus(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
        return model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

    return Spec("groupnorm_prelu_cnn", build, _quadrant_images(), steps=steps, num_classes=4)


def huber_regression(steps=300):
    def batch_fn(step):
        w = torch.randn(10, 1, generator=torch.Generator().manual_seed(3))
        gs = torch.Generator().manual_seed(step)
        x = torch.randn(32, 10, generator=gs)
        return x, torch.sin(x @ w) * 3 + 0.1 * torch.randn(32, 1, generator=gs)

    def build():
        model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.HuberLoss(), None

    return Spec("huber_regression", build, batch_fn, steps=steps)


def label_smoothing_100_classes(steps=300):
    def build():
        model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 100))
        return model, torch.optim.Adam(model.parameters(), lr=2e-3), nn.CrossEntropyLoss(label_smoothing=0.1), None

    return Spec("label_smoothing_100_classes", build, _teacher_data(32, 100, 128), steps=steps, num_classes=100)


def nesterov_cosine_clipped(steps=300):
    """SGD nesterov + weight decay + CosineAnnealingLR, clip_grad_norm_ every step."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        return model, opt, nn.CrossEntropyLoss(), torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)

    return Spec("nesterov_cosine_clipped", build, _teacher_data(20, 5, 32), steps=steps, clip=0.5, num_classes=5)


def batch_of_two(steps=400):
    def build():
        model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))
        return model, torch.optim.SGD(model.parameters(), lr=0.02), nn.CrossEntropyLoss(), None

    return Spec("batch_of_two", build, _teacher_data(20, 5, 2), steps=steps, num_classes=5)


def linear_to_zero_loss(steps=300):
    """Noise-free linear regression: the loss falls to ~0 fast."""
    def batch_fn(step):
        w = torch.randn(8, 2, generator=torch.Generator().manual_seed(4))
        x = torch.randn(64, 8, generator=torch.Generator().manual_seed(step))
        return x, x @ w

    def build():
        model = nn.Sequential(nn.Linear(8, 2))
        return model, torch.optim.Adam(model.parameters(), lr=5e-2), nn.MSELoss(), None

    return Spec("linear_to_zero_loss", build, batch_fn, steps=steps)


class _KD(nn.Module):
    def forward(self, out, target_logits):
        return nn.functional.kl_div(torch.log_softmax(out, 1), torch.softmax(target_logits, 1), reduction="batchmean")


def kldiv_distillation(steps=250):
    def batch_fn(step):
        t = torch.randn(16, 6, generator=torch.Generator().manual_seed(8))
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step))
        return x, x @ t

    def build():
        model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 6))
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), _KD(), None

    return Spec("kldiv_distillation", build, batch_fn, steps=steps)


def multilabel_bce_dropout(steps=250):
    def batch_fn(step):
        t = torch.randn(20, 12, generator=torch.Generator().manual_seed(5))
        x = torch.randn(32, 20, generator=torch.Generator().manual_seed(step))
        return x, (x @ t > 0.5).float()

    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 12))
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.BCEWithLogitsLoss(), None

    return Spec("multilabel_bce_dropout", build, batch_fn, steps=steps)


def large_target_regression(steps=300):
    """L1 regression onto targets ~500 +- 100 (not standardised): the output
    Linear grows to the targets' scale while the loss falls."""
    def batch_fn(step):
        w = torch.randn(8, 1, generator=torch.Generator().manual_seed(4))
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step))
        return x, 100 * (x @ w) + 500

    def build():
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.L1Loss(), None

    return Spec("large_target_regression", build, batch_fn, steps=steps)


class _ReZeroMLP(nn.Module):
    """Residual branches scaled by a learnable scalar initialised to 0
    (ReZero): the branches' gradients are exactly 0 until the scalar moves."""

    def __init__(self, d=64, blocks=2):
        super().__init__()
        self.inp = nn.Linear(20, d)
        self.branches = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.ReLU()) for _ in range(blocks))
        self.alpha = nn.Parameter(torch.zeros(blocks))
        self.out = nn.Linear(d, 5)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for i, b in enumerate(self.branches):
            h = h + self.alpha[i] * b(h)
        return self.out(h)


def rezero_branches(steps=250):
    """Fools the always-zero gradient rule: branches whose gradient is 0 at
    the first step only (their gate starts at 0 and moves)."""
    def build():
        model = _ReZeroMLP()
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("rezero_branches", build, _teacher_data(20, 5, 32), steps=steps, num_classes=5)


def raw_features_adam(steps=300):
    """Fools the extreme-before-updates rule: features ~1e3 give the first
    layer gradients 1e3x its weights at the first step, but Adam's update does
    not scale with the gradient, and the regression trains."""
    w = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))

    def batch_fn(step):
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step))
        return 1000.0 * x, x @ w

    def build():
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.MSELoss(), None

    return Spec("raw_features_adam", build, batch_fn, steps=steps)


def step_schedule_sgd(steps=300):
    """Fools the update-collapse rule: MultiStepLR's two tenfold drops with
    SGD (the updates fall a hundredfold, and more as the gradients shrink)."""
    def build():
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[100, 200], gamma=0.1)
        return model, opt, nn.CrossEntropyLoss(), sched

    return Spec("step_schedule_sgd", build, _teacher_data(20, 5, 32), steps=steps, num_classes=5)


def large_mean_regression(steps=450):
    """Fools the trivial-predictor rule: targets with a mean of 50 and a
    signal; the loss falls through the targets' variance on its way down."""
    w = torch.randn(8, 1, generator=torch.Generator().manual_seed(5))

    def batch_fn(step):
        gs = torch.Generator().manual_seed(step)
        x = torch.randn(32, 8, generator=gs)
        return x, 50.0 + x @ w + 0.1 * torch.randn(32, 1, generator=gs)

    def build():
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.MSELoss(), None

    return Spec("large_mean_regression", build, batch_fn, steps=steps)


class _FloatIds(nn.Module):
    """Token ids passed as floats, cast back inside: integers up to 299;
    the label is read from the first one."""

    def __init__(self, vocab=300, d=32, k=4):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, d), nn.Linear(d, k)

    def forward(self, x):
        return self.head(self.emb(x.long())[:, 0])


def float_token_ids(steps=250):
    """Fools the integer-input rule: ids as a float tensor (RMS ~170)."""
    def batch_fn(step):
        x = torch.randint(0, 300, (32, 8), generator=torch.Generator().manual_seed(7000 + step))
        return x.float(), x[:, 0] % 4

    def build():
        model = _FloatIds()
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("float_token_ids", build, batch_fn, steps=steps, num_classes=4)


class _BigEmbedding(nn.Module):
    def __init__(self, vocab=20000, d=64, k=4):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, d), nn.Linear(d, k)

    def forward(self, x):
        return self.head(self.emb(x)[:, 0])


def big_embedding_sgd(steps=250):
    """Fools the negligible-update rule: a 20,000-row table of which a batch
    touches ~250 rows, with plain SGD: a small update ratio, but an update."""
    def batch_fn(step):
        x = torch.randint(0, 20000, (32, 8), generator=torch.Generator().manual_seed(9000 + step))
        x[:, 0] = x[:, 0] % 300
        return x, x[:, 0] % 4

    def build():
        model = _BigEmbedding()
        return model, torch.optim.SGD(model.parameters(), lr=0.5), nn.CrossEntropyLoss(), None

    return Spec("big_embedding_sgd", build, batch_fn, steps=steps, num_classes=4)



# --- units that go quiet while the loss falls (a sparse code, not death) -------


class _IRNN(nn.Module):
    """A ReLU RNN initialised to the identity (Le et al. 2015), read at its
    last step."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(1, 32, nonlinearity="relu", batch_first=True)
        self.out = nn.Linear(32, 1)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(torch.eye(32))
            self.rnn.bias_hh_l0.zero_()
            self.rnn.bias_ih_l0.zero_()

    def forward(self, x):
        return self.out(self.rnn(x)[0][:, -1])


def irnn_running_sum():
    """Fools the dead-unit rule: most of the IRNN's units are zero at its
    last step for every sample within the first steps, while the loss falls
    from 12 to 0.03: the units that carry the sum fire, the rest are quiet."""
    def batch_fn(step):
        x = torch.rand(32, 40, 1, generator=torch.Generator().manual_seed(900 + step))
        return x, x[:, :, 0].sum(1, keepdim=True) / 10

    def build():
        torch.manual_seed(0)
        model = _IRNN()
        return model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), nn.MSELoss(), None

    return Spec("irnn_running_sum", build, batch_fn, steps=150)


class _BlobAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.act1 = nn.ReLU()
        self.dec = nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.out = nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, x):
        return self.out(self.act2(self.dec(self.act1(self.enc(x)))))


def relu_conv_autoencoder_blobs():
    """Fools the dead-unit rule: a ReLU conv autoencoder of small discs on a
    black background; most of the decoder's (channel, pixel) units are zero
    for every image of a batch from the first steps (the background), while
    the loss falls fortyfold."""
    def batch_fn(step):
        g = torch.Generator().manual_seed(300 + step)
        yy, xx = torch.meshgrid(torch.arange(12.0), torch.arange(12.0), indexing="ij")
        c = torch.randint(3, 9, (2, 32, 1, 1), generator=g).float()
        img = (((xx - c[0]) ** 2 + (yy - c[1]) ** 2) < 4).float().unsqueeze(1)
        return img, img

    def build():
        torch.manual_seed(0)
        model = _BlobAutoencoder()
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

    return Spec("relu_conv_autoencoder_blobs", build, batch_fn, steps=200)


def all_specs():
    """Every healthy control, SGD and Adam."""
    return [
        mlp_relu("sgd"), mlp_relu("adam"), mlp_relu("sgd", batch=4, width=256, depth=6),
        mlp_gelu_adamw(), deep_mlp_tanh(),
        cnn_bn("sgd"), cnn_bn("adam"), resnet("sgd"), resnet("adam"),
        transformer("adam"), transformer("sgd"), lstm("adam"), lstm("sgd"), embedding_bag(),
        zero_init_head(), warmup_from_zero(), amp_mlp(), overfit_small_dataset(), plain_cnn(),
        binary_sigmoid_bce(), gru_sgd(), bn_mlp_tiny_batch(), autoencoder_sigmoid_mse(), mobilenetish(),
        frozen_first_layer(), heavy_tail_regression(), leaky_elu_cnn(), lstm_lm(),
        vgg_no_bn(), groupnorm_prelu_cnn(), huber_regression(), label_smoothing_100_classes(),
        nesterov_cosine_clipped(), batch_of_two(), linear_to_zero_loss(), kldiv_distillation(),
        multilabel_bce_dropout(), large_target_regression(), rezero_branches(),
        raw_features_adam(), step_schedule_sgd(), large_mean_regression(), float_token_ids(),
        big_embedding_sgd(),
        irnn_running_sum(), relu_conv_autoencoder_blobs(),
    ]
