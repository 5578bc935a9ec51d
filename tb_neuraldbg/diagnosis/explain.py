"""Plain-language messages: what happened, the likely cause, what to try.

Pure string formatting; every function takes plain values so the offline
diagnosis and the online engine word things identically. The advice depends
on the module: a dead GELU is not told to try GELU, a Linear whose output is
zero is not told about pre-activations (see :func:`advice`).

The wording of the causes judged from the quantities every run has lives in
cause_messages.py, that of a module's gains and units in signal_messages.py;
both feed :data:`BY_CAUSE`, so every advice is still held to a "Try:" by the
tests. Numbers are worded by numbers.py.
"""

from __future__ import annotations

import math

from ..format.metadata import METRIC_INFO
from .cause_messages import CAUSE_ADVICE, cause_head, input_scale_message, integer_input_note
from .numbers import fmt, fmt_change, known as _known
from .signal_messages import SIGNAL_ADVICE, signal_head

__all__ = ["BY_CAUSE", "CAUSES", "KIND_MEANING", "advice", "advice_first", "event_message", "family", "fmt",
           "fmt_change", "input_scale_message", "integer_input_note", "value_label", "variant",
           "with_clipping"]


def _pct(x) -> str:
    if x is None or not math.isfinite(float(x)):
        return "n/a"
    return f"{100 * float(x):.0f}%"


#: module families by type name: what a module does decides what to advise
_FAMILIES = {
    "rectifier": ("ReLU", "ReLU6", "Threshold", "Hardswish", "RReLU"),
    "smooth": ("GELU", "SiLU", "ELU", "CELU", "SELU", "LeakyReLU", "PReLU", "Mish", "Softplus", "Tanhshrink",
               "Softshrink", "Hardshrink", "GLU"),
    "bounded": ("Tanh", "Sigmoid", "Softsign", "Hardtanh", "Hardsigmoid", "LogSigmoid", "Softmax", "LogSoftmax"),
    "norm": ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "RMSNorm",
             "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm"),
    "affine": ("Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
               "ConvTranspose2d", "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d"),
    "embedding": ("Embedding", "EmbeddingBag"),
    "recurrent": ("RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"),
    "attention": ("MultiheadAttention",),
}
_FAMILY_OF = {name: fam for fam, names in _FAMILIES.items() for name in names}


#: name endings of a model's own module types, and their family
_FAMILY_SUFFIXES = (("Norm", "norm"), ("Norm1d", "norm"), ("Norm2d", "norm"), ("Norm3d", "norm"),
                    ("Embedding", "embedding"), ("Embeddings", "embedding"))


def family(layer_type: str) -> str:
    """The family of a module type name ("rectifier", "smooth", "bounded",
    "norm", "affine", "embedding", "recurrent", "attention"), "pseudo" for
    the pseudo-layers' types, else "other"."""
    if layer_type in ("input", "loss", "optimizer"):
        return "pseudo"
    known = _FAMILY_OF.get(layer_type)
    if known is not None:
        return known
    # A model's own classes say what they are in their names (LlamaRMSNorm,
    # ConvNextLayerNorm, LlamaRotaryEmbedding in tests/test_model_zoo.py).
    for suffix, fam in _FAMILY_SUFFIXES:
        if layer_type.endswith(suffix):
            return fam
    return "other"


#: what each kind means, in a reader's words: said where a pseudo-layer
#: (``<optimizer>``) carries several kinds, so that each reads as its own
KIND_MEANING = {
    "vanishing_gradient": "gradients vanish in the layers",
    "exploding_gradient": "the updates diverge: the layers' gradients explode",
    "nonfinite": "values turn inf/NaN",
    "dead_activation": "units die (their output is 0 for every sample)",
    "saturated_activation": "activations saturate",
    "no_gradient": "no gradient reaches the parameters",
    "frozen_weights": "the weights stop changing",
    "activation_collapse": "activations collapse to a constant",
    "activation_explosion": "activations explode",
    "data_anomaly": "a bad batch",
    "loss_spike": "the loss jumps far above its recent level",
    "loss_plateau": "the loss stops falling",
    "scaler_collapse": "the AMP loss scale collapses",
    "initial_loss": "the loss starts far from its expected value",
}

#: what an event's ``value`` measures, per kind: a metric of
#: ``metadata.METRIC_TABLE`` (its label is the one the tab shows), or a
#: quantity of a pseudo-layer that has no metric row
_VALUE_METRIC = {
    "vanishing_gradient": "grad_norm",
    "exploding_gradient": "grad_norm",
    "dead_activation": "act_dead_frac",
    "saturated_activation": "act_sat_frac",
    "activation_collapse": "act_std",
    "activation_explosion": "act_absmax",
    "no_gradient": "grad_missing",
    "frozen_weights": "update_ratio",
}
_PSEUDO_VALUE = {
    ("<optimizer>", None): "learning rate",
    ("<optimizer>", "scaler_collapse"): "AMP loss scale",
    # (a median update ratio, a share of updates rounded away, or backward passes without a
    # step: which one, its cause says; without the extras, not the learning rate)
    ("<optimizer>", "frozen_weights"): "value",
    ("<input>", "data_anomaly"): "batch max |x|",
    ("<input>", None): "first batch RMS",
    ("<loss>", None): "loss",
}


def value_label(kind: str, layer: str, extra: dict | None = None) -> str:
    """What an event's value is ("Gradient norm", "loss", "learning rate"),
    for a value shown without its message (the report's timeline)."""
    extra = extra or {}
    if extra.get("cause") == "never_stepped":
        return METRIC_INFO["steps_missing"].label
    if layer.startswith("<"):
        return _PSEUDO_VALUE.get((layer, kind)) or _PSEUDO_VALUE.get((layer, None), "value")
    if kind == "exploding_gradient" and extra.get("cause") == "grad_accumulation":
        return "share of layers holding stale gradients"
    if kind == "dead_activation" and extra.get("all_zero"):
        return "zero fraction"
    if extra.get("signal") in METRIC_INFO:  # judged by a module's gain or unit spread
        return METRIC_INFO[extra["signal"]].label
    metric = METRIC_INFO.get(_VALUE_METRIC.get(kind, ""))
    return metric.label if metric else "value"


#: the likely cause and what to try, per event kind, for a module of no
#: particular family (see :func:`advice` for the others). "nonfinite" and
#: "data_anomaly" have none here: their advice depends on the event (where
#: the value was born, what is wrong with the batch): see ``BY_CAUSE``.
CAUSES = {
    "vanishing_gradient": (
        "Likely cause: saturating or dead activations after it, a poor initialisation, or a deep "
        "stack without normalisation or residual paths. Try: ReLU/GELU instead of sigmoid/tanh, "
        "Kaiming/Xavier initialisation, BatchNorm/LayerNorm, residual connections."
    ),
    "exploding_gradient": (
        "Likely cause: a learning rate too high, a large initialisation, or missing "
        "normalisation. Try: torch.nn.utils.clip_grad_norm_, a lower learning rate or a warmup, "
        "checking this layer's initialisation."
    ),
    "dead_activation": (
        "Likely cause: pre-activations pushed negative (a negative bias, or a large update from a "
        "high learning rate). Try: LeakyReLU/GELU, BatchNorm before the activation, a lower "
        "learning rate, checking the bias initialisation."
    ),
    "saturated_activation": (
        "Gradients through saturated units are ~0. Likely cause: pre-activations too large "
        "(initialisation, unnormalised inputs, a high learning rate). Try: normalising the inputs, "
        "BatchNorm/LayerNorm before it, a smaller initialisation, ReLU/GELU."
    ),
    "activation_collapse": (
        "Likely cause: a dead or saturated layer before it, a constant input, or weights "
        "collapsed to zero. Try: checking the layers before it and the input pipeline."
    ),
    "activation_explosion": (
        "Likely cause: a large initialisation (of this layer or the ones before it), "
        "unnormalised inputs, or a learning rate too high. Try: a standard initialisation (Kaiming/Xavier), normalisation layers, "
        "a lower learning rate."
    ),
    "no_gradient": (
        "Likely cause: its output is cut from the loss (.detach(), .data, torch.no_grad(), a "
        "round-trip through .item()/numpy) or not used by the loss. Try: removing the detach; "
        "check that the forward pass connects this layer to the loss."
    ),
    "frozen_weights": (
        "Likely cause: its parameters are not in the optimizer (the optimizer was built before "
        "the layer existed, or a parameter group is missing). Try: building the optimizer from "
        "model.parameters() once the model is complete."
    ),
    "loss_spike": (
        "Likely cause: a learning rate too high, an outlier batch, or the start of a divergence. "
        "Try: gradient clipping, a lower learning rate, inspecting that batch."
    ),
    "loss_plateau": (
        "Gradients flow but the loss does not fall. Likely cause: labels unrelated to the inputs "
        "(a shuffled or misaligned label pipeline), a learning rate far too low, or an output that "
        "does not fit the loss (e.g. a softmax before CrossEntropyLoss). Try: overfitting a single "
        "batch, checking the labels."
    ),
    "initial_loss": (
        "Likely cause: logits scaled up at initialisation (a large init of the last layer), a "
        "missing or doubled softmax, or a loss summed instead of averaged. Try: a smaller init of "
        "the last layer; pass raw logits to CrossEntropyLoss."
    ),
    "scaler_collapse": (
        "Persistent inf/NaN in the graph: lowering the scale cannot fix an overflow that is not "
        "caused by the scale. Try: computing that op in float32 (torch.autocast(enabled=False)), "
        "bf16, or fixing the op's inputs."
    ),
}

#: advice that depends on the module's family (kind -> family -> text)
_BY_FAMILY = {
    "dead_activation": {
        "smooth": (
            "It can only output exactly 0 when its input is 0 or far negative everywhere. Likely cause: the "
            "layer before it outputs zeros (zero weights, a mask) or its pre-activations were pushed far "
            "negative by a large update. Try: checking the layer before it, a lower learning rate."
        ),
        "bounded": (
            "Likely cause: its input is pinned (the layer before it outputs zeros or huge negative values). "
            "Try: checking the layer before it, normalising its input, a lower learning rate."
        ),
        "affine": (
            "Likely cause: its weights and bias are 0 (a zero initialisation that cannot train, a pruning "
            "mask, weights zeroed by hand) or its input is 0. Try: checking its initialisation, that the "
            "optimizer holds it with a learning rate > 0, and the layer before it."
        ),
        "norm": (
            "Likely cause: its scale (weight) and shift (bias) are 0, e.g. a zero-initialised residual "
            "BatchNorm whose parameters never train. Try: checking that the optimizer holds it with a "
            "learning rate > 0."
        ),
        "embedding": (
            "Likely cause: the rows it looks up are 0 (every token is the padding_idx, or an empty bag). "
            "Try: checking the input ids and offsets."
        ),
        "other": (
            "Likely cause: its input is 0, or it multiplies by 0 (a mask, zero weights). Try: checking "
            "its inputs and parameters."
        ),
    },
    "saturated_activation": {
        "rectifier": (
            "Gradients through units at the top bound are 0. Likely cause: pre-activations too large "
            "(initialisation, unnormalised inputs, a high learning rate). Try: normalising the inputs, "
            "BatchNorm/LayerNorm before it, a smaller initialisation, ReLU without an upper bound."
        ),
    },
    "vanishing_gradient": {
        "recurrent": (
            "Likely cause: gradients that shrink through many time steps, or saturated gates. Try: "
            "shorter sequences (truncated backpropagation), LayerNorm on the inputs, residual "
            "connections around it, a larger learning rate for it."
        ),
        "norm": (
            "Likely cause: saturating or dead activations after it, or weights after it collapsed to "
            "zero. Try: ReLU/GELU instead of sigmoid/tanh after it, residual connections, checking the "
            "layers after it."
        ),
    },
    "activation_explosion": {
        "norm": (
            "Likely cause: its scale (weight) grew under a learning rate too high, or an input outside "
            "the range it normalises (running statistics far from the batch). Try: a lower learning "
            "rate, weight decay on the norm's weight, checking the layer before it."
        ),
        "recurrent": (
            "Likely cause: recurrent weights with a spectral radius above 1 (a large initialisation) or "
            "a learning rate too high. Try: an orthogonal initialisation of the recurrent weights, "
            "gradient clipping, a lower learning rate."
        ),
    },
}
#: what only a vanilla RNN is told (an LSTM or a GRU already is one)
_VANILLA_RNN = " LSTM/GRU instead of a vanilla RNN."


#: advice for one variant of a kind, keyed (kind, variant): the variant is
#: what the event says about its cause (see :func:`variant`). A table, so that
#: adding a cause is adding a row, and every row can be checked for a "Try:".
BY_CAUSE = {
    ("exploding_gradient", "grad_accumulation"): (
        "Likely cause: a forgotten or ineffective zero_grad(): never called, called on another "
        "optimizer or module, or on a part of the model only. Try: optimizer.zero_grad() once per "
        "step, before backward() or after step() (gradient accumulation on purpose calls it after "
        "the step)."),
    ("frozen_weights", "lr_zero"): (
        "Likely cause: a schedule or a param group config that sets the rate to 0 (an integer "
        "division, a lambda that returns 0, a per-group lr left at 0). Try: printing "
        "optimizer.param_groups[i]['lr'] at that step."),
    ("frozen_weights", "no_update"): (
        "Likely cause: the gradients cleared between backward() and step(), an optimizer that holds "
        "other tensors (a copy of the model), or an update too small to change the weights. Try: "
        "zero_grad() before backward() or after step(), building the optimizer from the model you "
        "train."),
    ("no_gradient", "ran_without_grad"): (
        "Likely cause: it runs under torch.no_grad() (or inference_mode) inside forward, while its "
        "parameters require grad. Try: removing the no_grad block if it should train; if it should "
        "not, requires_grad_(False) on its parameters (a frozen part is then not reported)."),
    ("loss_spike", "climb"): (
        "Likely cause: updates that make the loss worse: a learning rate too high, a weight decay "
        "that shrinks what was learnt, a sign error in a hand-written update. Try: a lower learning "
        "rate, checking what changed at that step (schedule, hyperparameters, data)."),
    # non-finite values: the advice follows where the value is born
    ("nonfinite", "forward"): (
        "Try: guarding the op where it is born (a clamp or an eps in sqrt/log/division, "
        "x.clamp(min=1e-12)), computing that op in float32 (torch.autocast(enabled=False) around "
        "it), a smaller learning rate, and torch.autograd.detect_anomaly() on one step to get the "
        "op's traceback."),
    ("nonfinite", "received"): (
        "Try: fixing the first layer or op where it is born (its own event, earlier in forward or "
        "later in backward): here it only passes through."),
    ("nonfinite", "backward"): (
        "Try: torch.autograd.detect_anomaly() on one step to name the backward op, an eps where a "
        "gradient is singular (sqrt(x + 1e-12), log(x + eps), a division by x.clamp(min=eps)), that "
        "op in float32 (torch.autocast(enabled=False)), a smaller learning rate."),
    ("nonfinite", "loss"): (
        "Try: checking the loss inputs (log of zero probabilities: pass logits to the loss, targets "
        "out of range), an eps in any division or log in the loss, the loss in float32 "
        "(torch.autocast(enabled=False)), a smaller learning rate."),
    ("nonfinite", "empty_batch"): (
        "Try: skipping empty batches before the forward, or fixing the filter or sampler that "
        "yields them."),
    ("data_anomaly", "nonfinite"): (
        "Try: checking the data pipeline for missing values and division by 0 in preprocessing, "
        "or torch.nan_to_num on the batch while you look."),
    ("data_anomaly", "constant"): (
        "Try: checking the data pipeline for an empty or padded batch or a broken augmentation."),
    ("data_anomaly", "targets"): (
        "Try: mapping the labels into [0, 1] (a {-1, 1} label to {0, 1}: (y + 1) / 2; a mask in 0..255 "
        "divided by 255), and passing the model's output first and the targets second "
        "(criterion(logits, targets))."),
    ("data_anomaly", "outlier"): (
        "Try: checking the normalisation and the data source of that batch (a corrupt sample, "
        "a different scale or unit)."),
}


def variant(kind: str, extra: dict | None) -> str | None:
    """Which row of ``BY_CAUSE`` an event's extras select (None: by family)."""
    extra = extra or {}
    if kind == "nonfinite":
        side = extra.get("side")
        if side == "loss":
            return "empty_batch" if extra.get("empty_batch") else (
                "received" if extra.get("from_layer") else "loss")
        if side == "backward":
            if extra.get("forward_nonfinite") or extra.get("received"):
                return "received"
            return "loss" if extra.get("in_loss") else "backward"
        return "received" if extra.get("from_layer") else "forward"
    if kind == "data_anomaly":
        return extra.get("reason") if (kind, extra.get("reason")) in BY_CAUSE else "outlier"
    for key in ("cause", "reason"):
        if (kind, extra.get(key)) in BY_CAUSE:
            return extra.get(key)
    if extra.get("ran_without_grad"):
        return "ran_without_grad"
    return None


#: what the run already clipping gradients changes in the advice: clipping is
#: not advised again, the rate and the warmup are
_CLIP_ADVICE = ("torch.nn.utils.clip_grad_norm_, ", "gradient clipping, ", ", torch.nn.utils.clip_grad_norm_")
_ALREADY_CLIPS = (" The run already clips gradients (the norms shown are before the clip), so more "
                  "clipping is not the fix: try a lower learning rate or a longer warmup.")


def with_clipping(text: str, clips: bool | None) -> str:
    """``text`` for a run that clips its gradients (``clips`` True): clipping
    is not advised again. Unknown (None) or not clipping: unchanged."""
    if not clips or "clip" not in text:
        return text
    for phrase in _CLIP_ADVICE:
        text = text.replace(phrase, "")
    return text + _ALREADY_CLIPS


def advice(kind: str, layer_type: str = "", extra: dict | None = None, clips: bool | None = None) -> str:
    """The "Likely cause ... Try ..." part of a message, for a module of
    ``layer_type`` (its class name): by cause when the event says it
    (``BY_CAUSE``), else by the module's family, else the kind's default
    (``CAUSES``). ``clips``: whether the run already clips its gradients
    (None: not known)."""
    return with_clipping(_advice(kind, layer_type, extra or {}), clips)


def _advice(kind: str, layer_type: str, extra: dict) -> str:
    fam = family(layer_type)
    text = BY_CAUSE.get((kind, variant(kind, extra)))
    if text is not None:
        return text
    if kind == "dead_activation" and extra.get("via") == "functional_activation":
        text = CAUSES["dead_activation"].replace("LeakyReLU/GELU", "F.leaky_relu/F.gelu instead of torch.relu")
        # (a normalisation layer is already the BatchNorm before the activation)
        return text.replace(" BatchNorm before the activation,", "") if fam == "norm" else text
    by_fam = _BY_FAMILY.get(kind, {})
    if fam in by_fam:
        text = by_fam[fam]
        if layer_type in ("RNN", "RNNCell") and kind in ("vanishing_gradient", "activation_explosion"):
            text = text[:-1] + "," + _VANILLA_RNN
        return text
    if kind == "dead_activation" and fam not in ("rectifier", "pseudo"):
        return by_fam["other"]
    return CAUSES.get(kind, "")


def advice_first(message: str) -> str:
    """A root cause's message: what to try first, then the likely cause, then
    what was seen ("Seen: ..."), so that a reader shown "What to try:" before
    it reads advice rather than the diagnosis again. An event message is
    "<what was seen> Likely cause: ... Try: ..."; one without a "Try:" is
    returned unchanged."""
    cut = message.rfind("Try: ")
    if cut < 0:
        return message
    tried = message[cut + len("Try: "):].strip()
    before = message[:cut].strip()
    seen, sep, cause = before.partition("Likely cause: ")
    parts = [tried[:1].upper() + tried[1:]]
    if sep:
        parts.append(f"Likely cause: {cause.strip()}")
    if seen.strip():
        parts.append(f"Seen: {seen.strip()}")
    return " ".join(parts)


def event_message(kind: str, layer: str, layer_type: str, from_state: str, to_state: str,
                  step: int, value, before, extra: dict | None = None, clips: bool | None = None) -> str:
    """The message of one event (failure or recovery)."""
    extra = extra or {}
    where = f"{layer} ({layer_type})" if layer_type and not layer.startswith("<") else layer
    if extra.get("note") == "harmless_burst":
        ratio = value / before if _known(before) and before else None
        return (f"{where}: gradient burst at step {step} (grad norm {fmt(value)}"
                + (f", {fmt(ratio)}x the largest it had before" if ratio else "")
                + f"); no failure followed in the next {extra.get('window')} steps. The norms are measured "
                "before clipping: if you clip gradients, the clip is doing its job.")
    if to_state == "healthy":
        change = f" ({fmt_change(before, value)})" if _known(value) else ""
        return f"{where}: recovered from {from_state} at step {step}{change}."
    head = signal_head(kind, where, step, value, extra) or _head(kind, where, from_state, to_state, step, value,
                                                                 before, extra)
    return f"{head} {advice(kind, layer_type, extra, clips)}".strip()


# the bad batches a head names by their reason (the advice is in BY_CAUSE)
_BATCH_CHECKS = ("nonfinite", "constant")


def _head(kind, where, from_state, to_state, step, value, before, extra) -> str:
    extended = cause_head(kind, where, step, value, before, extra)
    if extended is not None:
        return extended
    if kind == "vanishing_gradient":
        return (f"{where}: gradient vanishing from step {step} (grad norm {fmt_change(before, value)}, orders of "
                "magnitude below the layers after it).")
    if kind == "exploding_gradient":
        if extra.get("cause") == "grad_accumulation":
            n, names = extra.get("layer_count"), ", ".join(extra.get("layers") or ())
            more = ", ..." if n and n > len(extra.get("layers") or ()) else ""
            return (f"{where}: gradients accumulate across steps from step {step}: when backward began, "
                    f"{n} layer(s) ({names}{more}), {_pct(value)} of those with gradients, still held the "
                    "previous step's gradients, so every update adds up all the steps before.")
        return f"{where}: gradient exploding from step {step} (grad norm {fmt_change(before, value)})."
    if kind == "nonfinite":
        side = extra.get("side")
        if side == "backward":
            if extra.get("forward_nonfinite"):
                return (f"{where}: non-finite gradient from step {step}; the forward pass was "
                        "already non-finite at that step, so the gradient follows from it: look "
                        "for where the forward values first turned non-finite.")
            if extra.get("in_loss") and extra.get("loss_unseen"):
                return (f"{where}: non-finite gradient from step {step}, born in the loss: every "
                        "module's forward output was finite, but the gradient entering the model's "
                        "output was not (the loss's value is not recorded: a plain function, not a "
                        "watched criterion). Check the loss's ops at their singular points (log of a "
                        "softmax that underflows to 0, 0 * log(0), sqrt of 0, division by ~0): use "
                        "log_softmax / F.cross_entropy on the logits, or add an eps.")
            if extra.get("in_loss"):
                return (f"{where}: non-finite gradient born in the loss's backward from step {step}: "
                        "the loss was finite, but the gradient it passed back to the model's output "
                        "was not. Check the loss's ops at their singular points (sqrt of a zero "
                        "distance, log of 0, division by ~0, a fractional power of 0): add an eps, "
                        "e.g. sqrt(x + 1e-12).")
            if extra.get("received"):
                return (f"{where}: non-finite gradient from step {step}, received from the layers "
                        "after it (the gradient w.r.t. its output was already non-finite) while the "
                        "forward pass was finite.")
            if extra.get("bwd_origin"):
                what = {"input": "the gradient it passes on to its input is",
                        "both": "its parameters' gradients and the gradient it passes on to its "
                                "input are"}.get(extra.get("via"), "its parameters' gradients are")
                return (f"{where}: non-finite gradient born in this module's backward from step "
                        f"{step}: the gradient w.r.t. its output was finite but {what} not, "
                        "while the forward pass was finite. Check the backward of its ops "
                        "(division by ~0, sqrt/log/pow near 0, a custom autograd Function).")
            return (f"{where}: non-finite gradient from step {step} while the forward pass was "
                    "finite. In backward it appears at or just after this layer: check the backward "
                    "of the ops that follow it (division by ~0, sqrt/log/pow near 0, a custom "
                    "autograd Function).")
        if side == "loss":
            if extra.get("empty_batch"):
                return (f"{where}: the loss is non-finite from step {step}: the batch of that step was "
                        "empty (batch size 0), and a mean over no elements is NaN. Check the data "
                        "pipeline (a filter or a sampler that can yield an empty batch, a last partial "
                        "batch emptied by a filter), or skip empty batches before the forward.")
            if extra.get("from_layer"):
                return (f"{where}: the loss is non-finite from step {step}; its input, the output "
                        f"of {extra['from_layer']}, was already non-finite.")
            return (f"{where}: the loss is non-finite from step {step}. Check the loss inputs "
                    "(log of zero probabilities, targets out of range, division by ~0).")
        if extra.get("from_layer"):
            return (f"{where}: non-finite output from step {step}; its input was already "
                    f"non-finite, received from {extra['from_layer']} (the value was born "
                    "before this module).")
        if extra.get("input_nonfinite"):
            return (f"{where}: non-finite output from step {step}; its input was already "
                    "non-finite, so the value is born in the code just before this module "
                    "(a functional op in the parent's forward).")
        weights = (" Or its weights: an update can make them non-finite from finite gradients "
                   "(Adam with eps=0, or 1e-8 flushed to 0 in float16: 0/0 on rows that got no "
                   "gradient; a NaN learning rate)." if extra.get("has_params") else "")
        return (f"{where}: non-finite output from step {step} while its input was finite: the "
                "value is born inside this module. Check its ops and their inputs (log/sqrt of "
                f"non-positive values, division by ~0, exp or fp16 overflow).{weights}")
    if kind == "dead_activation":
        if extra.get("all_zero"):
            return f"{where}: its output is exactly 0 for every sample from step {step}."
        after = (" after the activation applied to its output in forward (a functional ReLU)"
                 if extra.get("via") == "functional_activation" else "")
        was = f" (was {_pct(before)})" if _known(before) else ""
        return f"{where}: {_pct(value)} of its units are zero for every sample{after} from step {step}{was}."
    if kind == "saturated_activation":
        was = f" (was {_pct(before)})" if _known(before) else ""
        return f"{where}: {_pct(value)} of its outputs saturated from step {step}{was}."
    if kind == "activation_collapse":
        head = f"{where}: its output is constant from step {step} (std {fmt_change(before, value)})."
        if _known(extra.get("weight_norm")):
            head += (f" Its weights collapsed (norm {fmt(extra.get('weight_norm_max'))} -> "
                     f"{fmt(extra.get('weight_norm'))}).")
        return head
    if kind == "activation_explosion":
        head = f"{where}: activations explode from step {step} (max |x| {fmt_change(before, value)})."
        if extra.get("amplified") == "cumulative":
            head += " The layers up to here amplify the batch over a thousandfold together."
        return head
    if kind == "no_gradient":
        count = f" ({fmt(value)} parameter(s) without .grad)" if _known(value) else ""
        ran = " although it ran in forward, with autograd disabled" if extra.get("ran_without_grad") else ""
        return f"{where}: no gradient reaches its parameters from step {step}{ran}{count}."
    if kind == "frozen_weights":
        cause = extra.get("cause")
        if cause == "not_in_optimizer":
            return (f"{where}: its parameters get gradients but never change from step {step}: the optimizer "
                    "does not hold them.")
        if cause == "lr_zero":
            group = extra.get("group")
            g = f"param group {group}" if group is not None else "its param group"
            return (f"{where}: its parameters get gradients but never change from step {step}: the learning "
                    f"rate of {g} is 0.")
        return (f"{where}: its parameters get gradients but never change from step {step} (update ratio "
                f"{fmt(value)}).")
    if kind == "data_anomaly":
        reason = extra.get("reason")
        if reason == "targets":
            return (f"<loss>: the criterion takes probabilities as its targets (each in [0, 1]), but they range "
                    f"from {fmt(extra.get('target_min'))} to {fmt(extra.get('target_max'))} at step {step}: "
                    "its loss has no floor there and falls below 0 by driving the logits to infinity.")
        if reason in _BATCH_CHECKS:
            what = ("contains non-finite values" if reason == "nonfinite"
                    else f"is constant (std {fmt(extra.get('std'))})")
            return f"<input>: the batch at step {step} {what}."
        ratio = (f", {fmt(value / before)}x the {fmt(before)} of the batches before it"
                 if _known(before) and _known(value) and before else "")
        return (f"<input>: the batch at step {step} is far outside the recent distribution "
                f"(batch max |x| {fmt(value)}{ratio}).")
    if kind == "loss_spike":
        if extra.get("reason") == "climb":
            return (f"<loss>: the loss climbs from step {step} (from its best level {fmt(before)} to "
                    f"{fmt(value)}, step after step): a divergence that no single step shows.")
        recent = f" (recent level {fmt(before)})" if _known(before) else ""
        return f"<loss>: the loss spiked to {fmt(value)} at step {step}{recent}."
    if kind == "loss_plateau":
        k = extra.get("num_classes")
        if extra.get("reason") == "chance" and k:
            return (f"<loss>: the loss stays at chance level from step {step} (loss {fmt(value)}, "
                    f"ln({k}) = {fmt(math.log(k))} for {k} classes; it started at {fmt(before)}).")
        return f"<loss>: the loss has not fallen since step {step} (loss {fmt_change(before, value)})."
    if kind == "initial_loss":
        k = extra.get("num_classes")
        return (f"<loss>: initial loss {fmt(value)} is far from ln({k}) = {fmt(before)} expected "
                f"for {k}-class cross-entropy at initialisation.")
    if kind == "scaler_collapse":
        origin = extra.get("origin")
        seen = f", first seen in {origin}" if origin else ""
        return (f"<optimizer>: the GradScaler scale collapsed from step {step} (scale {fmt_change(before, value)}, "
                f"skipped steps in a row{seen}).")
    return f"{where}: {from_state} -> {to_state} at step {step}."


# the gain and units aspects' words (signal_messages.py)
BY_CAUSE.update(SIGNAL_ADVICE)


# the causes judged from the quantities every run has (cause_messages.py)
BY_CAUSE.update(CAUSE_ADVICE)
