"""Distributed training (DDP, FSDP2 under torchrun): ranks, per-rank statistics, norms over shards.

Every rank runs its own DebugWriter (the same script on every rank), and
measures its own forward pass: activations and inputs are per rank. The
gradients it measures are those the optimizer applies: after DDP's
all-reduce (the measurement waits for DDP's end-of-backward callback), and
for FSDP2's sharded (DTensor) parameters the norms of the whole parameter,
the squares of the local shards summed over the shard group
(:func:`sharded_norms`).

Two ways to write (``DebugWriter(..., ranks=...)``):

* ``"gather"`` (default): rank 0 writes one run. Each step every rank's
  worker thread sends rank 0 a small float32 ``[layers, len(RANK_METRICS)]``
  block of its per-rank statistics, in one ``gather`` on a gloo group of
  our own (off the training thread; a few hundred bytes a step), and rank 0
  (:class:`RankGather`) diagnoses the statistics of the global batch (the
  ranks merged: means averaged, maxima and non-finite counts over all ranks),
  stores the per-rank blocks under ``neuraldbg/ranks`` and names the rank an
  anomaly came from in the event ("<input> on rank 1: ..."). A NaN that
  reaches a healthy rank through the all-reduce is seen where it was born.
  Other ranks write nothing into the logdir (what the user writes there with
  SummaryWriter's own methods goes to ``<log_dir>/rank<r>``);
* ``"each"``: every rank writes its own run, ``<log_dir>/rank<r>``, with
  its own rank's statistics; the blocks go to every rank (``all_gather``)
  so that each run's diagnosis sees the whole job and names the rank too.

Messages on stderr carry the rank (:func:`tag`).
"""

from __future__ import annotations

import collections
import datetime
import warnings
from typing import Sequence

import numpy as np
import torch

from ..format import metadata
from .step import stats

__all__ = [
    "RANK_METRICS",
    "TAG_RANKS",
    "MODES",
    "world",
    "tag",
    "rank_dir",
    "RankGather",
    "ranks_summary",
    "has_dtensors",
    "sharded_norms",
]

MODES = ("gather", "each")
TAG_RANKS = f"{metadata.TAG_PREFIX}ranks"
#: The per-rank columns gathered to rank 0 (the forward pass and the loss:
#: what differs between ranks; gradients are shared after the all-reduce).
RANK_METRICS = (
    "act_mean",
    "act_std",
    "act_absmax",
    "act_zero_frac",
    "act_dead_frac",
    "act_sat_frac",
    "act_nonfinite",
    "in_zero_frac",
    "in_dead_frac",
    "in_nonfinite",
    "gout_nonfinite",
    "value",
)
_COLS = [metadata.METRIC_INDEX[m] for m in RANK_METRICS]
_C = {m: i for i, m in enumerate(RANK_METRICS)}
_NONFINITE = [_C["act_nonfinite"], _C["in_nonfinite"], _C["gout_nonfinite"]]
_HISTORY = 256  # steps of per-rank blocks kept on rank 0 to name an event's rank
_GATHER_TIMEOUT = datetime.timedelta(seconds=300)


def world() -> tuple[int, int] | None:
    """(rank, world size) in an initialised process group of 2 ranks or more; else None."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    size = dist.get_world_size()
    return (dist.get_rank(), size) if size > 1 else None


def tag() -> str:
    """The prefix of our messages: ``tb_neuraldbg``, with ``[rank r]`` in a
    distributed run."""
    w = world()
    return "tb_neuraldbg" if w is None else f"tb_neuraldbg[rank {w[0]}]"


def rank_dir(log_dir: str, rank: int) -> str:
    """``<log_dir>/rank<rank>`` (also for s3:// and other remote paths)."""
    return f"{str(log_dir).rstrip('/')}/rank{rank}"


def _with_rank(message: str, layer: str, ranks: list[int]) -> str:
    """``"<input>: ..."`` -> ``"<input> on rank 1: ..."``."""
    where = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    head, sep, rest = message.partition(":")
    if sep and head.startswith(layer):
        return f"{head} on {where}{sep}{rest}"
    return f"{layer} on {where}: {message}"


class RankGather:
    """The per-rank side of one writer in a ``"gather"`` run (see the module
    docstring). Built on the training thread by :meth:`create` (creating the
    gloo group is a collective: every rank's ``watch()`` makes one); used by
    the worker thread, which calls :meth:`gather` once per step on every
    rank, in step order."""

    def __init__(self, rank: int, size: int, group, everyone: bool = False):
        self.rank = rank
        self.size = size
        self.group = group
        self.everyone = everyone  # every rank writes a run: all_gather
        self.broken = False
        self.history: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self.named: dict[tuple, tuple[list[int], str]] = {}  # (step, layer, kind) -> (ranks, message)

    @classmethod
    def create(cls, everyone: bool = False) -> "RankGather | None":
        """None outside a distributed run; ``everyone``: each rank writes a
        run and diagnoses with every rank's blocks (``ranks="each"``)."""
        w = world()
        if w is None:
            return None
        group = torch.distributed.new_group(backend="gloo", timeout=_GATHER_TIMEOUT)
        return cls(w[0], w[1], group, everyone)

    @property
    def writes(self) -> bool:
        """Rank 0 writes the run (every rank with ``everyone``)."""
        return self.everyone or self.rank == 0

    # -- every step -------------------------------------------------------

    def gather(self, step: int, row: np.ndarray) -> np.ndarray | None:
        """This rank's block to rank 0 (to every rank with ``everyone``);
        there, every rank's ``[R, L, C]`` (None elsewhere, and once a gather
        failed)."""
        if self.broken:
            return None
        block = torch.from_numpy(np.ascontiguousarray(row[:, _COLS], dtype=np.float32))
        try:
            if self.everyone:
                parts = [torch.empty_like(block) for _ in range(self.size)]
                torch.distributed.all_gather(parts, block, group=self.group)
            elif self.rank == 0:
                parts = [torch.empty_like(block) for _ in range(self.size)]
                torch.distributed.gather(block, parts, dst=0, group=self.group)
            else:
                torch.distributed.gather(block, None, dst=0, group=self.group)
                return None
        except Exception as e:  # noqa: BLE001 -- a dead rank, a timeout, differing models
            self.broken = True
            warnings.warn(
                f"{tag()}: gathering per-rank statistics failed ({type(e).__name__}: {e}); "
                "from now on rank 0 sees its own rank only",
                RuntimeWarning,
            )
            return None
        per_rank = torch.stack(parts).numpy()
        self.history[step] = per_rank
        while len(self.history) > _HISTORY:
            self.history.popitem(last=False)
        return per_rank

    @staticmethod
    def merge(row: np.ndarray, per_rank: np.ndarray, loss_row: int | None) -> np.ndarray:
        """The row of the global batch: per-rank columns merged over ranks
        (means and fractions averaged, the standard deviation pooled, maxima
        and non-finite counts over every rank); gradients, weights and the
        rest are this rank's (the same on every rank after the all-reduce)."""
        out = row.copy()
        pr = per_rank.astype(np.float64)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices stay NaN
            mean_r, std_r = pr[..., _C["act_mean"]], pr[..., _C["act_std"]]
            mean = np.nanmean(mean_r, axis=0)
            var = np.nanmean(std_r * std_r + mean_r * mean_r, axis=0) - mean * mean
            merged = {
                "act_mean": mean,
                "act_std": np.where(np.isnan(std_r).all(axis=0), np.nan, np.sqrt(np.maximum(var, 0.0))),
                "act_absmax": np.nanmax(pr[..., _C["act_absmax"]], axis=0),
            }
            for m in ("act_zero_frac", "act_dead_frac", "act_sat_frac", "in_zero_frac", "in_dead_frac"):
                merged[m] = np.nanmean(pr[..., _C[m]], axis=0)
            for m in ("act_nonfinite", "in_nonfinite", "gout_nonfinite"):
                v = pr[..., _C[m]]
                merged[m] = np.where(np.isnan(v).all(axis=0), np.nan, np.nansum(v, axis=0))
        for m, v in merged.items():
            out[:, metadata.METRIC_INDEX[m]] = v
        if loss_row is not None and loss_row < out.shape[0]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out[loss_row, metadata.METRIC_INDEX["value"]] = np.nanmean(pr[:, loss_row, _C["value"]])
        return out

    # -- events -----------------------------------------------------------

    def _block(self, step: int) -> np.ndarray | None:
        best = None
        for s, block in self.history.items():
            if s <= step:
                best = block
        return best if best is not None else next(iter(self.history.values()), None)

    @staticmethod
    def ranks_of(values: np.ndarray, kind: str) -> list[int]:
        """The ranks an anomaly of ``kind`` comes from, from one row's
        ``[R, C]`` per-rank values; [] when it is everywhere (or shared)."""
        nf = np.nan_to_num(values[:, _NONFINITE], nan=0.0).sum(axis=1)
        if (nf > 0).any():
            return [] if (nf > 0).all() else [int(r) for r in np.flatnonzero(nf > 0)]
        metric = {
            "data_anomaly": "act_absmax",
            "activation_explosion": "act_absmax",
            "activation_collapse": "act_std",
            "dead_activation": "act_dead_frac",
            "saturated_activation": "act_sat_frac",
        }.get(kind)
        if metric is None:
            return []
        v = values[:, _C[metric]]
        if not np.isfinite(v).any():
            return []
        with np.errstate(all="ignore"):
            if metric in ("act_absmax", "act_std"):
                d = np.abs(np.log10(np.maximum(v, 1e-30)) - np.nanmedian(np.log10(np.maximum(v, 1e-30))))
                out = np.flatnonzero(d >= 1.0)  # an order of magnitude from the others
            else:
                out = np.flatnonzero(np.abs(v - np.nanmedian(v)) >= 0.3)
        return [int(r) for r in out] if len(out) < len(v) else []

    def name_ranks(self, events: list[dict], layer_names: Sequence[str]) -> None:
        """Add ``"rank"`` (or ``"ranks"``) to each event whose anomaly comes
        from some ranks only, and say it in its message."""
        for d in events:
            layer = d.get("layer")
            if layer not in layer_names or d.get("to_state") == "healthy":
                continue
            block = self._block(int(d.get("step", 0)))
            row = list(layer_names).index(layer)
            if block is None or row >= block.shape[1]:
                continue
            ranks = self.ranks_of(block[:, row, :], str(d.get("kind")))
            if not ranks:
                continue
            if len(ranks) == 1:
                d["rank"] = ranks[0]
            else:
                d["ranks"] = ranks
            d["message"] = _with_rank(str(d.get("message", "")), layer, ranks)
            self.named[(d.get("step"), layer, d.get("kind"))] = (ranks, d["message"])

    def root_cause(self, rc: dict | None) -> dict | None:
        """The root cause with the rank named, when its event had one."""
        if not rc:
            return rc
        found = self.named.get((rc.get("step"), rc.get("layer"), rc.get("kind")))
        if found is None:
            return rc
        ranks, _ = found
        out = dict(rc, message=_with_rank(str(rc.get("message", "")), str(rc.get("layer")), ranks))
        out["rank" if len(ranks) == 1 else "ranks"] = ranks[0] if len(ranks) == 1 else ranks
        return out


def ranks_summary(per_rank: np.ndarray):
    """The ``neuraldbg/ranks`` summary of one step: float32 ``[ranks, layers,
    len(RANK_METRICS)]``, its metadata naming the columns (docs/FORMAT.md)."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.util import tensor_util

    return summary_pb2.Summary(
        value=[
            summary_pb2.Summary.Value(
                tag=TAG_RANKS,
                metadata=metadata.create_summary_metadata({"kind": "ranks", "metrics": list(RANK_METRICS)}),
                tensor=tensor_util.make_tensor_proto(np.ascontiguousarray(per_rank, dtype=np.float32)),
            )
        ]
    )


# -- sharded parameters (FSDP2) ---------------------------------------------


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without DTensor
        return None
    return DTensor


def has_dtensors(params) -> bool:
    """True when some parameter is a DTensor (FSDP2's ``fully_shard``, tensor parallel)."""
    dt = _dtensor_type()
    return dt is not None and any(isinstance(p, dt) for p in params)


def sharded_norms(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """L2 norm of each (maybe sharded) tensor, as 0-d local tensors.

    A local shard's norm is not the parameter's: for DTensors sharded on
    their mesh, the squares of the local norms are summed over the mesh's
    group, one ``all_reduce`` per mesh for the whole list; replicated ones
    are their local norm. Every rank must call it at the same point (it
    runs where the hooks measure parameters: in lockstep on every rank).
    """
    dt = _dtensor_type()
    norms = stats.foreach_norm([stats.local_shard(t) for t in tensors])
    # Grouped by mesh and by the mesh dimensions that shard the tensor
    # (HSDP replicates along one and shards along the other).
    groups: dict[tuple, tuple] = {}
    for i, t in enumerate(tensors):
        if dt is not None and isinstance(t, dt):
            dims = tuple(d for d, p in enumerate(t.placements) if p.is_shard())
            if dims:
                groups.setdefault((id(t.device_mesh), dims), (t.device_mesh, dims, []))[2].append(i)
    for mesh, dims, idxs in groups.values():
        squares = torch.stack([norms[i].float() ** 2 for i in idxs])
        for dim in dims:
            torch.distributed.all_reduce(squares, group=mesh.get_group(dim))
        roots = squares.sqrt()
        for j, i in enumerate(idxs):
            norms[i] = roots[j]
    return norms
