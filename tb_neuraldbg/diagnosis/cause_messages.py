"""The messages of the causes judged from the quantities every run has
(docs/diagnosis.md, "the quantities every run has"): updates against their
healthy size (an optimizer that stopped moving the model), gradients exactly
0, a loss at the trivial predictor's level, inputs not normalised or integer.
:func:`explain.event_message` words their events with :func:`cause_head` and
advises from ``CAUSE_ADVICE`` (by kind and ``extra["cause"]``).
"""

from __future__ import annotations

from .numbers import fmt, fmt_change, known

__all__ = ["CAUSE_ADVICE", "cause_head", "input_scale_message", "integer_input_note"]

#: advice by (kind, cause), merged into explain.BY_CAUSE
CAUSE_ADVICE = {
    ("no_gradient", "zero_gradient"): (
        "Likely cause: its output reaches the loss only through something that multiplies it by 0 "
        "(a mask of zeros, a gate or scale initialised to 0 that cannot move, x - x.detach()), or "
        "through a step that has no gradient (argmax, round, a comparison). Try: checking what "
        "follows this layer in forward; a dead layer after it is reported on its own."),
    ("frozen_weights", "update_negligible"): (
        "Likely cause: a learning rate orders of magnitude too small for this model (1e-9 where 1e-3 was "
        "meant, a factor such as 0.1 passed as the rate of a param group, a warmup that starts from 0 "
        "and never rises). Try: printing optimizer.param_groups[i]['lr'] at that step; the rate you "
        "meant."),
    ("frozen_weights", "update_collapse"): (
        "Likely cause: a schedule that took the rate to ~0 (a per-epoch scheduler.step() called every "
        "batch, a decay far too fast, a step_size in epochs counted in batches). Try: checking where "
        "scheduler.step() is called and its step_size/gamma/T_max; printing the rate over the run."),
    ("loss_plateau", "trivial"): (
        "Gradients flow, but the model predicts no better than a constant (the targets' mean, or their "
        "label frequencies). Likely cause: targets "
        "unrelated to the inputs (misaligned or shuffled pairs, the wrong column), inputs that carry no "
        "signal (constant, all zero, normalised away), or a learning rate far too low. Try: overfitting a "
        "single batch; checking that each input is paired with its own target."),
    ("loss_plateau", "above_trivial"): (
        "Gradients flow, but the model does worse than a constant prediction (the targets' mean, or their "
        "label frequencies), which the bias of its output alone would learn. Likely cause: updates too "
        "small to move it (a learning rate far too low, gradients clipped to almost nothing with "
        "clip_grad_value_, a schedule stuck near 0), or targets unrelated to the inputs. Try: printing the "
        "update ratio ||dw||/||w|| (healthy is ~1e-3) and the gradient after clipping; overfitting a single "
        "batch."),
    ("loss_plateau", "probabilities"): (
        "Likely cause: a Softmax (or sigmoid outputs that sum to 1) as the model's last layer before "
        "CrossEntropyLoss, which applies log-softmax itself: softmax twice, gradients that shrink as it "
        "saturates. Try: removing the final Softmax and passing the logits to the loss (apply softmax "
        "only for predictions), or log_softmax with NLLLoss."),
    ("loss_plateau", "out_of_reach"): (
        "Likely cause: an activation after the output layer of a regression (a ReLU on standardised "
        "targets, a Sigmoid or Tanh on targets not scaled to its range). Try: removing the output "
        "activation (a plain Linear output), or scaling the targets into its range."),
    ("initial_loss", "negative"): (
        "Likely cause: targets outside the loss's domain: masks or labels in {0, 255} (not divided by "
        "255) or in {-1, 1} fed to BCEWithLogitsLoss/BCELoss, soft targets that are not a distribution, "
        "or NLLLoss fed raw logits instead of log-probabilities. The loss then falls without bound and "
        "drives the logits up. Try: checking the targets' range against the loss's (min and max of a "
        "batch), scaling them into it."),
    ("loss_plateau", "sigmoid"): (
        "Likely cause: a Sigmoid as the model's last layer before BCEWithLogitsLoss (or "
        "MultiLabelSoftMarginLoss), which applies the sigmoid itself: sigmoid twice. Try: removing the "
        "final Sigmoid and passing the logits to the loss (apply sigmoid only for predictions), or "
        "keeping the Sigmoid with BCELoss."),
    ("frozen_weights", "never_stepped"): (
        "Likely cause: scheduler.step() called in place of optimizer.step(), step() called on another "
        "optimizer than the one watched (one built for an earlier copy of the model), or a step() in a "
        "branch never taken (an accumulation counter that never reaches its condition). Try: calling "
        "optimizer.step() after backward (every k-th backward when accumulating gradients), then "
        "scheduler.step(): scheduler.step() does not update the weights; passing watch() the optimizer "
        "that steps."),
    ("frozen_weights", "update_rounded"): (
        "Likely cause: weights kept in a low-precision dtype (model.half(), model.to(torch.bfloat16)) "
        "without a float32 master copy: an update below half the spacing of the weight's values (2^-9 of "
        "it in bfloat16, 2^-11 in float16) is rounded off, whatever the gradient. Try: keeping the "
        "weights in float32 and running the forward under torch.autocast (mixed precision), or a "
        "float32 master copy of the weights for the optimizer (an optimizer with Kahan summation or "
        "stochastic rounding); a larger learning rate only moves the weights that are small enough."),
}


def cause_head(kind, where, step, value, before, extra) -> str | None:
    """The head of an event whose cause has its own wording (None: the
    kind's usual head)."""
    cause = extra.get("cause")
    if kind == "frozen_weights" and cause in ("update_negligible", "update_collapse"):
        if not where.startswith("<"):
            group = extra.get("group")
            rate = ""
            if known(extra.get("lr")):
                of = f", param group {group})" if group is not None else ")"
                rate = f" (learning rate {fmt(extra.get('lr'))}{of}"
            return (f"{where}: its parameters get gradients but move by {fmt(value)} of their weights per step "
                    f"from step {step} (update ratio ||dw||/||w||; healthy is ~1e-3){rate}.")
        return _updates_head(where, step, value, before, extra)
    if kind == "loss_plateau" and extra.get("reason") == "above_trivial" and known(extra.get("trivial_loss")):
        of = "the label frequencies" if extra.get("trivial_of") == "frequencies" else "the targets' mean"
        return (f"<loss>: the loss stays above the level of predicting {of} for every sample from step {step} "
                f"(loss {fmt(value)}; that constant prediction's loss is {fmt(extra.get('trivial_loss'))}; it "
                f"started at {fmt(before)}): the model has not learned even that constant.")
    if kind == "loss_plateau" and extra.get("reason") == "trivial" and known(extra.get("trivial_loss")):
        if extra.get("trivial_of") == "frequencies":
            return (f"<loss>: the loss stays at the level of predicting the label frequencies for every sample "
                    f"from step {step} (loss {fmt(value)}; that constant prediction's loss, the entropy of the "
                    f"labels, is {fmt(extra.get('trivial_loss'))}; it started at {fmt(before)}): the model "
                    f"learned how often each label occurs, nothing about the inputs.")
        return (f"<loss>: the loss stays at the level of predicting the targets' mean from step {step} (loss "
                f"{fmt(value)}; the targets' variance, that trivial predictor's loss, is "
                f"{fmt(extra.get('trivial_loss'))}; it started at {fmt(before)}).")
    if kind == "loss_plateau" and cause == "out_of_reach":
        lo, hi = extra.get("out_min"), extra.get("out_max")
        side = (f"never below {fmt(lo)}, while the targets go down to {fmt(extra.get('target_min'))}"
                if known(lo) and known(extra.get("target_min")) and extra["target_min"] < lo else
                f"never above {fmt(hi)}, while the targets go up to {fmt(extra.get('target_max'))}")
        return (f"<loss>: the model's output cannot reach its targets from step {step}: it comes from "
                f"{extra.get('layer')} (a {extra.get('type')}), {side}: the loss cannot fall below what those "
                f"targets cost (loss {fmt(value)}; it started at {fmt(before)}).")
    if kind == "loss_plateau" and cause == "sigmoid":
        return (f"<loss>: the model's output fed to the loss is already squashed into [0, 1] from step {step} "
                f"(by {extra.get('layer')}): the loss applies its own sigmoid to it again, so every prediction "
                f"stays between 0.5 and 0.73, and it cannot fall below ln(1 + 1/e) = {fmt(extra.get('floor'))} "
                f"(loss {fmt(value)}; it started at {fmt(before)}).")
    if kind == "loss_plateau" and cause == "probabilities":
        k = extra.get("num_classes")
        return (f"<loss>: the model's output fed to the {k}-class loss is a probability distribution from step "
                f"{step} (every value in [0, 1], rows that sum to 1): the loss applies log-softmax to it again "
                f"and cannot fall below ln(1 + ({k}-1)/e) = {fmt(extra.get('floor'))} (loss {fmt(value)}; "
                f"it started at {fmt(before)}).")
    if kind == "initial_loss" and cause == "negative":
        what = {"sigmoid": "a loss that applies a sigmoid to its input itself (BCEWithLogitsLoss)",
                "softmax": "a cross-entropy"}.get(extra.get("squash"), "a cross-entropy")
        k = extra.get("num_classes")
        expected = f" (ln({k}) = {fmt(before)} is expected at initialisation)" if k and known(before) else ""
        return (f"<loss>: the first loss is {fmt(value)}, below 0, which {what} cannot reach on valid targets"
                f"{expected}: the targets (or the values fed to the loss) lie outside its domain.")
    if kind == "frozen_weights" and cause == "update_rounded":
        dtype = f" ({extra['dtype']} weights)" if isinstance(extra.get("dtype"), str) else ""
        names = ", ".join(extra.get("layers") or ())
        n = extra.get("layer_count")
        more = ", ..." if n and n > len(extra.get("layers") or ()) else ""
        return (f"{where}: the optimizer's updates are rounded away by the weights' precision{dtype} from step "
                f"{step}: optimizer.step() leaves {fmt(100 * value if known(value) else value)}% of the elements "
                f"that get a non-zero gradient exactly unchanged (most of them in {n} layer(s): {names}{more}), "
                "so the model barely learns while its gradients flow.")
    if kind == "frozen_weights" and cause == "never_stepped":
        n = extra.get("backward_passes")
        passes = "its backward passes" if n is None else f"{n} backward pass{'' if n == 1 else 'es'}"
        return (f"{where}: the optimizer never stepped: {passes}, no "
                f"optimizer.step() on the watched optimizer, so it never updated the weights (the run's one "
                f"row, step {step}, was recorded at close).")
    if kind == "no_gradient" and cause == "zero_gradient":
        return (f"{where}: its parameters' gradients are exactly 0 at every step from step {step}: "
                "they are in the optimizer and require grad, but no gradient reaches them.")
    return None


def input_scale_message(rms0: float, symptom, extreme: bool = True) -> str:
    """The root cause's message for updates too large from the first ones
    because the inputs are unnormalised; ``extreme``: the first layers'
    gradients were already extreme before the first update."""
    why = ("the first layers' gradients were already orders of magnitude above their weights at the first step, "
           "before any update, so even a moderate learning rate moves them by more than their size"
           if extreme else
           "the layers' gradients scale with them, so the updates are too large from the first ones on, at a "
           "learning rate that would suit normalised inputs")
    return (f"The inputs are not normalised (RMS {fmt(rms0)} in the first batch): {why}; then {symptom.layer}: "
            f"{symptom.kind.replace('_', ' ')} from step {symptom.step}. Try: normalising the inputs (and "
            "regression targets) to mean 0 and std 1, rather than lowering the learning rate.")


def _updates_head(where, step, value, before, extra) -> str:
    """The head of an optimizer that stopped moving the model."""
    if extra.get("cause") == "update_negligible":
        what = (f"the layers move by {fmt(value)} of their weights per step (median update ratio "
                "||dw||/||w||; healthy is ~1e-3)")
    else:
        what = (f"the layers' updates collapsed from {fmt(before)} of their weights per step at step "
                f"{extra.get('update_peak_step')} to {fmt(value)} (median update ratio ||dw||/||w||; healthy "
                "is ~1e-3)")
    grads = ""
    if known(extra.get("grad_norm")):
        change = fmt_change(extra.get("grad_norm_before"), extra.get("grad_norm"))
        grads = f" while gradients still flow (median grad norm {change})"
    rate = ""
    if known(extra.get("lr_high")):
        lo, hi = extra.get("lr_low"), extra.get("lr_high")
        now = fmt(hi) if lo == hi or not known(lo) else f"{fmt(lo)}..{fmt(hi)} across param groups"
        rate = (f" The learning rate was {fmt(extra.get('lr_peak'))} at step {extra.get('lr_peak_step')} and is "
                f"{now} at step {extra.get('lr_step')}.")
    return f"{where}: the optimizer stopped moving the model from step {step}: {what}{grads}.{rate}"


def integer_input_note(integers: float, absmax: float) -> str:
    """What the unnormalised-input message adds when the floating-point batch
    holds only integers: they may be ids rather than features ("" otherwise)."""
    if integers != 0.5:
        return ""
    return (f" The batch holds only integers (up to {fmt(absmax)}): raw pixel values or counts are features to "
            "scale (x / 255 for pixels); token ids or indices are not features: pass them as a long tensor to an "
            "nn.Embedding instead.")
