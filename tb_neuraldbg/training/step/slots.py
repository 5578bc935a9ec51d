"""A step's slots, and their completion into rows on the host: numpy only.

The training side (``stats``, ``instrument``, ``collector``) measures a step
into a flat vector of values, each tagged with the row it belongs to and a
:class:`Key`; a :class:`StepPacket` carries them to the worker, which turns
them into the ``[L, len(METRICS)]`` float32 rows of the on-disk format
(:func:`assemble`, :func:`assemble_steps`) and a histogram run into a
TensorBoard histogram's fields (:func:`histogram_parts`). The two sides
change together through :class:`Key`; a test holds them to the same row.

No torch here: the worker runs in a child process without it
(``watch(analysis="process")``), which then starts in a fraction of the time
and memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...format import metadata

__all__ = ["Key", "StepPacket", "SlotLayout", "assemble", "assemble_steps", "histogram_parts", "HIST_BINS",
           "NONFINITE_EVIDENCE"]

HIST_BINS = 30


class Key:
    """Names of the slots a step vector is made of (small ints for numpy).

    A slot is one value (or a run of values) of the step vector, tagged with
    the row it belongs to and one of these keys; :func:`assemble` turns them
    into metrics. ``OUT_*`` describe a module's output (or the batch for the
    ``<input>`` row), ``IN_*`` its first input.
    """

    OUT_SUM = 0  # every step: mean, and a free non-finite flag (NaN/inf propagate)
    OUT_MIN = 1
    OUT_MAX = 2
    OUT_NORM = 3  # L2 norm: its square is the sum of squares
    OUT_NZ = 4  # count of non-zeros
    OUT_DEAD = 5  # units that are zero for every sample of the batch
    OUT_SAT = 6  # saturated values (bounded activations)
    OUT_NF = 7  # exact count of non-finite values
    IN_SUM = 8
    IN_NZ = 9
    IN_DEAD = 10
    IN_NF = 11
    GRAD_NORM = 12  # one per parameter; squares add up per row
    GRAD_NF = 13  # one per parameter; counts add up per row
    WEIGHT_NORM = 14
    UPD_NORM = 15  # ||w_t - w_{t-1}|| per parameter
    UPD_BASE = 16  # ||w_{t-1}|| per parameter
    VALUE = 17  # loss value or learning rate
    SCALE = 18  # GradScaler scale
    HIST = 19  # a run of HIST_BINS + 5 values (see stats.histogram())
    # Host-side constants (never on the device).
    OUT_N = 20  # number of output elements
    OUT_UNITS = 21  # number of units (elements per sample)
    IN_N = 22
    IN_UNITS = 23
    IN_REF = 24  # the input is the output of this row: copy its statistics
    GRAD_MISSING = 25
    OUT_INHERIT = 26  # not measured: the output's non-finite flag is the input's
    GOUT_SUM = 27  # sum of the gradient w.r.t. the output: a non-finite flag
    GOUT_NF = 28  # exact count of non-finite values of that gradient
    # Host-side facts of the step (see hooks/step_facts.py).
    GRAD_CARRIED = 29  # norm of a gradient left over from the previous step
    RAN_NO_GRAD = 30  # the module ran with autograd disabled
    OPT_GROUP = 31  # param group holding the row's parameters (-1: none)
    OPT_LR = 32
    OPT_WD = 33
    OPT_MOMENTUM = 34
    # Not measured: the output gradient's flag is 0 when the step's evidence
    # is clean (nonfinite="replay": see Instrument._measure_module).
    GOUT_CLEAN = 35
    # Full steps only: what a module does to the signal (fwd_gain, bwd_gain)
    # and whether its units differ (unit_spread); docs/FORMAT.md.
    GOUT_NORM = 36  # L2 norm of the gradient w.r.t. the output
    GIN_NORM = 37  # L2 norm of the gradient w.r.t. the first input (when it is not a row's output)
    IN_NORM = 38  # L2 norm of the first input (with IN_SUM and IN_N: its std)
    UNIT_SUMS = 39  # L2 norm of the output's per-position sums over its units
    UNITS = 40  # host constant: units along the unit axis (see stats.unit_axis)
    TARGET_VAR = 41  # variance of a regression criterion's targets (<loss>)
    INT_INPUT = 42  # the batch holds integers: 1 by its dtype, 0.5 as floats (<input>)
    TARGET_MIN = 43  # a regression criterion's targets' smallest and largest value (<loss>)
    TARGET_MAX = 44
    # Update steps: the elements whose gradient was non-zero (UPD_GRADED) and,
    # of those, the ones the optimizer's step left exactly unchanged
    # (UPD_LOST: an update the weights' precision rounded away).
    UPD_GRADED = 45
    UPD_LOST = 46
    # Full steps: whether the output differs between the samples of the
    # batch (sample_spread): the L2 norm of its sum over the batch (dim 0),
    # and the batch size (a host constant); docs/FORMAT.md.
    SAMPLE_SUMS = 47
    SAMPLES = 48
    # Host constant at a run's end: backward passes followed while the watched
    # optimizer never stepped (<optimizer>; Instrument.commit_never_stepped).
    STEPS_MISSING = 49
    # The loss of the best constant prediction (a classifier's label
    # frequencies; <loss>, full steps): hooks/pseudo_rows.LabelFrequencies.
    PRIOR_LOSS = 50
    # Every step: the batch's std by torch (<input>): the sum of squares less
    # the squared sum loses every digit of a spread far below the batch's
    # offset (readings at 2e4 +- 1 read std 0).
    OUT_STD = 51
    COUNT = 52


@dataclass
class StepPacket:
    """Everything the worker needs for one step.

    :meth:`host_values` gives the step vector; ``rows`` and
    ``keys`` describe each value (see :class:`Key`); ``layers`` is the
    full layer list at this step (it only grows).
    """

    step: int
    rows: np.ndarray
    keys: np.ndarray
    layers: list
    stats: bool
    host: list = field(default_factory=list)  # numpy arrays, or (pinned, event): see Collector.finish
    # Rows whose module ran at a step whose hooks measured nothing (a cheap
    # step of nonfinite="replay" that needed no replay: as its hooks noted
    # them, or as the last hooked step did); None otherwise.
    ran: np.ndarray | None = None
    # K of the cross-entropy loss as of this step (None while unknown): the
    # diagnosis reads it from the packet, not from the instrument when the
    # worker gets there, so a lagging worker judges the same K
    # (tests/test_status_timing.py).
    num_classes: int | None = None

    def host_values(self) -> np.ndarray:
        """The step vector, float64, once its device copies are done (this
        waits for them: call it on the worker, never in training)."""
        parts = []
        for p in self.host:
            if isinstance(p, tuple):  # CUDA: wait on the worker, not in training
                pinned, event = p
                event.synchronize()
                parts.append(pinned.numpy().astype(np.float64))
            else:
                parts.append(np.asarray(p, dtype=np.float64))
        return np.concatenate(parts) if parts else np.zeros(0)


_M = metadata.METRIC_INDEX
#: The columns whose non-finite counts are a step's evidence (a clean step has none > 0).
NONFINITE_EVIDENCE = np.array([_M[m] for m in ("act_nonfinite", "in_nonfinite", "grad_nonfinite", "gout_nonfinite")])
# Keys with several slots per row (summed), the others have one.
_MULTI = np.zeros(Key.COUNT, dtype=bool)
_MULTI[[Key.GOUT_SUM, Key.GRAD_NORM, Key.GRAD_NF, Key.GRAD_CARRIED, Key.WEIGHT_NORM, Key.UPD_NORM, Key.UPD_BASE,
        Key.HIST, Key.UPD_GRADED, Key.UPD_LOST]] = True


class SlotLayout:
    """Where the slots of a step vector go in the ``[Key.COUNT, L]`` table of
    :class:`_Slots`: what depends on the slots' rows and keys alone. Steps
    of the same kind (every cheap step, every full one) have the same
    layout, so :class:`.rows.RowAssembler` keeps the recent ones, and
    assembles a burst's steps of one layout together (:func:`assemble_steps`).

    Single-valued keys: a later slot of the same key and row replaces an
    earlier one (only the last is kept here). Multi-valued keys (one slot
    per parameter, per micro-batch) add up, in the order of the slots, in
    one ``bincount`` for all of them. ``present``: read-only, bool
    ``[Key.COUNT, L]``, the places with at least one slot.
    """

    __slots__ = ("num_rows", "single", "single_at", "summed", "summed_at", "present")

    def __init__(self, rows: np.ndarray, keys: np.ndarray, num_rows: int):
        L = self.num_rows = num_rows
        rows = np.asarray(rows, dtype=np.int64)
        keys = np.asarray(keys, dtype=np.int64)
        flat = keys * L + rows
        multi = _MULTI[keys]
        single = np.flatnonzero(~multi)
        # the last slot of each place: the first of the reversed order
        _, last = np.unique(flat[single][::-1], return_index=True)
        self.single = single[::-1][last]
        self.single_at = flat[self.single]
        self.summed = np.flatnonzero(multi & (keys != Key.HIST))
        self.summed_at = flat[self.summed]
        present = np.zeros(Key.COUNT * L, dtype=bool)
        present[flat] = True
        present.flags.writeable = False
        self.present = present.reshape(Key.COUNT, L)


class _Slots:
    """``n`` step vectors of one layout scattered into one ``[n, Key.COUNT,
    L]`` table (a slot's place is ``key * L + row``, see :class:`SlotLayout`),
    with per-key accessors (``[n, L]``) that are views of it."""

    def __init__(self, values: np.ndarray, layout: SlotLayout):
        n, L = len(values), layout.num_rows
        size = Key.COUNT * L
        table = np.full((n, size), np.nan)
        table[:, layout.single_at] = values[:, layout.single]
        # one bincount for every step: step i's places are offset by i * size
        # (each bin still adds its own step's slots, in their order)
        at = (np.arange(n)[:, None] * size + layout.summed_at).reshape(-1)
        vm = values[:, layout.summed].reshape(-1)
        self.table = table.reshape(n, Key.COUNT, L)
        self.present_table = layout.present
        self.sums = np.bincount(at, weights=vm, minlength=n * size).reshape(n, Key.COUNT, L)
        self.squares = np.bincount(at, weights=vm * vm, minlength=n * size).reshape(n, Key.COUNT, L)

    def present(self, key: int) -> np.ndarray:
        """Rows that have at least one slot of this key ([L], the same at every step)."""
        return self.present_table[key]

    def pick(self, key: int) -> np.ndarray:
        """Per-row value of a single-valued key (NaN where absent)."""
        return self.table[:, key]

    def sum(self, key: int, square: bool = False) -> np.ndarray:
        """Per-row sum (of squares) of a multi-valued key (NaN where absent)."""
        return np.where(self.present_table[key], (self.squares if square else self.sums)[:, key], np.nan)

    def norm(self, key: int) -> np.ndarray:
        """Per-row L2 norm from per-tensor norms: sqrt of the sum of squares."""
        return np.sqrt(self.sum(key, square=True))


def _flag(evidence: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Non-finite indicator from a sum or norm that propagates NaN/inf:
    1 = at least one non-finite value, 0 = none, NaN = not measured."""
    return np.where(present, np.where(np.isfinite(evidence), 0.0, 1.0), np.nan)


def assemble(values: np.ndarray, rows: np.ndarray, keys: np.ndarray, num_rows: int,
             layout: SlotLayout | None = None) -> np.ndarray:
    """The float32 ``[num_rows, len(METRICS)]`` row of one step.

    ``values``, ``rows`` and ``keys`` are parallel 1-d arrays (the step vector
    and its slot descriptions, host constants included; ``HIST`` slots are
    ignored here). Everything not measured is NaN. Non-finite counts are exact
    where an exact count was taken (``*_NF`` slots) and otherwise 1 for "at
    least one" (from the sum/norm, which propagate NaN and inf). ``layout``:
    ``SlotLayout(rows, keys, num_rows)`` when the caller keeps it.
    """
    if layout is None:
        layout = SlotLayout(rows, keys, num_rows)
    return assemble_steps(np.asarray(values, dtype=np.float64)[None], layout)[0]


def assemble_steps(values: np.ndarray, layout: SlotLayout) -> np.ndarray:
    """The float32 ``[n, L, len(METRICS)]`` rows of ``n`` steps of one
    layout (``values``: float64 ``[n, slots]``), each the row that
    :func:`assemble` gives for its step alone, in the numpy calls of one
    (elementwise: the same values; the worker assembles a burst's steps of a
    layout together)."""
    values = np.asarray(values, dtype=np.float64)
    L = layout.num_rows
    row = np.full((len(values), L, len(metadata.METRICS)), np.nan)
    slots = _Slots(values, layout)
    pick = slots.pick

    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # Outputs (activations; the batch for <input>).
        n = pick(Key.OUT_N)
        s = pick(Key.OUT_SUM)
        mn, mx, q, nz = pick(Key.OUT_MIN), pick(Key.OUT_MAX), pick(Key.OUT_NORM), pick(Key.OUT_NZ)
        row[..., _M["act_mean"]] = s / n
        std = pick(Key.OUT_STD)  # (the batch's, where taken: exact)
        row[..., _M["act_std"]] = np.where(np.isnan(std), _within_range(_std(s, q, n), mn, mx, n), std)
        row[..., _M["act_absmax"]] = np.maximum(-mn, mx)
        row[..., _M["act_zero_frac"]] = 1.0 - nz / n
        row[..., _M["act_dead_frac"]] = pick(Key.OUT_DEAD) / pick(Key.OUT_UNITS)
        row[..., _M["act_sat_frac"]] = pick(Key.OUT_SAT) / n
        flag = _flag(s, slots.present(Key.OUT_SUM))
        # Where min/max were taken they decide: a float sum of finite values
        # can overflow to inf, and aminmax returns NaN when there is a NaN.
        mm_known = ~np.isnan(mn) | ~np.isnan(mx)
        mm_finite = np.isfinite(mn) & np.isfinite(mx)
        flag = np.where(mm_known, np.where(mm_finite, 0.0, 1.0), flag)
        nf = pick(Key.OUT_NF)
        row[..., _M["act_nonfinite"]] = np.where(np.isnan(nf), flag, nf)

        # First input (functional activations upstream of the module).
        in_n = pick(Key.IN_N)
        row[..., _M["in_zero_frac"]] = 1.0 - pick(Key.IN_NZ) / in_n
        row[..., _M["in_dead_frac"]] = pick(Key.IN_DEAD) / pick(Key.IN_UNITS)
        in_nf = pick(Key.IN_NF)
        in_flag = _flag(pick(Key.IN_SUM), slots.present(Key.IN_SUM))
        row[..., _M["in_nonfinite"]] = np.where(np.isnan(in_nf), in_flag, in_nf)
        ref = pick(Key.IN_REF)
        has_ref = ~np.isnan(ref)
        inherit = ~np.isnan(pick(Key.OUT_INHERIT))
        with_ref = has_ref.any(axis=1)
        for i in np.flatnonzero(with_ref):
            _resolve_refs(row[i], has_ref[i], ref[i][has_ref[i]].astype(np.int64), inherit[i])
        just_inherit = inherit & ~with_ref[:, None]
        if just_inherit.any():
            row[..., _M["act_nonfinite"]] = np.where(just_inherit, row[..., _M["in_nonfinite"]],
                                                     row[..., _M["act_nonfinite"]])

        _signal_metrics(row, slots, ref, has_ref)
        if slots.present(Key.SAMPLE_SUMS).any():  # full steps (and the batch's on them)
            row[..., _M["sample_spread"]] = _spread_share(slots, Key.SAMPLE_SUMS, Key.SAMPLES)

        # Gradient w.r.t. the output (a tensor hook in backward).
        gout_nf = pick(Key.GOUT_NF)
        gout_flag = _flag(slots.sum(Key.GOUT_SUM), slots.present(Key.GOUT_SUM))
        row[..., _M["gout_nonfinite"]] = np.where(np.isnan(gout_nf), gout_flag, gout_nf)

        # Parameters.
        gn = slots.norm(Key.GRAD_NORM)
        row[..., _M["grad_norm"]] = gn
        gnf = slots.sum(Key.GRAD_NF)
        gflag = _flag(gn, slots.present(Key.GRAD_NORM))
        row[..., _M["grad_nonfinite"]] = np.where(np.isnan(gnf), gflag, gnf)
        row[..., _M["grad_missing"]] = pick(Key.GRAD_MISSING)
        row[..., _M["weight_norm"]] = slots.norm(Key.WEIGHT_NORM)
        row[..., _M["update_ratio"]] = slots.norm(Key.UPD_NORM) / slots.norm(Key.UPD_BASE)
        graded = row[..., _M["update_elements"]] = slots.sum(Key.UPD_GRADED)
        row[..., _M["update_lost_frac"]] = _ratio(slots.sum(Key.UPD_LOST), graded)
        row[..., _M["value"]] = pick(Key.VALUE)
        row[..., _M["scale"]] = pick(Key.SCALE)
        # Host-side facts of the step (hooks/step_facts.py).
        row[..., _M["grad_carried"]] = slots.norm(Key.GRAD_CARRIED)
        row[..., _M["ran_without_grad"]] = pick(Key.RAN_NO_GRAD)
        row[..., _M["opt_group"]] = pick(Key.OPT_GROUP)
        row[..., _M["lr"]] = pick(Key.OPT_LR)
        row[..., _M["weight_decay"]] = pick(Key.OPT_WD)
        row[..., _M["momentum"]] = pick(Key.OPT_MOMENTUM)
        row[..., _M["target_var"]] = pick(Key.TARGET_VAR)
        row[..., _M["input_integers"]] = pick(Key.INT_INPUT)
        row[..., _M["target_min"]] = pick(Key.TARGET_MIN)
        row[..., _M["target_max"]] = pick(Key.TARGET_MAX)
        row[..., _M["steps_missing"]] = pick(Key.STEPS_MISSING)
        row[..., _M["prior_loss"]] = pick(Key.PRIOR_LOSS)
        # Output gradients not read: none is non-finite when nothing else
        # is (a non-finite one reaches a parameter's gradient or the loss:
        # every row's evidence, pseudo-rows included, measured at this step).
        implied = slots.present(Key.GOUT_CLEAN) & np.isnan(row[..., _M["gout_nonfinite"]])
        if implied.any():
            clean = ~(row[..., NONFINITE_EVIDENCE] > 0).any(axis=(1, 2))  # (NaN > 0 is False)
            row[..., _M["gout_nonfinite"]] = np.where(implied & clean[:, None], 0.0, row[..., _M["gout_nonfinite"]])
    return row.astype(np.float32)


def _std(s: np.ndarray, q: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Standard deviation (n-1) from the sum, the L2 norm and the count
    (rounding can make a zero variance slightly negative: 0; NaN stays NaN)."""
    var = (q * q - s * (s / n)) / np.maximum(n - 1, 1)
    return np.sqrt(np.where(var < 0, 0.0, var))


def _within_range(std: np.ndarray, mn: np.ndarray, mx: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``std`` no larger than values between ``mn`` and ``mx`` allow
    (Popoviciu: a variance is at most (max - min)**2 / 4, times n / (n - 1)
    for the sample's): the sum of squares less the squared sum loses float32's
    digits, and a constant batch of token ids (every id ``<unk>``) or a
    LayerNorm over one feature read std 1e-3 of their value, not 0, and were
    not constant (tests/test_stats.py). NaN bounds (not taken) leave it as
    is."""
    bound = (mx - mn) * 0.5 * np.sqrt(n / np.maximum(n - 1, 1))
    return np.fmin(std, bound)


def _from_ref(own: np.ndarray, src_values: np.ndarray, ref: np.ndarray, has_ref: np.ndarray) -> np.ndarray:
    """``own`` ([n, L]) where measured, else, for a row whose input is row
    ``ref``'s output, ``src_values`` of that row (its value for the very tensor)."""
    src = np.where(has_ref, ref, 0).astype(np.int64)
    taken = np.take_along_axis(src_values, src, axis=1)
    return np.where(np.isnan(own) & has_ref, taken, own)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b where b > 0 (a spread or norm over one of zero says nothing: NaN)."""
    return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


#: unit_spread is not measured where the output's variance is below this
#: fraction of its mean square: a constant output (act_std says so) leaves
#: only float32 rounding in the two sums of squares whose difference it is.
UNIT_SPREAD_MIN_VARIANCE = 1e-6


def _signal_metrics(row: np.ndarray, slots: "_Slots", ref: np.ndarray, has_ref: np.ndarray) -> None:
    """fwd_gain, bwd_gain, gout_norm and unit_spread (docs/FORMAT.md), in place.

    An input copied from row ``r`` (``IN_REF``) is that row's output: its
    std is row ``r``'s ``act_std``, and the gradient this module passes to
    it is the gradient w.r.t. row ``r``'s output (``GOUT_NORM`` of ``r``)."""
    if not (slots.present(Key.OUT_NORM)[1:].any() or slots.present(Key.GOUT_NORM).any()):
        return  # a cheap step: only the batch (row 0) has a spread, no module has a gain
    pick = slots.pick
    out_std = row[..., _M["act_std"]]
    in_std = _std(pick(Key.IN_SUM), pick(Key.IN_NORM), pick(Key.IN_N))
    in_std = _from_ref(in_std, out_std, ref, has_ref)
    row[..., _M["fwd_gain"]] = _ratio(out_std, in_std)
    gout = row[..., _M["gout_norm"]] = pick(Key.GOUT_NORM)
    gin = _from_ref(pick(Key.GIN_NORM), gout, ref, has_ref)
    row[..., _M["bwd_gain"]] = _ratio(gin, gout)
    # Variance within each position (sample, pixel, token) across the units,
    # over the whole variance: sum of squares less the positions' own means'.
    row[..., _M["unit_spread"]] = _spread_share(slots, Key.UNIT_SUMS, Key.UNITS)


def _spread_share(slots: "_Slots", sums_key: int, count_key: int) -> np.ndarray:
    """sqrt(part / total) of the output's spread ([n, L]; NaN where not
    measured, with fewer than 2 along the axis, or for a constant output):
    total is its sum of squared deviations from its mean, part the same from
    the means taken along one axis (``sums_key``: the L2 norm of the sums
    along it, ``count_key``: its length), i.e. the spread along that axis:
    between the units of each position (unit_spread), between the samples
    at each position (sample_spread)."""
    pick = slots.pick
    n, s, q = pick(Key.OUT_N), pick(Key.OUT_SUM), pick(Key.OUT_NORM)
    count = pick(count_key)
    qq = q * q
    total = qq - s * (s / n)
    part = qq - pick(sums_key) ** 2 / count
    ok = (count >= 2) & (total > UNIT_SPREAD_MIN_VARIANCE * qq)
    share = np.sqrt(np.clip(part / np.where(ok, total, 1.0), 0.0, 1.0))
    return np.where(ok, share, np.nan)


def _resolve_refs(row: np.ndarray, has_ref: np.ndarray, src: np.ndarray, inherit: np.ndarray) -> None:
    """One step's input statistics taken from the rows they refer to
    (``src``: the earlier row whose output is this row's input), in place.
    A reference points to an earlier row, which may itself inherit (ReLU ->
    Tanh): repeat until the chain is resolved (each pass resolves at least
    one more link, so L passes always suffice)."""
    for _ in range(len(row)):
        before = row[:, _M["act_nonfinite"]].copy()
        for dst_m, src_m in (
            ("in_zero_frac", "act_zero_frac"),
            ("in_dead_frac", "act_dead_frac"),
            ("in_nonfinite", "act_nonfinite"),
        ):
            row[has_ref, _M[dst_m]] = row[src, _M[src_m]]
        row[inherit, _M["act_nonfinite"]] = row[inherit, _M["in_nonfinite"]]
        if np.array_equal(before, row[:, _M["act_nonfinite"]], equal_nan=True):
            break


def histogram_parts(run: np.ndarray, bins: int = HIST_BINS) -> dict:
    """Decode one :func:`histogram` run into the fields of a TensorBoard
    histogram (``min, max, num, sum, sum_squares, bucket_limits,
    bucket_counts``) plus ``nonfinite``; None when there is no finite value."""
    counts = np.asarray(run[:bins], dtype=np.float64)
    nonfinite = float(run[bins])
    mn, mx, s, sq = (float(v) for v in run[bins + 1 : bins + 5])
    num = float(counts.sum())
    if num <= 0 or not (math.isfinite(mn) and math.isfinite(mx)):
        return {"nonfinite": nonfinite, "num": 0.0}
    edges = np.linspace(mn, mx, bins + 1) if mx > mn else np.array([mn] * bins + [mx + 1e-12])
    # TensorBoard's histogram proto stores the right edge of each bucket.
    return {
        "min": mn,
        "max": mx,
        "num": num,
        "sum": s,
        "sum_squares": sq,
        "bucket_limits": edges[1:].tolist(),
        "bucket_counts": counts.tolist(),
        "nonfinite": nonfinite,
    }
