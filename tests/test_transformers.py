"""The Hugging Face Trainer callback on a tiny GPT-2 built from a config (no
download, CPU): accelerate's optimizer unwrapped, the model's own loss as
<loss> over whole optimizer steps, gradient norms equal to the Trainer's
logged grad_norm, one run with report_to="tensorboard"."""

import os

import numpy as np
import pytest
import torch

from tb_neuraldbg import metadata
from tb_neuraldbg.offline.reader import read_logdir

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch.set_num_threads(1)
M = metadata.METRIC_INDEX


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=32, length=12, vocab=64, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def train(tmp_path, accumulation=1, steps=6, **watch):
    from tb_neuraldbg.integrations.transformers import NeuralDbgCallback

    model = tiny_gpt2()
    losses = []
    model.register_forward_hook(lambda m, i, out: losses.append(out.loss.item()) if m.training else None)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulation,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    cb = NeuralDbgCallback(**watch)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb])
    trainer.train()
    return trainer, cb, losses


@pytest.mark.parametrize("analysis", ["thread", pytest.param("process", marks=[pytest.mark.slow, pytest.mark.skipif(
    os.name != "posix", reason="the worker process needs a POSIX system")])])
def test_trainer_run_is_one_run_with_hfs_scalars_and_equal_grad_norms(tmp_path, analysis):
    trainer, cb, losses = train(tmp_path, analysis=analysis)
    assert cb.writer is None
    runs = read_logdir(str(tmp_path))
    assert len(runs) == 1
    run = runs[0]
    assert run.num_steps == 6
    assert "transformer.h.0.attn.c_attn" in run.layer_names
    # report_to="tensorboard" wrote its scalars into the same directory.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(run.path)
    ea.Reload()
    assert "train/loss" in ea.Tags()["scalars"]
    loss = run.stats[:, run.layer_names.index(metadata.PSEUDO_LOSS), M["value"]]
    np.testing.assert_allclose(loss, losses, rtol=1e-5)
    grad = run.stats[:, :, M["grad_norm"]]
    total = np.sqrt(np.nansum(grad.astype(np.float64) ** 2, axis=1))
    logged = [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]
    np.testing.assert_allclose(total, logged, rtol=1e-4)
    lr = run.stats[:, run.layer_names.index(metadata.PSEUDO_OPTIMIZER), M["value"]]
    assert np.isfinite(lr).all()
    assert run.config["analysis"] == analysis


def test_gradient_accumulation_records_the_whole_step_loss(tmp_path):
    trainer, cb, losses = train(tmp_path, accumulation=2, steps=4)
    (run,) = read_logdir(str(tmp_path))
    assert run.num_steps == 4
    loss = run.stats[:, run.layer_names.index(metadata.PSEUDO_LOSS), M["value"]]
    np.testing.assert_allclose(loss, np.reshape(losses, (4, 2)).mean(axis=1), rtol=1e-5)
    grad = run.stats[:, :, M["grad_norm"]]
    total = np.sqrt(np.nansum(grad.astype(np.float64) ** 2, axis=1))
    logged = [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]
    np.testing.assert_allclose(total, logged, rtol=1e-4)
