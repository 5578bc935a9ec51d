"""How each task of the zoo feeds its model: the batch of a step and the
logits to score (2-D, one row per prediction), for tests/zoo/run.py."""

from __future__ import annotations

import torch

from . import data

__all__ = ["batch", "logits", "FLOAT_INPUT"]

#: the model input that is a float tensor, per task (the NaN batch goes there)
FLOAT_INPUT = {"image": "pixel_values", "wave": "input_values", "mel": "input_features"}


def batch(task: str, step: int, seed: int = 0) -> tuple[dict, torch.Tensor]:
    """(model keyword inputs, flat targets) of ``step``."""
    if task == "clm":
        x = data.sequences(step, seed)
        return {"input_ids": x}, x[:, 1:].reshape(-1)
    if task == "mlm":
        x, y = data.masked(step, seed)
        return {"input_ids": x}, y.reshape(-1)
    if task == "seq2seq":
        x, y = data.masked(step, seed)
        start = torch.full((y.shape[0], 1), data.MASK)
        return {"input_ids": x, "decoder_input_ids": torch.cat([start, y[:, :-1]], 1)}, y.reshape(-1)
    make = {"image": data.images, "wave": data.waveforms, "mel": data.spectrograms}[task]
    x, y = make(step, seed)
    return {FLOAT_INPUT[task]: x}, y


def logits(task: str, model, inputs: dict) -> torch.Tensor:
    """The model's logits for ``inputs``, one row per target of ``batch``."""
    out = model(**inputs).logits
    if task == "clm":
        out = out[:, :-1]
    return out.reshape(-1, out.shape[-1])
