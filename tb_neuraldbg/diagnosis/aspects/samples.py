"""The samples aspect: a model whose output stopped depending on its input.

A model is useful only while its output depends on its input. An output
that is (nearly) the same for every sample of a batch, while the batch
itself varies, carries nothing about the input, whatever the loss says: a
Siamese or triplet encoder whose embeddings all went to one point, a VAE
whose posterior means all went to the prior's 0. ``sample_spread`` is the
share of a module's output spread that lies between the samples of the
batch (docs/FORMAT.md); with ``act_std`` it gives the output's
between-sample std, ``b = sample_spread * act_std``.

Each module is judged against itself before any update (its first
measurement): a randomly initialised network's output already depends on
its input, and a trained one should not depend on it less. A module *lost
the sample* when its between-sample variance (``b**2``) fell an order of
magnitude below its first one: the output shrank towards one point (a VAE's
means going to the prior, a Siamese encoder without negatives). An order of
magnitude is the factor the other aspects take as a module's healthy band
around its own history (``act_explode_vs_max``), in variances because
``sample_spread`` is the square root of a share of variance. A fall of the
*share* alone is not judged: an output that grows a part every sample
shares while its samples differ as much as before is a language model's
logits learning the prior of each position (``lstm_clipped_bursts``) as
much as a triplet net's L2-normalised embeddings collapsing in direction
(the normalisation, a function in ``forward``, has no row), and these
statistics do not tell the two apart.

That alone is not a failure: a branch, a gate or an idle expert may go quiet
while the model's output still depends on the input (ReZero, LayerScale,
MoE). So the model's output (its last module with parameters before
``<loss>``) must have lost the sample by the same measure, the loss must not
be clearly below the trivial predictor's (a prediction that beats every
constant depends on the input, whatever that module does: a gated side
branch added to the output in ``forward``), and, for a
regression whose targets' variance is recorded, vary an order of magnitude
less than its targets do (a random first output that varied more than the
targets falls to their spread as it learns). And the loss must have
fallen clearly below its first value (when it is known and positive): a
collapse is the objective met by ignoring the input, which the loss pays
for; outputs that shrink while the loss stays where it began (weight decay
of 0.5 shrinking every layer of a classifier at ln K) are the plateau's
story, whose cause is not the objective. Then the root is
the first module in forward order that lost it while its input (the
previous row, or the batch) had not (DESIGN.md: the first collapsed link
whose own input is alive), the output itself when nothing before it did.
For a VAE whose KL term dominates, that is ``fc_mu`` (the means went to the
prior's 0 for every input), not the decoder: the decoder's input ``z`` still
differs between samples (the prior's noise) and its output follows what it
can still learn from it, the mean image. Not judged: modules whose first
output was already the same for every sample (positional embeddings, CLS
or query tokens, constant buffers: their input does not vary with the
sample), outputs with no spread (a head at zero init: NaN until it has
one, then judged against its first spread).
"""

from __future__ import annotations

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, RowKinds, blank, for_good, grow
from .gain import output_rows

__all__ = ["Samples", "SAMPLE_FALL", "SAMPLES_DIFFER"]

#: the factor by which a module's between-sample variance must fall below
#: its first value: an order of magnitude (the healthy band around a module's own history
#: elsewhere, ``act_explode_vs_max``)
SAMPLE_FALL = 10.0
#: a first ``sample_spread`` at or below this is an output already the same
#: for every sample (float32 rounding of identical outputs is ~1e-3): never
#: judged (the same floor as identical units, ``units.UNITS_IDENTICAL``)
SAMPLES_DIFFER = 0.02

_SS, _STD, _TV = METRIC["sample_spread"], METRIC["act_std"], METRIC["target_var"]


def _input_rows(k: RowKinds) -> np.ndarray:
    """int [L]: the input of each row, the previous one when it is a module
    or the batch (-1: none)."""
    src = np.full(k.n, -1)
    src[1:] = np.where(k.prev_is_mod[1:] | (np.arange(k.n - 1) == k.input_index), np.arange(k.n - 1), -1)
    return src


class Samples(Aspect):
    """``samples``: collapsed at the first module whose output lost its
    dependence on the sample while its input kept it, once the model's
    output lost it too (full-statistics steps)."""

    EVIDENCE = {"samples": ("sample_spread", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.row = None
        self.s0 = np.zeros(0)  # first finite sample_spread of each row
        self.b0 = np.zeros(0)  # first between-sample std of each row
        self.b = np.zeros(0)  # between-sample std at this step (for the events)
        self.start = np.zeros(0, np.int64)  # step of each row's first measurement
        self.since = np.zeros(0, np.int64)  # first step of each row's current run of lost measurements (-1: none)

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.s0 = grow(self.s0, n, np.nan)
        self.b0 = grow(self.b0, n, np.nan)
        self.b = grow(self.b, n, np.nan)
        self.start = grow(self.start, n, -1)
        self.since = grow(self.since, n, -1)

    def classify(self, row, has_param, step: int, loss_fell: bool | None = None, beats_trivial: bool = False) -> dict:
        """{"samples": (raw, onset)}; ``has_param``: bool [L], rows with
        parameters; ``loss_fell``: whether the loss fell clearly below its
        first value (None: unknown); ``beats_trivial``: whether it is clearly
        below the trivial predictor's loss; the onset of a collapse is the
        step its row lost the sample."""
        raw = blank(self.kinds.n)
        s = row[:, _SS]
        if np.isnan(s).all():  # a cheap step (nine in ten): nothing measured
            return {"samples": (raw, None)}
        self.row = row
        k = self.kinds
        with np.errstate(invalid="ignore"):
            b = s * row[:, _STD]
            known = np.isfinite(s) & np.isfinite(b)
            first = known & np.isnan(self.s0)
            self.start = np.where(first, step, self.start)
            self.s0 = np.where(first, s, self.s0)
            self.b0 = np.where(first, b, self.b0)
            self.b = b
            lost = known & (b * b * SAMPLE_FALL <= self.b0 * self.b0)
            lost &= self.s0 > SAMPLES_DIFFER
            src = _input_rows(k)
            alive = np.zeros(k.n, dtype=bool)
            has_src = src >= 0
            alive[has_src] = known[src[has_src]] & ~lost[src[has_src]] & (s[src[has_src]] > SAMPLES_DIFFER)
            measured = k.is_mod & known
            # since when each row has lost it (-1: it has not; a row not
            # measured at this step keeps its run)
            self.since = np.where(known, np.where(lost, np.where(self.since >= 0, self.since, step), -1), self.since)
            # a row that lost it is not healthy; it is collapsed only as a root (below)
            raw[measured & ~lost] = HEALTHY
            heads = np.flatnonzero(output_rows(has_param, k))
            out = int(heads[0]) if len(heads) else -1
            # a regression's output varies between samples as its targets do
            # (MSE: their variance is recorded): a random first output that
            # varied more than they do has not lost the sample by falling to them
            tv = row[k.loss_index, _TV] if k.loss_index >= 0 else np.nan
            # and a prediction that beats every constant (the loss clearly
            # below the trivial predictor's) still depends on the input: the
            # last module with parameters is then not what the loss reads (a
            # gated side branch added to the output in forward, the gate
            # closing by design: tests/test_diagnosis_samples.py)
            if out < 0 or not lost[out] or b[out] * b[out] * SAMPLE_FALL > tv or loss_fell is False or beats_trivial:
                return {"samples": (raw, None)}
            # for good: for lr_window steps, and for at least as long as the
            # row had trained before it lost it (a classifier that passes
            # through its prior on the way to learning is no collapse)
            lasting = for_good(step, self.since, self.start, self.t.lr_window)
            roots = measured & lost & alive & lasting
            raw[roots] = STATE["collapsed"]
        return {"samples": (raw, np.where(roots, self.since, -1))}

    def blind_rows(self) -> tuple:
        """Module rows whose first output was the same for every sample while
        the row before them (a module, or the batch) differed between
        samples at its first measurement: they drop the sample from the
        start (a tanh RNN saturated at +-1 by raw inputs). What comes after
        one is fed the same for every sample (rootcause.py)."""
        k = self.kinds
        if len(self.s0) != k.n:
            return ()
        prev = _input_rows(k)
        with np.errstate(invalid="ignore"):
            varied = np.where(prev >= 0, self.s0[np.maximum(prev, 0)] > SAMPLES_DIFFER, False)
            blind = k.is_mod & (self.s0 <= SAMPLES_DIFFER) & varied
        return tuple(int(i) for i in np.flatnonzero(blind))

    def evidence(self, name: str, code, value, before) -> tuple:
        """The sample spread now, and at the row's first measurement."""
        return (self.row[:, _SS] if self.row is not None else value), self.s0

    def event_fields(self, name: str, kind: str, tr, row) -> tuple:
        """The sample spread as the event's value (its first as the value
        before), the between-sample std now and first in the extra fields."""
        i = tr.index
        extra = {"signal": "sample_spread", "cause": "samples_alike",
                 "between_std": float(self.b[i]), "between_std_first": float(self.b0[i])}
        return tr.value, float(self.s0[i]), extra
