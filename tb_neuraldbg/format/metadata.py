"""The single source of truth for the neuraldbg on-disk format.

Plugin name, format version, tag names, metric (column) names, state codes,
and the build/parse of ``SummaryMetadata``. Everything that writes or reads
neuraldbg data imports its names from here; docs/FORMAT.md describes the same
thing for other tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tensorboard.compat.proto import summary_pb2

__all__ = [
    "PLUGIN_NAME",
    "LAYER_EXTRAS",
    "FORMAT_VERSION",
    "TAG_PREFIX",
    "TAG_LAYERS",
    "TAG_STATES",
    "TAG_EVENTS",
    "TAG_DIAGNOSIS",
    "TAG_CONFIG",
    "TAG_SESSION_START",
    "TAG_SESSION_END",
    "TAG_BLOCK_SPAN",
    "TAG_BLOCK_STATES",
    "BLOCK_ROWS",
    "block_stats_tag",
    "MetricInfo",
    "METRIC_TABLE",
    "METRIC_INFO",
    "METRICS",
    "METRIC_INDEX",
    "stats_tag",
    "metric_of_tag",
    "StateInfo",
    "STATE_TABLE",
    "STATE_INFO",
    "STATE_OF_CODE",
    "STATES",
    "STATE_CODE",
    "STATE_SEVERITY",
    "STATE_UNKNOWN",
    "NO_DATA_COLOR",
    "UNKNOWN_STATE_COLOR",
    "NO_DATA_LABEL",
    "state_rank",
    "worst_state",
    "state_color",
    "state_label",
    "hist_tag",
    "LAYER_SCALAR_METRICS",
    "layer_scalar_tag",
    "unnamed_row",
    "KINDS",
    "SEVERITIES",
    "PSEUDO_INPUT",
    "PSEUDO_LOSS",
    "PSEUDO_OPTIMIZER",
    "PSEUDO_LAYERS",
    "create_summary_metadata",
    "parse_plugin_metadata",
    "NewerFormatError",
]

PLUGIN_NAME = "neuraldbg"
# Bump on any change a reader must know about; parse_plugin_metadata refuses
# versions it does not understand instead of guessing.
FORMAT_VERSION = 1

TAG_PREFIX = "neuraldbg/"
# JSON string scalar: {"layers": [{"name": str, "type": str}, ...]}. Written at
# the first logged step and again whenever the list grows (it only grows, so a
# row index never changes meaning). Rows of every per-step tensor follow it.
TAG_LAYERS = "neuraldbg/layers"
# uint8 [L]: the worst state code of each layer at that step (see STATES).
TAG_STATES = "neuraldbg/states"
# JSON string scalar: a list of event dicts (DESIGN.md's event JSON), written at
# the step the event was confirmed; each event's own "step" is its onset.
TAG_EVENTS = "neuraldbg/events"
# JSON string scalar: {"status": ..., "root_cause": null | {...}}, written
# whenever it changes; the last value is the run's current diagnosis.
TAG_DIAGNOSIS = "neuraldbg/diagnosis"
# JSON string scalar written once: writer settings, thresholds, versions.
TAG_CONFIG = "neuraldbg/config"
# JSON string scalars, one of each per writer (docs/FORMAT.md, *Sessions*):
# {"session", "pid", "host", "start_step", "purge_step"} when a DebugWriter
# starts watching, at its start step; {"session", "last_step", "signal"} when
# it closed cleanly, at its last step. A run whose last start has no end was
# not closed (killed, or still running); a start with a purge_step hides what
# was written before it from that step on (TensorBoard's purge_step).
TAG_SESSION_START = "neuraldbg/session/start"
TAG_SESSION_END = "neuraldbg/session/end"
# Block summaries (docs/FORMAT.md): every BLOCK_ROWS consecutive written rows
# (fewer where the writer flushed or closed) binned by the heatmap's rule into
# one record per tag, at the step of the block's last row, so that a long run's
# full-range heatmap reads a fraction of its rows. int64 [5]: the step of the
# row written before the block (-1: none), the block's first and last step,
# its number of rows, and 1 for the writer's last block (its close) else 0.
TAG_BLOCK_SPAN = "neuraldbg/blocks/span"
# uint8 [L]: each layer's worst state over the block.
TAG_BLOCK_STATES = "neuraldbg/blocks/states"
BLOCK_ROWS = 8

# Per-layer statistics, one float32 [L] tensor per logged step for each metric,
# under the tag stats_tag(metric). NaN means "not measured at this step / not
# applicable to this layer"; non-finite *data* shows in the *_nonfinite counts.
# ``scale``: "log" for magnitudes (a heatmap bin keeps the value farthest from
# 1 in log), "linear" for fractions and counts (a bin keeps the maximum).
# Never reorder: a writer's rows follow this order (append new metrics).


@dataclass(frozen=True)
class MetricInfo:
    """One per-layer statistic: its name on disk, how it is drawn, what it means."""

    name: str
    scale: str  # "log" | "linear"
    label: str
    description: str


METRIC_TABLE = (
    MetricInfo("grad_norm", "log", "Gradient norm",
               "L2 norm of the layer's own parameter gradients, before clipping"),
    MetricInfo("grad_nonfinite", "linear", "Non-finite gradients",
               "count of non-finite values in those gradients"),
    MetricInfo("grad_missing", "linear", "Parameters without gradient",
               "parameters (requires_grad) that received no gradient"),
    MetricInfo("weight_norm", "log", "Weight norm", "L2 norm of the layer's own parameters"),
    MetricInfo("update_ratio", "log", "Update ratio \u2016\u0394w\u2016/\u2016w\u2016",
               "||w_t - w_{t-1}|| / ||w_{t-1}||"),
    MetricInfo("act_mean", "log", "Activation mean", "mean of the output"),
    MetricInfo("act_std", "log", "Activation std", "standard deviation of the output"),
    MetricInfo("act_absmax", "log", "Activation max |x|", "largest absolute output value"),
    MetricInfo("act_zero_frac", "linear", "Zero fraction", "fraction of exact zeros in the output"),
    MetricInfo("act_dead_frac", "linear", "Dead fraction",
               "fraction of units zero for every sample of the batch"),
    MetricInfo("act_sat_frac", "linear", "Saturated fraction",
               "fraction of outputs saturated (bounded activations only)"),
    MetricInfo("act_nonfinite", "linear", "Non-finite outputs", "count of non-finite output values"),
    # the same on the module's first input: this measures functional
    # activations (torch.relu in forward) upstream
    MetricInfo("in_zero_frac", "linear", "Input zero fraction", "fraction of exact zeros in the first input"),
    MetricInfo("in_dead_frac", "linear", "Input dead fraction",
               "fraction of units of the first input zero for every sample"),
    MetricInfo("in_nonfinite", "linear", "Non-finite inputs", "count of non-finite values in the first input"),
    MetricInfo("value", "log", "Value",
               "<loss>: loss value; <optimizer>: learning rate (first group); <input>: batch size (dim 0)"),
    MetricInfo("scale", "log", "GradScaler scale", "<optimizer>: GradScaler scale"),
    # Where a NaN/Inf is born in backward is the module whose output gradient
    # is finite while the gradient it passes on (its parameters' or its
    # input's) is not.
    MetricInfo("gout_nonfinite", "linear", "Non-finite output gradients",
               "count (or 0/1 flag) of non-finite values in the gradient w.r.t. the output"),
    # Facts of the step that only the training loop shows (training/
    # training/hooks/step_facts.py): bugs that leave the statistics above healthy.
    MetricInfo("grad_carried", "log", "Gradient not cleared",
               "norm of the gradient still left from the previous step when this step's backward began "
               "(not set to None nor zeroed since optimizer.step(): gradients accumulate across steps)"),
    MetricInfo("ran_without_grad", "linear", "Ran without autograd",
               "1 when the module ran inside the model's forward with autograd disabled (torch.no_grad())"),
    MetricInfo("opt_group", "linear", "Param group",
               "index of the optimizer's param group holding the layer's trainable parameters (the one "
               "with the lowest learning rate if several); -1: the optimizer holds none of them"),
    MetricInfo("lr", "log", "Learning rate", "learning rate of that param group"),
    MetricInfo("weight_decay", "linear", "Weight decay", "weight decay of that param group"),
    MetricInfo("momentum", "linear", "Momentum",
               "momentum of that param group (SGD, RMSprop), or Adam's first beta"),
    # What a module does to the signal, and whether its units differ (full
    # steps; docs/FORMAT.md has the exact definitions).
    MetricInfo("fwd_gain", "log", "Forward gain",
               "std of the output over std of the first input: what the module does to the signal's spread"),
    MetricInfo("bwd_gain", "log", "Backward gain",
               "norm of the gradient w.r.t. the first input over the norm of the gradient w.r.t. the output"),
    MetricInfo("unit_spread", "log", "Unit spread",
               "share of the output's spread that lies between its units at the same position "
               "(sqrt of within-position over total variance): 0 when every unit is the same"),
    MetricInfo("gout_norm", "log", "Output gradient norm",
               "L2 norm of the gradient w.r.t. the output (bwd_gain's denominator): the gradient a module "
               "receives, with or without parameters"),
    # What the diagnosis compares the loss with, and what is not a feature.
    MetricInfo("target_var", "log", "Target variance",
               "<loss>: variance of the criterion's targets (MSELoss), the loss of predicting their mean "
               "(a regression's trivial predictor)"),
    MetricInfo("input_integers", "linear", "Integer inputs",
               "<input>: 1 when the batch's dtype is an integer type (token ids, indices), 0.5 when a "
               "floating-point batch holds only integers, 0 otherwise"),
    # What the output must be able to reach (a range its last layer may not cover).
    MetricInfo("target_min", "linear", "Target minimum",
               "<loss>: the smallest of the criterion's targets (MSELoss; and floating-point "
               "targets that must lie in [0, 1]: CrossEntropyLoss, BCE)"),
    MetricInfo("target_max", "linear", "Target maximum",
               "<loss>: the largest of the criterion's targets (MSELoss; and floating-point "
               "targets that must lie in [0, 1]: CrossEntropyLoss, BCE)"),
    # Whether the weights can hold their updates (update steps; docs/FORMAT.md).
    MetricInfo("update_lost_frac", "linear", "Update rounded away",
               "fraction of the elements with a non-zero gradient that the optimizer's step left exactly "
               "unchanged: an update below the weights' precision (half an ulp), rounded away"),
    MetricInfo("update_elements", "log", "Updated elements",
               "elements with a non-zero gradient at the update step (update_lost_frac's denominator)"),
    # A loop whose watched optimizer never stepped (a run's one row, at close).
    MetricInfo("steps_missing", "linear", "Backward passes without a step",
               "<optimizer>: backward passes followed while the watched optimizer never stepped (no "
               "optimizer.step()): the run's only row, recorded at close"),
    # The classifier's trivial predictor (full steps; docs/FORMAT.md).
    MetricInfo("prior_loss", "log", "Prior loss",
               "<loss>: the loss of predicting the label frequencies (over the run so far) for every sample "
               "(CrossEntropyLoss, BCEWithLogitsLoss): a classifier that learned only them sits there"),
    # Whether the output depends on the input (full steps; docs/FORMAT.md).
    MetricInfo("sample_spread", "log", "Sample spread",
               "share of the output's spread that lies between the samples of the batch at the same position "
               "(sqrt of between-sample over total variance): 0 when every sample gives the same output"),
)
#: optional string keys of a layer entry beside "name" and "type" (docs/FORMAT.md): ``<loss>``'s
#: "squash" (what the criterion squashes its input with) and "targets" ("probabilities": its
#: floating-point targets must lie in [0, 1]), and a module's "dtype" (its parameters')
LAYER_EXTRAS = ("squash", "targets", "dtype")
METRICS = tuple(m.name for m in METRIC_TABLE)
METRIC_INFO = {m.name: m for m in METRIC_TABLE}
METRIC_INDEX = {name: i for i, name in enumerate(METRICS)}


def stats_tag(metric: str) -> str:
    """Tag under which one metric's per-step [L] tensor is stored."""
    if metric not in METRIC_INDEX:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    return f"{TAG_PREFIX}stats/{metric}"


def block_stats_tag(metric: str) -> str:
    """Tag of one metric's block summaries: float32 [L] a block, each
    layer's value of the block by the heatmap's binning rule."""
    return f"{TAG_PREFIX}blocks/{stats_tag(metric)[len(TAG_PREFIX):]}"


def hist_tag(layer: str) -> str:
    """Tag of a layer's activation histogram: a plain TensorBoard histogram
    (the Histograms and Distributions dashboards show it), not a neuraldbg tag."""
    return f"{PLUGIN_NAME}_hist/{layer}/activation"


#: The metrics that ``watch(layer_scalars_every=...)`` also writes as plain
#: scalars, one tag per module row (:func:`layer_scalar_tag`).
LAYER_SCALAR_METRICS = ("grad_norm", "update_ratio")


def layer_scalar_tag(metric: str, layer: str) -> str:
    """Tag of one layer's ``metric`` as a plain TensorBoard scalar
    (``watch(layer_scalars_every=...)``), not a neuraldbg tag: a group per
    metric in the Scalars and Time Series dashboards, which group tags by
    what comes before the first "/"."""
    return f"{PLUGIN_NAME}_{metric}/{layer}"


def unnamed_row(index: int) -> str:
    """The name of a stored row that the layer list does not name (damaged or
    truncated data): the same in the CLI, the tab and the HTML export."""
    return f"<row {int(index)}>"


def metric_of_tag(tag: str) -> str | None:
    """Inverse of stats_tag; None for tags that are not per-metric stats."""
    prefix = f"{TAG_PREFIX}stats/"
    if tag.startswith(prefix) and tag[len(prefix):] in METRIC_INDEX:
        return tag[len(prefix):]
    return None


# The one table of states: every fact about a state lives in its row, and
# every side reads it from here (the engine and its messages, the plugin's
# /meta and so the tab, the HTML export). Adding a state is one row.
# Codes are on disk: never reorder or renumber; add new states at the end.
# ``rank`` orders states for "worst state" purposes (a heatmap bin keeps the
# highest); ``kind`` is the event kind of a layer entering the state;
# ``evidence`` is the metric whose value its events report (non-finite
# values: the aspect decides, see diagnosis/engine.py).


@dataclass(frozen=True)
class StateInfo:
    """One state of a layer: how it is stored, ranked, reported and drawn."""

    code: int
    name: str
    rank: int
    severity: str
    kind: str | None  # event kind on entering the state (None: healthy)
    evidence: str | None  # metric an event of this state reports as its value
    color: str  # CSS colour in the tab and the HTML export
    label: str  # short human label


STATE_TABLE = (
    StateInfo(0, "healthy", 0, "info", None, None, "#c9dcef", "healthy"),
    StateInfo(1, "vanishing", 40, "warning", "vanishing_gradient", "grad_norm", "#9b8cff", "vanishing gradient"),
    StateInfo(2, "exploding", 60, "error", "exploding_gradient", "grad_norm", "#ff7f0e", "exploding gradient"),
    StateInfo(3, "nonfinite", 100, "error", "nonfinite", "act_nonfinite", "#d62728", "non-finite (NaN/inf)"),
    StateInfo(4, "no_gradient", 50, "error", "no_gradient", "grad_missing", "#3b3b3b", "no gradient"),
    StateInfo(5, "dead", 45, "warning", "dead_activation", "act_dead_frac", "#8c564b", "dead activations"),
    StateInfo(6, "saturated", 42, "warning", "saturated_activation", "act_sat_frac", "#c45cc4",
              "saturated activations"),
    StateInfo(7, "collapsed", 41, "warning", "activation_collapse", "act_std", "#b5892f", "collapsed activations"),
    StateInfo(8, "act_exploding", 55, "error", "activation_explosion", "act_absmax", "#f2c200",
              "exploding activation"),
    StateInfo(9, "frozen", 30, "warning", "frozen_weights", "update_ratio", "#2ca089", "frozen weights"),
    StateInfo(10, "data_anomaly", 90, "error", "data_anomaly", "act_absmax", "#e8178a", "data anomaly"),
    StateInfo(11, "loss_spike", 35, "warning", "loss_spike", "value", "#f08a7e", "loss spike"),
    StateInfo(12, "loss_plateau", 34, "warning", "loss_plateau", "value", "#9ccf6b", "loss plateau"),
    StateInfo(13, "scaler_collapse", 80, "error", "scaler_collapse", "scale", "#7b1fa2", "AMP scaler collapse"),
    StateInfo(14, "initial_loss", 33, "warning", "initial_loss", "value", "#c7a6e0", "bad initial loss"),
)
STATE_UNKNOWN = 255  # no data for this layer at this step
NO_DATA_COLOR = "#f3f4f6"  # STATE_UNKNOWN: nothing measured
UNKNOWN_STATE_COLOR = "#ff00ff"  # a code this version does not know (a newer writer)
NO_DATA_LABEL = "no data"

STATE_INFO = {s.name: s for s in STATE_TABLE}
STATE_OF_CODE = {s.code: s for s in STATE_TABLE}
STATES = tuple(s.name for s in STATE_TABLE)
STATE_CODE = {s.name: s.code for s in STATE_TABLE}
STATE_SEVERITY = {s.name: s.severity for s in STATE_TABLE}
_RANK = {s.code: s.rank for s in STATE_TABLE}
_RANK[STATE_UNKNOWN] = -1


def state_rank(code: int) -> int:
    """Severity rank of a state code (higher is worse; unknown is lowest)."""
    return _RANK.get(int(code), -1)


def worst_state(codes) -> int:
    """The worst of an iterable of state codes (STATE_UNKNOWN when empty)."""
    worst = STATE_UNKNOWN
    for code in codes:
        if state_rank(code) > state_rank(worst):
            worst = int(code)
    return worst


def state_color(code: int) -> str:
    """The colour of a stored state code (no data, or unknown to this version, included)."""
    if int(code) == STATE_UNKNOWN:
        return NO_DATA_COLOR
    info = STATE_OF_CODE.get(int(code))
    return info.color if info is not None else UNKNOWN_STATE_COLOR


def state_label(code: int) -> str:
    """The label of a stored state code ("no data", or "state N" for an unknown code)."""
    if int(code) == STATE_UNKNOWN:
        return NO_DATA_LABEL
    info = STATE_OF_CODE.get(int(code))
    return info.label if info is not None else f"state {int(code)}"


# Event kinds and severities of the public contract (shared/DESIGN.md).
KINDS = (
    "vanishing_gradient",
    "exploding_gradient",
    "nonfinite",
    "dead_activation",
    "saturated_activation",
    "no_gradient",
    "frozen_weights",
    "activation_collapse",
    "activation_explosion",
    "data_anomaly",
    "loss_spike",
    "loss_plateau",
    "scaler_collapse",
    "initial_loss",
)
SEVERITIES = ("info", "warning", "error")

PSEUDO_INPUT = "<input>"
PSEUDO_LOSS = "<loss>"
PSEUDO_OPTIMIZER = "<optimizer>"
PSEUDO_LAYERS = (PSEUDO_INPUT, PSEUDO_LOSS, PSEUDO_OPTIMIZER)


def create_summary_metadata(content: dict | None = None) -> summary_pb2.SummaryMetadata:
    """SummaryMetadata for a neuraldbg tag.

    Sets plugin name, our JSON content with the format version, and the
    TENSOR data class (without it TensorBoard silently hides the series).
    """
    payload = {"version": FORMAT_VERSION}
    if content:
        payload.update(content)
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME,
            content=json.dumps(payload, sort_keys=True).encode("utf-8"),
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


class NewerFormatError(ValueError):
    """Data written in a format version newer than FORMAT_VERSION."""


# A summary's metadata content is a few dozen bytes; more is not ours.
_MAX_METADATA_BYTES = 4096


def parse_plugin_metadata(content: bytes) -> dict:
    """Parse plugin_data.content written by create_summary_metadata.

    Raises NewerFormatError (a ValueError) for a newer format version, and
    ValueError for content that is not ours.
    """
    if len(content) > _MAX_METADATA_BYTES:
        raise ValueError(f"neuraldbg metadata of {len(content)} bytes is not ours")
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"neuraldbg metadata is not UTF-8: {e}") from None
    try:
        payload = json.loads(content) if content else {}
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"neuraldbg metadata is not JSON: {type(e).__name__}") from None
    if not isinstance(payload, dict):
        raise ValueError("neuraldbg metadata is not a JSON object")
    version = payload.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        shown = version if isinstance(version, (int, float, type(None))) else type(version).__name__
        raise ValueError(f"neuraldbg metadata has no valid version: {str(shown)[:40]}")
    if version > FORMAT_VERSION:
        raise NewerFormatError(
            f"neuraldbg format version {str(version)[:40]} is newer than this reader "
            f"({FORMAT_VERSION}); upgrade tb_neuraldbg"
        )
    return payload
