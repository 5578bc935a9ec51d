"""Every number the diagnosis uses, in one documented, overridable object.

Defaults start from published detectors (AUTOTRAINER, smdebug, TheDeepChecker)
and are calibrated so that healthy training (MLP, CNN+BatchNorm, ResNet,
Transformer, LSTM; SGD and Adam; warmup/decay, dropout, weight decay, small
noisy batches) raises nothing. Most rules are *relative*: a layer against its
own recent history, or against the other layers at the same step, so they do
not depend on the loss scale or the model's size; absolute floors only guard
the relative rules against noise.

Override any field: ``Thresholds(dead_frac=0.9)`` or
``dataclasses.replace(Thresholds(), persist_steps=5)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

__all__ = ["Thresholds"]


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of the per-layer states, the hysteresis and the root cause.

    Hysteresis (counts are *measured* steps: a metric that is NaN at a step,
    e.g. dead fractions measured every Nth step, neither confirms nor breaks
    a run):

    - ``persist_steps``: consecutive steps a failing state must hold before
      its event is emitted (the event's step is the first of them).
    - ``persist_nonfinite``: the same for non-finite values (one is enough:
      a NaN is never healthy).
    - ``persist_recover``: consecutive healthy steps before a recovery
      (an info event); longer than entering, so a state does not flap.
    """

    persist_steps: int = 3
    persist_nonfinite: int = 1
    persist_recover: int = 5
    #: vanishing is slow and harmless for a few steps (a zero-initialised
    #: layer, e.g. a ResNet block's last BatchNorm, blocks the gradient until
    #: its first updates): confirm over more steps.
    persist_vanishing: int = 10
    #: ... and from a layer's first measurement longer still: gradients that
    #: vanish from the first step are often held back by a zero-initialised
    #: layer after it (ReZero, adaLN-Zero with a zero-initialised output
    #: layer, Fixup), which lets them through within its first tens of
    #: updates; a real one lasts (its onset stays the first step).
    persist_vanishing_born: int = 30

    # --- running references -------------------------------------------------
    #: weight of the newest value in the per-layer exponential averages of
    #: log-magnitudes (only healthy values feed them).
    ema_alpha: float = 0.1
    #: measurements of a layer before its own-history rules apply.
    history_min: int = 5

    # --- gradients -----------------------------------------------------------
    #: vanishing: the layer's gradient norm is below this fraction of the
    #: largest gradient norm among the layers after it (closer to the loss),
    #: both raw and relative to the weight norm (AUTOTRAINER uses 1e-3 for
    #: first/last). A layer's gradient cannot vanish if nothing lies after it.
    vanish_ratio: float = 1e-3
    #: ... and the ratio must recover above this fraction to leave the state.
    vanish_exit_ratio: float = 3e-3
    #: exploding against its own history: norm above ``explode_growth`` x its
    #: running average AND above ``explode_vs_max`` x the largest healthy norm
    #: it ever had (so a late noisy batch after convergence is not an explosion).
    explode_growth: float = 100.0
    explode_vs_max: float = 10.0
    #: A single step above explode_vs_max x the largest norm a layer ever had
    #: is a burst: the root cause when a failure follows within lr_window
    #: steps (a divergence, a loss spike), else one info event (a clip doing
    #: its job).
    #: exploding against the other layers at the same step (born exploding):
    #: norm above this multiple of the median layer, raw and relative to weights.
    explode_cross: float = 1e3

    # --- activations ---------------------------------------------------------
    #: dead: fraction of units that are zero for every sample of the batch
    #: (smdebug: > 50 % of units almost never active; AUTOTRAINER: >= 70 %).
    dead_frac: float = 0.75
    dead_exit_frac: float = 0.5
    #: ... judged on batches of at least this many samples: with fewer, a
    #: sparse layer's units are zero "for every sample" by chance (an output
    #: that is exactly zero everywhere is dead whatever the batch)
    dead_min_batch: int = 8
    #: saturated: fraction of saturated outputs of a bounded activation.
    sat_frac: float = 0.6
    sat_exit_frac: float = 0.4
    #: collapsed: std <= collapse_rel x max|x| (a constant output), or a std
    #: that fell below vanish_ratio x its own running average (an output that
    #: stopped varying, e.g. weights that collapsed to ~0).
    collapse_rel: float = 1e-6
    #: activation explosion: RMS above this multiple of the previous row's
    #: RMS (the layer amplifies its input), or of its own running average and
    #: ``act_explode_vs_max`` x its largest healthy RMS, or ratio x vs_max
    #: (1000x) the batch's RMS (compounded amplification), and always above
    #: the absolute floor ``act_explode_floor`` (normalisation layers
    #: legitimately amplify tiny inputs back to ~1).
    act_explode_ratio: float = 100.0
    act_explode_floor: float = 100.0
    act_explode_vs_max: float = 10.0

    # --- weights ---------------------------------------------------------------
    #: frozen: no update (update ratio exactly 0, an unchanged weight norm,
    #: a param group at lr 0, or not held by the optimizer) while the layer
    #: has a gradient, for this many measured steps; with no optimizer
    #: watched, only while other layers move (a micro-batch moves nothing).
    frozen_steps: int = 5
    #: the optimizer stops moving the model (``frozen`` on <optimizer>, for
    #: ``frozen_steps`` measured steps) while gradients flow: the model's
    #: median update ratio ||dw||/||w|| (healthy ~1e-3) below
    #: ``update_negligible`` (under float32's resolution: lr=1e-9), or fallen
    #: to ``update_collapse`` x its peak in the run, its ratio to the gradient
    #: norm (the effective rate) too (a per-epoch schedule stepped per batch;
    #: the tenfold drops of a step schedule, and gradients that shrink as the
    #: loss converges, stay far above it).
    update_negligible: float = 1e-7
    update_collapse: float = 1e-3
    #: ... counted only when every group's rate is at most this (updates of
    #: exactly 0 too: rounded away); at a larger rate, tiny updates are the
    #: gradients' doing (their own rules), and none at all the optimizer
    #: doing nothing (gradients cleared before ``step()``).
    lr_negligible: float = 1e-6
    #: the whole model barely moves: its median update ratio stayed at most
    #: this (a hundredth of the healthy ~1e-3) at every step of the run. A
    #: loss that does not fall then is the rate's, not the labels' (the
    #: model was never let to learn); fine-tuning at a tiny rate on purpose
    #: sits there too, with a loss that falls or starts low (no plateau).
    update_small: float = 1e-5

    # --- <input> ---------------------------------------------------------------
    #: a batch whose std or max|x| differs from the running median of recent
    #: batches by more than this factor (in either direction) is anomalous.
    input_ratio: float = 10.0
    #: batches of history before the out-of-distribution rule applies.
    input_history_min: int = 5
    #: window of recent batches the running medians use.
    input_window: int = 64
    #: a first batch with RMS above this (or below its inverse) is
    #: unnormalised; blamed when the first layer fails from the first step.
    input_unnormalised: float = 30.0

    # --- <loss> ----------------------------------------------------------------
    #: spike: the loss exceeds spike_ratio x the maximum of the recent window
    #: and spike_median x its median (both, so heavy-tailed batch losses are
    #: not spikes), for ``persist_steps`` steps (one outlier batch is not a
    #: divergence).
    spike_ratio: float = 2.0
    spike_median: float = 5.0
    loss_window: int = 64
    loss_history_min: int = 10
    #: plateau: a flat span of at least ``plateau_min_steps`` steps with a
    #: learning rate > 0 that reaches the present, in which no median of
    #: ``plateau_window`` losses fell by ``plateau_min_drop`` (relative) below
    #: the level at the span's start (its onset: where the loss stopped
    #: falling); a failure when the span is the whole run (runs that start at
    #: step 0 only: a resumed run may start converged), or, with K classes
    #: known, when the loss is still within that fraction of ln K (chance).
    plateau_min_steps: int = 300
    plateau_window: int = 50
    plateau_min_drop: float = 0.05
    #: ... and a loss that rose above (1 + plateau_max_rise) x the level where
    #: the flat span would start is diverging, not on a plateau. The same
    #: factor makes a climb (a loss_spike without a spike): the last two
    #: block medians (of 10 losses) at (1 + plateau_max_rise) x the best one
    #: before them, having given back half of what the loss gained since its
    #: first block.
    plateau_max_rise: float = 1.0
    #: never learned: a run from step 0 whose level (the median of
    #: ``plateau_window`` losses) never fell further below its first level than
    #: this fraction of it, over at least the plateau's span, is on a plateau
    #: from the start even if it drifts down inside the band (a model that
    #: cannot learn still fits a little noise). Twice ``plateau_min_drop``:
    #: the band of "stopped falling" is for a span the loss reached after
    #: falling; a whole run that fell by less than twice that learned nothing
    #: worth the name (benchmarks/heldout: the healthy runs and the fixed
    #: twins fall by more, or within their first losses, which
    #: ``_fell_first`` sees; docs/diagnosis.md).
    plateau_never_drop: float = 0.10
    #: initial loss for K-class cross-entropy, at step 0: loss0 above ln K +
    #: max(initial_loss_abs, initial_loss_rel x ln K), or negative. Below ln K
    #: is what a pretrained model gives, so it is not flagged.
    initial_loss_abs: float = 1.0
    initial_loss_rel: float = 0.5

    # --- <optimizer> -----------------------------------------------------------
    #: GradScaler collapse: consecutive scale decreases (each one a skipped
    #: step with inf/NaN gradients) that take the scale this many halvings
    #: (2**12 = 4096x) below where it worked, counted from 2**16 at most.
    scaler_backoffs: int = 12
    #: a learning-rate rise by at least this factor (after a few steps of a
    #: slowly varying rate: not the first steps of a warmup from ~0) within
    #: ``lr_window`` steps before a failure makes ``<optimizer>`` the root cause.
    lr_jump_factor: float = 4.0
    lr_window: int = 30
    #: update ratio ||dw||/||w|| (healthy ~1e-3; Adam's first steps on a small
    #: layer reach ~0.5) above which, in most layers at once, the learning rate
    #: is blamed for a failure that starts within ``lr_window`` steps after.
    update_ratio_high: float = 1.0
    #: ... unless the first step, before any update, already had gradients
    #: above this multiple of their weights' norm (||g||/||w||; ~0.01..1 at a
    #: standard initialisation) or activations above ``act_explode_floor``:
    #: then the updates are large because of them (the layer, or <input> for
    #: unnormalised inputs), not because of the rate.
    grad_weight_extreme: float = 100.0

    # --- root cause --------------------------------------------------------------
    #: failures whose possible onset is within this many steps of the earliest
    #: onset are ties, broken by the propagation rules (see rootcause.py). 0:
    #: a consequence one step later (NaN weights after a NaN gradient) must
    #: not win over its cause.
    tie_window: int = 0

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or v < 0:
                raise ValueError(f"Thresholds.{f.name} must be a number >= 0, got {v!r}")
        if min(self.persist_steps, self.persist_nonfinite, self.persist_recover,
               self.persist_vanishing, self.persist_vanishing_born, self.frozen_steps, self.scaler_backoffs) < 1:
            raise ValueError("Thresholds.persist_* must be >= 1")

    def to_dict(self) -> dict:
        """Plain dict (for the run's config summary)."""
        return asdict(self)
