"""The single source of truth for the neuraldbg on-disk format.

Plugin name, format version, tag names, metric (column) names, state codes,
and the build/parse of ``SummaryMetadata``. Everything that writes or reads
neuraldbg data imports its names from here; docs/FORMAT.md describes the same
thing for other tools.
"""

from __future__ import annotations

import json

from tensorboard.compat.proto import summary_pb2

__all__ = [
    "PLUGIN_NAME",
    "FORMAT_VERSION",
    "TAG_PREFIX",
    "TAG_LAYERS",
    "TAG_STATES",
    "TAG_EVENTS",
    "TAG_DIAGNOSIS",
    "TAG_CONFIG",
    "METRICS",
    "METRIC_INDEX",
    "stats_tag",
    "metric_of_tag",
    "STATES",
    "STATE_CODE",
    "STATE_SEVERITY",
    "STATE_UNKNOWN",
    "state_rank",
    "worst_state",
    "KINDS",
    "SEVERITIES",
    "PSEUDO_INPUT",
    "PSEUDO_LOSS",
    "PSEUDO_OPTIMIZER",
    "PSEUDO_LAYERS",
    "create_summary_metadata",
    "parse_plugin_metadata",
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

# Per-layer statistics, one float32 [L] tensor per logged step for each metric,
# under the tag stats_tag(metric). NaN means "not measured at this step / not
# applicable to this layer"; non-finite *data* shows in the *_nonfinite counts.
METRICS = (
    "grad_norm",  # L2 norm of the layer's own parameter gradients, before clipping
    "grad_nonfinite",  # count of non-finite values in those gradients
    "grad_missing",  # parameters (requires_grad) that received no gradient
    "weight_norm",  # L2 norm of the layer's own parameters
    "update_ratio",  # ||w_t - w_{t-1}|| / ||w_{t-1}||
    "act_mean",  # output activation statistics
    "act_std",
    "act_absmax",
    "act_zero_frac",  # fraction of exact zeros in the output
    "act_dead_frac",  # fraction of units zero for every sample of the batch
    "act_sat_frac",  # fraction saturated (bounded activations only)
    "act_nonfinite",  # count of non-finite output values
    "in_zero_frac",  # the same on the module's first input: this measures
    "in_dead_frac",  # functional activations (torch.relu in forward) upstream
    "in_nonfinite",
    "value",  # <loss>: loss value; <optimizer>: learning rate (first group)
    "scale",  # <optimizer>: GradScaler scale
    # count (or 0/1 flag) of non-finite values in the gradient w.r.t. the
    # module's output, seen by a tensor hook during backward: where a NaN/Inf
    # is born in backward is the module whose output gradient is finite while
    # the gradient it passes on (its parameters' or its input's) is not.
    "gout_nonfinite",
)
METRIC_INDEX = {name: i for i, name in enumerate(METRICS)}


def stats_tag(metric: str) -> str:
    """Tag under which one metric's per-step [L] tensor is stored."""
    if metric not in METRIC_INDEX:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    return f"{TAG_PREFIX}stats/{metric}"


def metric_of_tag(tag: str) -> str | None:
    """Inverse of stats_tag; None for tags that are not per-metric stats."""
    prefix = f"{TAG_PREFIX}stats/"
    if tag.startswith(prefix) and tag[len(prefix):] in METRIC_INDEX:
        return tag[len(prefix):]
    return None


# State codes stored in TAG_STATES, in order of increasing severity rank for
# "worst state" purposes (a heatmap bin keeps the highest rank). Never reorder
# or renumber: codes are on disk. Add new states at the end with their rank.
# (code, name, rank, severity)
_STATE_TABLE = (
    (0, "healthy", 0, "info"),
    (1, "vanishing", 40, "warning"),  # gradient
    (2, "exploding", 60, "error"),  # gradient
    (3, "nonfinite", 100, "error"),  # gradient or activation or value
    (4, "no_gradient", 50, "error"),
    (5, "dead", 45, "warning"),  # activation
    (6, "saturated", 42, "warning"),  # activation
    (7, "collapsed", 41, "warning"),  # activation std ~ 0
    (8, "act_exploding", 55, "error"),  # activation
    (9, "frozen", 30, "warning"),  # weights never change
    (10, "data_anomaly", 90, "error"),  # <input>
    (11, "loss_spike", 35, "warning"),  # <loss>
    (12, "loss_plateau", 34, "warning"),  # <loss>
    (13, "scaler_collapse", 80, "error"),  # <optimizer>
    (14, "initial_loss", 33, "warning"),  # <loss>
)
STATES = tuple(name for _, name, _, _ in _STATE_TABLE)
STATE_CODE = {name: code for code, name, _, _ in _STATE_TABLE}
STATE_SEVERITY = {name: sev for _, name, _, sev in _STATE_TABLE}
STATE_UNKNOWN = 255  # no data for this layer at this step
_RANK = {code: rank for code, _, rank, _ in _STATE_TABLE}
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


def parse_plugin_metadata(content: bytes) -> dict:
    """Parse plugin_data.content written by create_summary_metadata.

    Raises ValueError for content that is not ours or from a newer format.
    """
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"neuraldbg metadata is not UTF-8: {e}") from None
    try:
        payload = json.loads(content) if content else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"neuraldbg metadata is not JSON: {e}") from None
    if not isinstance(payload, dict):
        raise ValueError("neuraldbg metadata is not a JSON object")
    version = payload.get("version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"neuraldbg metadata has no valid version: {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"neuraldbg format version {version} is newer than this reader "
            f"({FORMAT_VERSION}); upgrade tb_neuraldbg"
        )
    return payload
