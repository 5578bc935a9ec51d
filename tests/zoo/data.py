"""Learnable synthetic tasks, one batch per step (seeded by the step, so a
run and its replays see the same data).

- tokens: arithmetic sequences ``x_i = (s + k*i) mod V`` with a random start
  ``s`` and stride ``k`` in {1, 2, 3}; a causal LM predicts the next token, a
  masked LM or a denoising seq2seq model the original of a masked sequence.
- images: noise with one bright square at a random place; the class is its
  colour (one of the three channels, or all three). Not its place: models
  that pool globally without absolute positions (Swin) cannot learn that.
- waveforms: a sine of one of four frequencies plus noise; the class is the
  frequency.
- spectrograms: noise with energy in one of four bands of mel bins; the class
  is the band.
"""

from __future__ import annotations

import math

import torch

VOCAB = 64  #: token ids 0..VOCAB-1; MASK is one more
MASK = VOCAB
SEQ = 16
BATCH = 16
CLASSES = 4
IMAGE = 16  #: images are 3 x IMAGE x IMAGE
WAVE = 400  #: samples of a waveform
MELS, FRAMES = 16, 32  #: a spectrogram is MELS x FRAMES

__all__ = ["VOCAB", "MASK", "SEQ", "BATCH", "CLASSES", "IMAGE", "WAVE", "MELS", "FRAMES",
           "sequences", "masked", "images", "waveforms", "spectrograms"]


def _gen(step: int, seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 * seed + step)


def sequences(step: int, seed: int = 0) -> torch.Tensor:
    """[BATCH, SEQ] arithmetic token sequences (long)."""
    g = _gen(step, seed)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    stride = torch.randint(1, 4, (BATCH, 1), generator=g)
    return (start + stride * torch.arange(SEQ)) % VOCAB


def masked(step: int, seed: int = 0, p: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs with a fraction ``p`` of tokens replaced by MASK, originals)."""
    original = sequences(step, seed)
    g = _gen(step, seed + 7)
    hide = torch.rand(original.shape, generator=g) < p
    return original.masked_fill(hide, MASK), original


def images(step: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """([BATCH, 3, IMAGE, IMAGE] float, [BATCH] colour class)."""
    g = _gen(step, seed)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    x = 0.5 * torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g)
    side = 6
    at = torch.randint(0, IMAGE - side + 1, (BATCH, 2), generator=g).tolist()
    for i, c in enumerate(y.tolist()):
        r, q = at[i]
        channels = slice(c, c + 1) if c < 3 else slice(0, 3)
        x[i, channels, r:r + side, q:q + side] += 2.0 if c < 3 else 1.0
    return x, y


def waveforms(step: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """([BATCH, WAVE] float, [BATCH] frequency class)."""
    g = _gen(step, seed)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    phase = 2 * math.pi * torch.rand(BATCH, 1, generator=g)
    cycles = (4.0 * (y + 1).float()).unsqueeze(1)  # 4, 8, 12, 16 cycles over the window
    t = torch.arange(WAVE).float() / WAVE
    x = torch.sin(2 * math.pi * cycles * t + phase) + 0.3 * torch.randn(BATCH, WAVE, generator=g)
    return x, y


def spectrograms(step: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """([BATCH, MELS, FRAMES] float, [BATCH] band class)."""
    g = _gen(step, seed)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    x = 0.5 * torch.randn(BATCH, MELS, FRAMES, generator=g)
    band = MELS // CLASSES
    for i, c in enumerate(y.tolist()):
        x[i, c * band:(c + 1) * band] += 1.5
    return x, y
