"""The ``<loss>`` aspect: a non-finite loss, spikes, a loss that climbs,
plateaus and the initial loss of a K-class cross-entropy."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, Window, blank, nonfinite_before

__all__ = ["Loss", "Plateau"]

_M = METRIC
#: losses per block of the plateau rule (a block median tames batch noise)
_PLATEAU_BLOCK = 10
#: full measurements in a row of a probability distribution fed to the loss
#: before it is a finding (a softmax's mean is 1/K at every one of them; a
#: layer of logits cannot keep it by chance)
_PROBS_MEASURED = 3
#: relative tolerance of "the mean is 1/K" (float32/bfloat16 sums of the rows)
_PROBS_TOL = 1e-3
#: how far outside [0, 1] a probability target must lie to be outside it
#: (not a float16 rounding of 1): no probability is 1.001 or -0.001
_TARGETS_TOL = 1e-3
#: module types whose output lies in [0, 1] by construction (a squashing)
_UNIT_RANGE = ("Sigmoid", "Softmax", "Hardsigmoid")
#: the range of a module's output by its type (activations without a
#: parameter that moves it: Hardtanh's and ELU's are the user's)
_OUT_RANGE = {"ReLU": (0.0, math.inf), "ReLU6": (0.0, 6.0), "Softplus": (0.0, math.inf),
              "Sigmoid": (0.0, 1.0), "Hardsigmoid": (0.0, 1.0), "Softmax": (0.0, 1.0),
              "Tanh": (-1.0, 1.0), "Softsign": (-1.0, 1.0)}


class Loss(Aspect):
    """The <loss> row, four hysteresis aspects: ``loss`` (non-finite, spike),
    ``plateau``, ``init`` (the initial loss against ln K) and ``targets``
    (targets outside the criterion's domain).

    ``num_classes`` (K of a K-class cross-entropy, if known) may be set until
    the first loss is seen.
    """

    EVIDENCE = {"loss": ("value", "value"), "plateau": ("value", None), "init": ("value", None),
                "targets": ("target_min", None)}

    def __init__(self, thresholds: Thresholds, num_classes: int | None = None):
        super().__init__()
        self.t = thresholds
        self.num_classes = num_classes
        self.hist = Window(thresholds.loss_window)  # recent non-spike losses
        self.loss_min = math.inf
        self.first_step = None  # of the run (any row), for the plateau rule
        self.first_loss = None  # (step, value)
        self.improved_step = None  # the first step with a loss clearly below the first one
        self.doubled_step = None  # the first step with a loss above twice the first one
        self.init_done = False
        self.init_negative = False  # the first loss was below 0, the floor of every squashing criterion
        self.plateau = Plateau(thresholds)
        # the variance of a regression's targets (MSELoss), measured on full
        # steps: the loss of predicting their mean (the trivial predictor)
        self.target_var = Window(thresholds.loss_window)
        # a classifier's: the loss of predicting the label frequencies
        # (prior_loss, docs/FORMAT.md), which one that learned only them sits at
        self.prior_loss = Window(thresholds.loss_window)
        # Recent steps whose batch was empty (the <input> row's batch size 0;
        # a mean over it is NaN): the message of a non-finite loss says so.
        self.empty_steps = deque(maxlen=64)
        # The model's output fed to a K-class cross-entropy is a probability
        # distribution (every value in [0, 1], rows that sum to 1: a mean of
        # exactly 1/K, on the loss's gradient path): the loss applies
        # log-softmax again and cannot fall below ln(1 + (K-1)/e). The first
        # step of that fingerprint, and how many full measurements in a row.
        self.probs_from = -1
        self.probs_count = 0
        # The output fed to a regression's loss cannot reach its targets: the
        # module feeding the loss is bounded by its type (a ReLU: never below
        # 0) and the targets lie beyond that bound by at least their own
        # standard deviation. Its first step, the full measurements in a row,
        # and the last ones' (layer, lo, hi, target_min, target_max).
        self.reach_from = -1
        self.reach_count = 0
        self.reach = None
        # another optimizer trains part of the model that computes the loss
        # (rows the watched one does not hold moved all the same: a GAN's
        # discriminator, an actor-critic's critic), set by the classifier
        self.contested = False

    def below_first(self) -> bool:
        """The recent losses' median is below the (finite) first loss."""
        if self.first_loss is None or not math.isfinite(self.first_loss[1]) or len(self.hist) < self.t.loss_history_min:
            return False
        med = self.hist.median()
        return bool(math.isfinite(med) and med < self.first_loss[1])

    def beats_trivial(self) -> bool:
        """Whether the recent losses are clearly below (by plateau_min_drop)
        the trivial predictor's loss (the targets' variance under MSE, the
        label frequencies' entropy): a prediction that beats every constant
        still depends on the input."""
        trivial = self.plateau.trivial
        if not trivial > 0 or len(self.hist) < self.t.loss_history_min:
            return False
        return bool(self.hist.median() < (1.0 - self.t.plateau_min_drop) * trivial)

    def fell_clearly(self) -> bool | None:
        """Whether the loss fell clearly below its first value (by
        plateau_min_drop: ``improved_step``); None while its first value is
        unknown or not positive."""
        if self.first_loss is None or not self.first_loss[1] > 0:
            return None
        return self.improved_step is not None

    def classify(self, step: int, row, lr: float, plateau_conf) -> dict:
        """{"loss", "plateau", "init", "targets": (raw, onset | None)}; ``lr``:
        the highest learning rate of any group (NaN: unknown);
        ``plateau_conf``: the confirmed plateau states."""
        if self.first_step is None:
            self.first_step = step
        n = self.kinds.n
        out = {"loss": (blank(n), None), "plateau": (blank(n), None), "init": (blank(n), None),
               "targets": (blank(n), None)}
        j = self.kinds.input_index
        if j >= 0 and row[j, _M["value"]] == 0:
            self.empty_steps.append(step)
        i = self.kinds.loss_index
        if i >= 0:
            self._loss(step, row[i], lr, plateau_conf[i] == STATE["loss_plateau"], out)
            self._targets(row[i], out["targets"][0])
            self._probabilities(step, row, out)
            if self.probs_count < _PROBS_MEASURED:
                self._out_of_reach(step, row, out)
        return out

    def squash_classes(self) -> int | None:
        """K of the squashing the loss applies to its input: 2 for a
        log-sigmoid (a logit against an implicit 0), else the K of a K-class
        cross-entropy (None: unknown)."""
        return 2 if self.kinds.squash == "sigmoid" else self.num_classes

    def probs_floor(self) -> float:
        """The lowest loss a criterion that squashes its input itself gives on
        inputs in [0, 1] (the target's at 1, the others at 0): ln(1 + (K-1)/e)
        with K of ``squash_classes`` (ln(1 + 1/e) = 0.313 for a log-sigmoid,
        whatever the targets); NaN without K."""
        k = self.squash_classes()
        return math.log1p((k - 1) / math.e) if k is not None and k >= 2 else math.nan

    def _probabilities(self, step, row, out):
        """The plateau of a loss fed probabilities (see ``probs_from``): a
        finding from the fingerprint's first step once it held at
        ``_PROBS_MEASURED`` full measurements in a row while no loss went
        below the floor it implies (tests/test_diagnosis_loss_origin.py)."""
        i, k = self.kinds.loss_index, self.squash_classes()
        f = i - 1
        if k is None or k < 2 or f < 0 or not self.kinds.is_mod[f]:
            return
        mean, top, gout = row[f, _M["act_mean"]], row[f, _M["act_absmax"]], row[f, _M["gout_norm"]]
        if math.isfinite(mean) and math.isfinite(top):
            # a distribution over the K classes (its mean is 1/K: a softmax,
            # even a functional one) fed to a criterion that applies
            # log-softmax itself (not NLLLoss after a log: the demo's
            # amp_scaler), or a module that squashes into [0, 1] by its type
            # fed to a criterion known to squash again
            dist = self.kinds.squash == "softmax" and abs(mean * k - 1.0) <= _PROBS_TOL
            typed = self.kinds.squash is not None and self.kinds.types[f] in _UNIT_RANGE and mean >= 0
            fp = (dist or typed) and top <= 1.0 + _PROBS_TOL and gout > 0
            self.probs_count = self.probs_count + 1 if fp else 0
            self.probs_from = (self.probs_from if self.probs_from >= 0 else step) if fp else -1
        if self.probs_count < _PROBS_MEASURED:
            return
        raw = out["plateau"][0]
        if self.loss_min < self.probs_floor():  # the loss went below it: not probabilities
            raw[i] = HEALTHY
            return
        raw[i] = STATE["loss_plateau"]
        onset = np.full(self.kinds.n, -1, np.int64)
        onset[i] = self.probs_from
        out["plateau"] = (raw, onset)

    def _targets(self, r, raw) -> None:
        """Targets outside the criterion's domain: a criterion that takes
        probabilities (``RowKinds.targets``: CrossEntropyLoss, BCE) given
        a target below 0 or above 1 (labels in {-1, 1}, a mask in 0..255,
        the logits passed as the target). Its loss has no floor there: it
        falls below 0 without bound, driving the logits to infinity, and no
        rate or architecture fixes that (tests/test_diagnosis_targets.py)."""
        lo, hi = float(r[_M["target_min"]]), float(r[_M["target_max"]])
        if self.kinds.targets != "probabilities" or not (math.isfinite(lo) and math.isfinite(hi)):
            return
        out = lo < -_TARGETS_TOL or hi > 1.0 + _TARGETS_TOL
        raw[self.kinds.loss_index] = STATE["data_anomaly"] if out else HEALTHY

    def _out_of_reach(self, step, row, out):
        """A regression whose output cannot reach its targets (see
        ``reach_from``): a finding from the fingerprint's first step once it
        held at ``_PROBS_MEASURED`` full measurements in a row
        (tests/test_diagnosis_squash.py)."""
        i = self.kinds.loss_index
        f = i - 1
        if f < 0 or not self.kinds.is_mod[f] or self.kinds.types[f] not in _OUT_RANGE:
            return
        tmin, tmax, tv = (float(row[i, _M[k]]) for k in ("target_min", "target_max", "target_var"))
        if math.isfinite(tmin) and math.isfinite(tmax) and math.isfinite(tv) and tv > 0:
            lo, hi = _OUT_RANGE[self.kinds.types[f]]
            # beyond the bound by the targets' own spread: not noise at the
            # bound (a count's rounding), a part of the targets out of reach
            fp = max(lo - tmin, tmax - hi) >= math.sqrt(tv) and row[f, _M["gout_norm"]] > 0
            self.reach_count = self.reach_count + 1 if fp else 0
            self.reach_from = (self.reach_from if self.reach_from >= 0 else step) if fp else -1
            if fp:
                self.reach = (self.kinds.names[f], self.kinds.types[f], lo, hi, tmin, tmax)
        if self.reach_count < _PROBS_MEASURED:
            return
        raw = out["plateau"][0]
        raw[i] = STATE["loss_plateau"]
        onset = np.full(self.kinds.n, -1, np.int64)
        onset[i] = self.reach_from
        out["plateau"] = (raw, onset)

    def _loss(self, step, r, lr, in_plateau, out):
        t, i = self.t, self.kinds.loss_index
        v = float(r[_M["value"]])
        tv = float(r[_M["target_var"]])
        if math.isfinite(tv) and tv > 0:
            self.target_var.append(tv)
            self.plateau.trivial, self.plateau.trivial_of = self.target_var.median(), "mean"
        pl = float(r[_M["prior_loss"]])
        if math.isfinite(pl) and pl > 0 and not len(self.target_var):
            self.prior_loss.append(pl)
            self.plateau.trivial, self.plateau.trivial_of = self.prior_loss.median(), "frequencies"
        raw_loss = out["loss"][0]
        if r[_M["act_nonfinite"]] > 0 or math.isinf(v):
            raw_loss[i] = STATE["nonfinite"]
            return
        if math.isnan(v):
            return
        # initial loss of K-class cross-entropy (one check, at the first loss
        # of a run that starts at step 0: a resumed run is not at its init)
        if not self.init_done:
            self.init_done = True
            self.first_loss = (step, v)
            k = self.num_classes
            if k is not None and k >= 2 and step == 0:
                lnk = math.log(k)
                tol = max(t.initial_loss_abs, t.initial_loss_rel * lnk)
                # far above: confident wrong logits. Below ln K is what a
                # pretrained model gives; only a negative value is impossible
                bad = v > lnk + tol or v < 0
                out["init"][0][i] = STATE["initial_loss"] if bad else HEALTHY
            elif step == 0 and self.kinds.squash is not None:
                # a criterion that squashes its input itself (log-sigmoid,
                # log-softmax) is never negative on targets in its domain
                # ([0, 1], a distribution): a negative first loss says the
                # targets lie outside it, and the loss then falls without
                # bound (tests/test_diagnosis_plateau.py)
                out["init"][0][i] = STATE["initial_loss"] if v < 0 else HEALTHY
            self.init_negative = v < 0
        first = self.first_loss[1]
        if self.improved_step is None and first > 0 and v < (1.0 - t.plateau_min_drop) * first:
            self.improved_step = step
        if self.doubled_step is None and first > 0 and v > (1.0 + t.plateau_max_rise) * first:
            self.doubled_step = step
        # spike: far above both the maximum and the median of recent losses
        hist = self.hist
        spike = False
        if len(hist) >= t.loss_history_min and self.loss_min > 0:  # ratios need positive losses
            spike = v > t.spike_ratio * hist.max() and v > t.spike_median * hist.median()
        raw_loss[i] = STATE["loss_spike"] if spike else HEALTHY
        if not spike:
            hist.append(v)
            self.loss_min = min(self.loss_min, v)
        # climbing: a divergence that no single step shows against a window
        # that climbs with it (judged on blocks of losses, see Plateau.climb).
        # Its "twice the best level" is a ratio, as the spike's, so it needs
        # a loss never seen at or below 0 (a density's negative log-likelihood
        # has no floor at 0: a mixture density network's heavy-tailed losses
        # dip below 0 and back, tests/test_diagnosis_rules.py)
        if self.plateau.climb_onset is not None and self.loss_min > 0:
            raw_loss[i] = STATE["loss_spike"]
            onset = np.full(self.kinds.n, -1, np.int64)
            onset[i] = self.plateau.climb_onset
            out["loss"] = (raw_loss, onset)
        # plateau: judged on blocks of losses at steps with a learning rate > 0
        # (a frozen run is not stuck), and while no other optimizer trains a
        # part of the model against (or beside) the watched one: a GAN's
        # generator loss is the discriminator's judgement, which it keeps
        # level by learning too, not a level the generator failed to lower
        # (tests/test_diagnosis_plateau.py)
        p = self.plateau
        if (lr > 0 or math.isnan(lr)) and not self.contested:
            p.add(step, v, in_plateau, self.first_step, self.num_classes)
        if p.state is not None:
            out["plateau"][0][i] = p.state
            if p.state == STATE["loss_plateau"]:
                onset = np.full(self.kinds.n, -1, np.int64)
                onset[i] = p.onset
                out["plateau"] = (out["plateau"][0], onset)

    def final(self, plateau_conf) -> dict:
        """{"plateau": (raw, onset)} at the run's end: the plateau of a run
        shorter than plateau_min_steps, or a run that ended worse than the
        trivial predictor ({} when it has no plateau to report)."""
        i = self.kinds.loss_index
        if i < 0 or plateau_conf[i] != HEALTHY or self.contested:
            return {}
        code = self.plateau.decide(False, True, self.first_step, self.num_classes)
        if code != STATE["loss_plateau"]:
            return {}
        raw = blank(self.kinds.n)
        raw[i] = code
        onset = np.full(self.kinds.n, -1, np.int64)
        onset[i] = self.plateau.onset
        return {"plateau": (raw, onset)}

    def event_fields(self, name, kind, tr, row):
        failing = tr.to_code != HEALTHY
        value, before, extra = tr.value, tr.value_before, {}
        if name == "loss" and kind == "loss_spike" and failing and self.plateau.climb_onset is not None:
            p = self.plateau
            extra["reason"] = "climb"
            return p.climb_level, p.climb_best, extra
        if name == "loss" and kind == "nonfinite":
            extra["side"] = "loss"
            if failing and tr.onset in self.empty_steps:
                extra["empty_batch"] = True
            prev = nonfinite_before(row, tr.index)
            if prev >= 0:
                extra["from_layer"] = self.kinds.names[prev]
        elif name == "plateau" and failing and self.probs_count >= _PROBS_MEASURED:
            # the cause names the squashing applied twice: the advice differs
            cause = "sigmoid" if self.kinds.squash == "sigmoid" else "probabilities"
            extra.update(cause=cause, num_classes=self.squash_classes(), floor=self.probs_floor(),
                         squash=self.kinds.squash, layer=self.kinds.names[self.kinds.loss_index - 1])
            before, value = self.first_loss[1] if self.first_loss else math.nan, self.hist.median()
        elif name == "plateau" and failing and self.reach_count >= _PROBS_MEASURED:
            layer, kind, lo, hi, tmin, tmax = self.reach
            extra.update(cause="out_of_reach", layer=layer, type=kind, out_min=lo, out_max=hi,
                         target_min=tmin, target_max=tmax)
            before, value = self.first_loss[1] if self.first_loss else math.nan, self.hist.median()
        elif name == "plateau":
            if failing:
                extra["reason"] = self.plateau.reason
                extra["num_classes"] = self.num_classes
                if self.plateau.reason in ("trivial", "above_trivial"):
                    extra["trivial_loss"] = self.plateau.trivial
                    extra["trivial_of"] = self.plateau.trivial_of
            before, value = self.plateau.level_before, self.plateau.level
        elif name == "targets" and failing:
            r = row[tr.index]
            extra.update(reason="targets", target_min=float(r[_M["target_min"]]),
                         target_max=float(r[_M["target_max"]]))
        elif name == "init":
            k = self.num_classes
            extra["num_classes"] = k
            before = math.log(k) if k else math.nan
            if self.init_negative:
                extra.update(cause="negative", squash=self.kinds.squash)
        return value, before, extra


class Plateau:
    """The plateau rule's state: the loss in blocks of ``_PLATEAU_BLOCK``
    losses, their medians, and the levels (medians of the last
    ``plateau_window`` losses) at the end of each block."""

    def __init__(self, thresholds: Thresholds):
        self.t = thresholds
        self.block = []  # losses of the block being filled
        self.block_step = None  # its first step
        self.blocks = []  # medians of the complete blocks
        self.block_steps = []  # their first steps
        self.recent = Window(thresholds.plateau_window)  # the last losses
        self.levels = []  # median of the last plateau_window losses, at each block's end
        self.level_steps = []  # the first step of each level's window
        self.steps = 0  # losses seen with lr > 0
        self.state = None  # the last decision (None: undecidable so far)
        self.reason = "flat"  # of the last failing decision: "flat" or "chance"
        self.onset = -1  # start of the current flat span
        self.level_before = math.nan  # loss level at its start
        self.level = math.nan  # loss level now
        # the losses of the recent blocks, (step, value), for the step a climb starts
        self.block_losses = deque(maxlen=64)
        self.climb_onset = None  # the loss climbs: the first step at twice its best level
        self.climb_best = math.nan  # the best level (a block median) before the climb
        self.climb_level = math.nan  # the level now
        self.trivial = math.nan  # the trivial predictor's loss, when known (a regression's target variance)
        self.trivial_of = "mean"  # what that predictor predicts: the targets' "mean" or their class "frequencies"
        self.first_losses = []  # the run's first block of losses: did it fall before its first level?

    def add(self, step: int, v: float, in_plateau: bool, first_step, num_classes) -> None:
        """Add a loss of a step with a learning rate > 0; decide again once a block is complete."""
        if not self.block:
            self.block_step = step
            self.block_losses.append([])
        self.block.append(v)
        if len(self.first_losses) < _PLATEAU_BLOCK:
            self.first_losses.append(v)
        self.block_losses[-1].append((step, v))
        self.recent.append(v)
        self.steps += 1
        if len(self.block) == _PLATEAU_BLOCK:
            self.blocks.append(float(np.median(self.block)))
            self.block_steps.append(self.block_step)
            self.block = []
            per = max(1, self.t.plateau_window // _PLATEAU_BLOCK)
            if len(self.blocks) >= per:
                # the level: the median of the last plateau_window losses
                # (kept once a block: the rule reads them all at each check)
                self.levels.append(float(np.median(self.recent.values())))
                self.level_steps.append(self.block_steps[-per])
            # judged once a block: a plateau is a matter of hundreds of steps
            self.state = self.decide(in_plateau, False, first_step, num_classes)
            self.climb_onset = self.climb()

    def _fell_first(self, level: float, t) -> bool:
        """Whether the run's first losses (the median of its first three) were
        above ``level`` by more than three times ``plateau_min_drop`` plus the
        batches' own noise (from the differences of the first block's
        consecutive losses): a loss that fell before its first level."""
        first = self.first_losses
        if len(first) < 3:
            return False
        noise = _diff_sigma(first)
        return float(np.median(first[:3])) > level + 3.0 * t.plateau_min_drop * abs(level) + 3.0 * noise

    def _never_fell(self, lev, first_step, noise: float, need: int, t) -> bool:
        """Whether a run from step 0 never learned: over at least ``need``
        steps, no level fell further below the first losses than
        ``plateau_never_drop`` of it (plus the levels' noise), and the run's
        first losses did not fall before the first level (``_fell_first``).
        A loss that drifts down inside that band is a model fitting noise,
        not learning (tests/test_diagnosis_plateau.py)."""
        if first_step != 0 or not self.blocks or (len(lev) - 1) * _PLATEAU_BLOCK + self.t.plateau_window < need:
            return False
        # against the first block's median (not the first level, a median of
        # plateau_window losses that a slow learner has already left)
        first = max(float(lev[0]), float(self.blocks[0]))
        floor = first - t.plateau_never_drop * abs(first) - noise
        ceiling = first + t.plateau_max_rise * abs(first) + noise  # above it: diverging, not flat
        return bool(np.min(lev) >= floor and np.max(lev) <= ceiling) and not self._fell_first(first, t)

    def fell_since(self, step: int) -> bool:
        """Whether the loss clearly fell after ``step``: its last block's
        median is below the first block from ``step`` on by more than
        ``plateau_never_drop`` of it plus three times the blocks' noise (the
        margin of a run that learned something; tests/test_engine_status.py)."""
        b, s = self.blocks, self.block_steps
        k = next((i for i, first in enumerate(s) if first >= step), None)
        if k is None or len(b) - k < 2:
            return False
        noise = 3.0 * _diff_sigma(b) if len(b) >= 3 else 0.0
        return b[-1] < b[k] - self.t.plateau_never_drop * abs(b[k]) - noise

    def climb(self):
        """The step a climbing loss started, or None: the last two block
        medians are both at least ``1 + plateau_max_rise`` times the best one
        before them, and the loss gave back at least half of what it had
        gained since its first block (a loss that never fell gave back
        everything). Only for positive losses (the ratio needs them). The
        onset is the first step after the best block whose loss passed that
        level."""
        b = self.blocks
        if len(b) < 3:
            return None
        j = int(np.argmin(b[:-2]))
        best, first = b[j], b[0]
        if not best > 0:
            return None
        limit = (1.0 + self.t.plateau_max_rise) * best
        low = min(b[-1], b[-2])
        if low < limit or low - best < 0.5 * (first - best):
            return None
        self.climb_best, self.climb_level = float(best), float(b[-1])
        start = self.block_steps[j]
        for block in self.block_losses:
            for s, v in block:
                if s > start and v > limit:
                    return int(s)
        return int(self.block_steps[-2])

    def decide(self, in_plateau: bool, final: bool, first_step, num_classes):
        """Plateau state from the loss so far; None while undecidable.

        A plateau is a flat stretch of the loss that reaches the present: the
        longest recent span of block medians whose last level (the median of
        ``plateau_window`` losses) is not ``plateau_min_drop`` below the level
        at the span's start, in which no level fell further than that (plus
        three times the levels' noise) on the way, nor rose above
        ``1 + plateau_max_rise`` times it (a diverging loss is not a plateau:
        the spike and explosion rules judge it). Its onset is where the span starts, i.e. where the
        loss stopped falling, never before a substantial fall. It is a
        failure only at a level that says so: the span starts with the run
        (the loss never fell; runs starting at step 0 only, since a resumed
        run may start converged), or, with K classes known, it sits at (or
        above) chance level ln K, or, for a regression whose targets'
        variance is known, at (or above) it: the loss of predicting their
        mean. A loss that fell and then flattened below
        chance is a converged run, not a plateau. ``final``: the decision at
        the end of a run shorter than ``plateau_min_steps``.
        """
        t = self.t
        need = t.plateau_min_steps if not final else max(2 * t.plateau_window, t.plateau_min_steps // 2)
        per = max(1, t.plateau_window // _PLATEAU_BLOCK)  # blocks per level
        blocks = np.asarray(self.blocks)
        lev = np.asarray(self.levels)
        if self.steps < need or len(lev) == 0:
            return None
        # hysteresis on values: leaving takes three times the drop; a short run
        # (decided at its end) must be twice as flat
        drop = t.plateau_min_drop * (3.0 if in_plateau else 1.0) * (0.5 if final else 1.0)
        tol = np.abs(lev)
        # the levels' own noise (small noisy batches): from the differences of
        # consecutive block medians, robust to a trend; a dip or a rise inside
        # the span counts only beyond 3 sigma of it
        noise = 0.0
        if len(blocks) >= 3:
            noise = 3.0 * _diff_sigma(blocks, per)
        suf_min = np.minimum.accumulate(lev[::-1])[::-1]
        suf_max = np.maximum.accumulate(lev[::-1])[::-1]
        flat_from = (
            (lev[-1] >= lev - drop * tol)  # it has not fallen since (as a whole) ...
            & (suf_min >= lev - drop * tol - noise)  # ... nor on the way, then rose back
            & (suf_max <= lev + t.plateau_max_rise * tol + noise)  # nor diverged
        )
        # the earliest start of a flat span reaching the present (every later
        # level of it is within the band of its first level)
        starts = np.flatnonzero(flat_from)
        j = int(starts[0]) if len(starts) else len(lev) - 1
        span = (len(lev) - 1 - j + per) * _PLATEAU_BLOCK
        if j > 0 and self._never_fell(lev, first_step, noise, need, t):
            j, span = 0, (len(lev) - 1 + per) * _PLATEAU_BLOCK
        recent = float(lev[-1])
        self.level_before = float(lev[j])
        self.level = recent
        self.onset = int(self.level_steps[j])
        # a run that ended worse than the trivial predictor, however the
        # loss trends: clearly above (by plateau_min_drop and the levels'
        # noise) the loss of predicting the targets' mean or the label
        # frequencies, the constant that a model that learns learns first
        # (its output's bias). Updates too small to move it (clipped to
        # nothing by value, a rate far too low) leave it there while the
        # loss drifts down. Judged at the run's end only (a slow learner
        # passes through that level on its way down: the healthy
        # large_mean_regression), and only for a loss that fell by less than
        # an order of magnitude (the factor of a module's healthy band
        # elsewhere, act_explode_vs_max): one that fell more is learning,
        # whatever its level (raw_features_adam, whose inputs of ~1e3 leave
        # it far above the targets' variance after falling 75-fold;
        # tests/test_diagnosis_plateau.py)
        fell_tenfold = len(blocks) and float(blocks[0]) > t.act_explode_vs_max * recent
        if final and self.trivial > 0 and recent > (1.0 + t.plateau_min_drop) * self.trivial + noise \
                and not fell_tenfold:
            self.level_before, self.onset, self.reason = float(lev[0]), int(self.level_steps[0]), "above_trivial"
            return STATE["loss_plateau"]
        if span < need:
            return HEALTHY
        # never fell: the flat span is the whole run (from step 0), and the
        # run's first losses were no higher than its first level (a median of
        # plateau_window losses: a loss that fell within them, to a floor
        # such as label smoothing's, fell; tests/test_diagnosis.py)
        fell_first = self._fell_first(float(lev[j]), t)
        flat = j == 0 and first_step == 0 and not fell_first
        k = num_classes
        # K known: stuck at (or above) the chance level ln K
        chance = k is not None and k >= 2 and recent > (1.0 - drop) * math.log(k)
        # a regression stuck at the loss of predicting the targets' mean
        trivial = self.trivial > 0 and recent > (1.0 - drop) * self.trivial
        self.reason = "chance" if chance else ("trivial" if trivial else "flat")
        return STATE["loss_plateau"] if (flat or chance or trivial) else HEALTHY


def _diff_sigma(values, per: int = 1) -> float:
    """The noise (a robust std) of one of ``values`` from the differences of
    consecutive ones, robust to a trend (1.4826 x their median absolute
    size / sqrt 2); of a median of ``per`` of them with ``per``."""
    return 1.4826 * float(np.median(np.abs(np.diff(values)))) / math.sqrt(2.0 * per)
