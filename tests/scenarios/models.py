"""The architectures and data of the generality corpus (corpus_failures.py,
corpus_healthy.py): tiny versions of the models people train, each with a
learnable task, so that a run without its bug learns.

Models: a decoder-only transformer with a causal mask (``DecoderLM``), a
convolutional autoencoder, a VAE, an LSTM language model, a GRU
encoder-decoder, a BatchNorm ResNet (healthy.py's), a U-Net, an MLP-Mixer and
an EmbeddingBag classifier. Every option a scenario needs to plant its bug is
a constructor argument, so the buggy and the fixed run differ in one word.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "RMSNorm", "DecoderLM", "ConvAutoencoder", "VAE", "vae_loss", "LSTMLM", "Seq2Seq", "UNet", "Mixer",
    "BagClassifier", "init_normal_", "tokens_lm", "images", "quadrants", "blobs", "binary_patterns", "bags", "sequences_pair",
]


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------


def tokens_lm(batch=16, seq=12, vocab=32, pad_from=None, seed=0):
    """Next-token prediction of arithmetic sequences (start, stride from the
    batch): inputs [B, T], targets [B, T]. From step ``pad_from`` on, the
    first two sequences of each batch are left-padded with token 0 (what a
    collate function does with shorter texts)."""
    def batch_fn(step):
        g = torch.Generator().manual_seed(seed * 100_000 + step)
        start = torch.randint(1, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 4, (batch, 1), generator=g)
        seqs = 1 + (start + stride * torch.arange(seq + 1)) % (vocab - 1)
        x, y = seqs[:, :-1].clone(), seqs[:, 1:].clone()
        if pad_from is not None and step >= pad_from:
            x[:2, :3] = 0
        return x, y

    return batch_fn


def images(batch=16, size=12, k=4, channels=1, seed=2, scale=1.0, offset=0.0):
    """A bright 3x3 blob at one of k positions (the class), plus noise;
    ``scale``/``offset`` turn it into raw pixel values."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randint(2, size - 2, (k, 2), generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(5000 + step)
        y = torch.randint(0, k, (batch,), generator=gs)
        x = 0.5 * torch.randn(batch, channels, size, size, generator=gs)
        for i in range(batch):
            cy, cx = centres[y[i]]
            x[i, :, cy - 1: cy + 2, cx - 1: cx + 2] += 2.0
        return x * scale + offset, y

    return batch_fn


def quadrants(batch=16, size=8, channels=3):
    """The class is the brighter quadrant."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(4000 + step)
        x = torch.randn(batch, channels, size, size, generator=gs)
        y = torch.randint(0, 4, (batch,), generator=gs)
        h = size // 2
        for i in range(batch):
            r, c = divmod(int(y[i]), 2)
            x[i, :, h * r:h * r + h, h * c:h * c + h] += 1.0
        return x, y

    return batch_fn


def blobs(batch=8, size=16, scale=1.0, target="mask"):
    """Images with one or two bright squares; the target is their mask
    (segmentation, [B, 1, H, W] in {0, 1}) or the clean image
    (``target="image"``, for an autoencoder). ``scale`` gives raw pixels."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(7000 + step)
        mask = torch.zeros(batch, 1, size, size)
        for i in range(batch):
            for _ in range(1 + int(torch.randint(0, 2, (1,), generator=gs))):
                r, c = (int(v) for v in torch.randint(0, size - 5, (2,), generator=gs))
                w = 3 + int(torch.randint(0, 3, (1,), generator=gs))
                mask[i, 0, r:r + w, c:c + w] = 1.0
        x = mask + 0.3 * torch.randn(batch, 1, size, size, generator=gs)
        return x * scale, (mask if target == "mask" else mask.clone())

    return batch_fn


def binary_patterns(batch=32, dim=64, protos=8, flip=0.05, seed=0):
    """Noisy copies of a few binary prototypes (VAE / autoencoder data)."""
    g = torch.Generator().manual_seed(seed)
    base = (torch.rand(protos, dim, generator=g) > 0.5).float()

    def batch_fn(step):
        gs = torch.Generator().manual_seed(20_000 + step)
        x = base[torch.randint(0, protos, (batch,), generator=gs)]
        noise = torch.rand(batch, dim, generator=gs) < flip
        x = torch.where(noise, 1.0 - x, x)
        return x, x

    return batch_fn


def bags(batch=16, vocab=2000, k=4, bag=6):
    """Each bag's tokens come from its class's share of the vocabulary."""
    share = vocab // k

    def batch_fn(step):
        gs = torch.Generator().manual_seed(11_000 + step)
        y = torch.randint(0, k, (batch,), generator=gs)
        x = y[:, None] * share + torch.randint(0, share, (batch, bag), generator=gs)
        return x, y

    return batch_fn


def sequences_pair(batch=16, seq=6, vocab=12):
    """Sequence reversal: source [B, T] -> target [B, T] (tokens 2..vocab-1;
    0 is padding, 1 the start token the decoder's input begins with)."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(13_000 + step)
        src = torch.randint(2, vocab, (batch, seq), generator=gs)
        return src, src.flip(1)

    return batch_fn


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """LLaMA-style RMSNorm; ``eps=0`` is the bug of a hand-written one."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class _Block(nn.Module):
    """Pre-norm decoder block: attention with a causal mask, then a GELU MLP.
    ``rezero``: residual branches scaled by a learned scalar that starts at 0."""

    def __init__(self, d, heads, norm, rezero):
        super().__init__()
        self.norm1 = RMSNorm(d, **norm) if isinstance(norm, dict) else nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = RMSNorm(d, **norm) if isinstance(norm, dict) else nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d, d)
        self.alpha = nn.Parameter(torch.zeros(())) if rezero else None

    def forward(self, x, mask):
        h = self.norm1(x)
        a = self.attn(h, h, h, attn_mask=mask)[0]
        m = self.fc2(self.act(self.fc1(self.norm2(x + a if self.alpha is None else x + self.alpha * a))))
        if self.alpha is None:
            return x + a + m
        return x + self.alpha * a + self.alpha * m


class DecoderLM(nn.Module):
    """A decoder-only transformer: token + learned position embeddings, pre-norm
    blocks with a causal mask, a final norm and a head (optionally tied).

    ``mask_diagonal``: the boolean causal mask is built as
    ``triu(ones, diagonal=mask_diagonal)``; 1 is right (a token sees itself
    and the past), 0 also hides the token from itself, so the first one sees
    nothing. ``norm``: None for LayerNorm, else RMSNorm kwargs.
    ``positions=False``: no position embedding (rotary-style models add
    positions inside attention), so a padding token's embedding reaches the
    first norm unchanged.
    """

    def __init__(self, vocab=32, d=32, heads=2, layers=2, seq=12, tied=False, rezero=False, mask_diagonal=1,
                 norm=None, positions=True, padding_idx=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=padding_idx)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, d)) if positions else None
        self.blocks = nn.ModuleList(_Block(d, heads, norm, rezero) for _ in range(layers))
        self.norm = RMSNorm(d, **norm) if isinstance(norm, dict) else nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.emb.weight
        self.mask_diagonal = mask_diagonal

    def forward(self, x):
        t = x.shape[1]
        h = self.emb(x)
        if self.pos is not None:
            h = h + self.pos[:t]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=self.mask_diagonal)
        for b in self.blocks:
            h = b(h, mask)
        return self.head(self.norm(h)).transpose(1, 2)  # [B, V, T] for CrossEntropyLoss


class ConvAutoencoder(nn.Module):
    """Strided convolutions down, transposed convolutions up, sigmoid output."""

    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.act1 = nn.ReLU()
        self.enc2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.dec1 = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        self.act3 = nn.ReLU()
        self.dec2 = nn.ConvTranspose2d(8, 1, 4, stride=2, padding=1)
        self.out = nn.Sigmoid()

    def forward(self, x):
        h = self.act2(self.enc2(self.act1(self.enc1(x))))
        return self.out(self.dec2(self.act3(self.dec1(h))))


class VAE(nn.Module):
    """An MLP VAE: encoder -> (mu, logvar) -> z = mu + eps * std -> decoder
    logits. ``beta`` weighs the KL term (the loss reads it)."""

    def __init__(self, d=64, h=64, z=8):
        super().__init__()
        self.enc = nn.Linear(d, h)
        self.enc_act = nn.ReLU()
        self.mu = nn.Linear(h, z)
        self.logvar = nn.Linear(h, z)
        self.dec1 = nn.Linear(z, h)
        self.dec_act = nn.ReLU()
        self.dec2 = nn.Linear(h, d)
        self.beta = 1.0

    def forward(self, x):
        e = self.enc_act(self.enc(x))
        mu, logvar = self.mu(e), self.logvar(e)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec2(self.dec_act(self.dec1(z))), mu, logvar


class vae_loss(nn.Module):  # noqa: N801 -- used like the torch loss classes
    """Reconstruction (BCE with logits, summed per sample) + beta x KL, both
    averaged over the batch."""

    def __init__(self, model: VAE):
        super().__init__()
        self.model = [model]  # not a submodule

    def forward(self, out, x):
        logits, mu, logvar = out
        rec = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
        return rec + self.model[0].beta * kl


class LSTMLM(nn.Module):
    """Embedding -> LSTM -> Linear, logits [B, V, T]."""

    def __init__(self, vocab=32, d=16, h=64, layers=1):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, h, num_layers=layers, batch_first=True)
        self.head = nn.Linear(h, vocab)

    def forward(self, x):
        return self.head(self.lstm(self.emb(x))[0]).transpose(1, 2)


class Seq2Seq(nn.Module):
    """A GRU encoder-decoder with teacher forcing: the decoder starts from
    the encoder's last hidden state and reads the target shifted right.
    ``detach_hidden``: the bug of cutting the encoder off the graph."""

    def __init__(self, vocab=12, d=16, h=48, detach_hidden=False):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.encoder = nn.GRU(d, h, batch_first=True)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.decoder = nn.GRU(d, h, batch_first=True)
        self.head = nn.Linear(h, vocab)
        self.detach_hidden = detach_hidden
        self.target = None  # set by the batch (teacher forcing)

    def forward(self, src):
        _, hidden = self.encoder(self.src_emb(src))
        if self.detach_hidden:
            hidden = hidden.detach()
        tgt = self.target if self.target is not None else src
        dec_in = torch.cat([torch.ones_like(tgt[:, :1]), tgt[:, :-1]], 1)
        out, _ = self.decoder(self.tgt_emb(dec_in), hidden)
        return self.head(out).transpose(1, 2)


class UNet(nn.Module):
    """Two levels: conv blocks with BatchNorm, max-pool down, transposed conv
    up, a skip connection concatenated, a 1x1 head of mask logits.
    ``sigmoid``: a Sigmoid module on the output (for BCELoss)."""

    def __init__(self, c=8, sigmoid=False):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

        self.down1 = block(1, c)
        self.pool = nn.MaxPool2d(2)
        self.down2 = block(c, 2 * c)
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec = block(2 * c, c)
        self.head = nn.Conv2d(c, 1, 1)
        self.out = nn.Sigmoid() if sigmoid else None

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        y = self.head(self.dec(torch.cat([self.up(d2), d1], 1)))
        return self.out(y) if self.out is not None else y


class _MixerBlock(nn.Module):
    def __init__(self, tokens, c, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(c)
        self.tok1 = nn.Linear(tokens, 2 * tokens)
        self.tok_act = nn.GELU()
        self.tok2 = nn.Linear(2 * tokens, tokens)
        self.norm2 = nn.LayerNorm(c)
        self.ch1 = nn.Linear(c, 2 * c)
        self.ch_act = nn.GELU()
        self.drop = nn.Dropout(dropout)
        self.ch2 = nn.Linear(2 * c, c)

    def forward(self, x):  # [B, T, C]
        h = self.norm1(x).transpose(1, 2)
        x = x + self.tok2(self.tok_act(self.tok1(h))).transpose(1, 2)
        return x + self.ch2(self.drop(self.ch_act(self.ch1(self.norm2(x)))))


class Mixer(nn.Module):
    """MLP-Mixer: patch embedding (a strided conv), token- and channel-mixing
    MLPs with LayerNorm, global average pooling, a head.
    ``softmax_head``: the bug of a softmax before CrossEntropyLoss."""

    def __init__(self, size=8, patch=2, c=16, blocks=2, k=4, channels=3, dropout=0.0, softmax_head=False):
        super().__init__()
        tokens = (size // patch) ** 2
        self.patch = nn.Conv2d(channels, c, patch, stride=patch)
        self.blocks = nn.Sequential(*[_MixerBlock(tokens, c, dropout) for _ in range(blocks)])
        self.norm = nn.LayerNorm(c)
        self.head = nn.Linear(c, k)
        self.softmax = nn.Softmax(dim=1) if softmax_head else None

    def forward(self, x):
        h = self.patch(x).flatten(2).transpose(1, 2)
        out = self.head(self.norm(self.blocks(h)).mean(1))
        return self.softmax(out) if self.softmax is not None else out


class BagClassifier(nn.Module):
    """EmbeddingBag (mean) -> Linear -> ReLU -> Linear."""

    def __init__(self, vocab=2000, d=32, k=4, pretrained=None, freeze=False):
        super().__init__()
        if pretrained is not None:
            self.emb = nn.EmbeddingBag.from_pretrained(pretrained, freeze=freeze, mode="mean")
        else:
            self.emb = nn.EmbeddingBag(vocab, d, mode="mean")
        self.fc = nn.Linear(d, 64)
        self.act = nn.ReLU()
        self.out = nn.Linear(64, k)

    def forward(self, x):
        return self.out(self.act(self.fc(self.emb(x))))


def init_normal_(model: nn.Module, std: float) -> nn.Module:
    """Every Linear/Conv weight from N(0, std) (a "custom init" gone wrong)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.normal_(m.weight, std=std)
    return model

