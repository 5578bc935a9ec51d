"""Read neuraldbg data from a logdir without a TensorBoard server.

A run is a directory holding event files with neuraldbg data; it is named as
TensorBoard names it, by its path relative to the logdir ("." for the logdir
itself), and its event files are read in name order (``logdir.py``). Files
are read by a bounded record reader of our own (``records.py``), not by
TensorBoard's: only records holding neuraldbg tags are parsed, no length is
trusted, and what cannot be read is named.

Everything in a logdir is untrusted. Nothing is unpickled or executed. A
record or a part of a file that cannot be read is skipped with one
``NeuralDbgDataWarning`` line, kept in the run's ``warnings``, and a run that
lost data says so (``Run.incomplete``). A run written in a newer format
version is not read: ``read_logdir`` skips it with a note, ``read_run``
raises ``FormatError``. Other runs are read whatever their neighbours hold.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np
from tensorboard.compat import tf

from ..format import decode, metadata
from ..format.contract import NeuralDbgDataWarning
from ..format.crc import use_fast_crc
from . import logdir as logdir_files
from . import records

__all__ = ["Run", "FormatError", "NeuralDbgDataWarning", "read_logdir", "read_run", "use_fast_crc"]

# Lines of notes kept (and warned) per run; more are counted in one last line.
MAX_NOTES = 50


class FormatError(ValueError):
    """A run holds neuraldbg data this version cannot read (e.g. a newer format)."""


@dataclass(eq=False)
class Run:
    """One run's neuraldbg data, as arrays over its logged steps.

    ``stats[s, l, m]`` is metric ``metrics[m]`` of layer ``layers[l]`` at step
    ``steps[s]``; NaN where not measured, and for layers that did not exist
    yet at that step (``layer_counts[s]`` says how many did). ``states`` holds
    the stored state codes, ``metadata.STATE_UNKNOWN`` where there are none.
    ``events`` are the stored event dicts in the order they were written (each
    has at least DESIGN.md's keys, maybe more); ``diagnosis`` is the last
    stored ``{"status", "root_cause"}``; ``config`` the writer's settings.
    ``warnings`` are one-line notes on what could not be read (or was read
    oddly); ``incomplete`` is True when data of the run was not read (a
    corrupt record, a lost tail, a skipped record), so that its diagnosis
    may miss what that data held.
    """

    name: str
    path: str
    layers: list
    metrics: tuple
    steps: np.ndarray
    stats: np.ndarray
    states: np.ndarray
    layer_counts: np.ndarray
    events: list = field(default_factory=list)
    diagnosis: dict | None = None
    config: dict | None = None
    warnings: list = field(default_factory=list)
    incomplete: bool = False

    @property
    def layer_names(self) -> list:
        return [layer["name"] for layer in self.layers]

    @property
    def num_steps(self) -> int:
        return int(self.steps.shape[0])

    @property
    def num_layers(self) -> int:
        return len(self.layers)


class _Notes:
    """The notes of one run: warned (``NeuralDbgDataWarning``) and kept, at
    most MAX_NOTES lines, each distinct line once."""

    def __init__(self, run: str):
        self.run = run
        self.lines: list[str] = []
        self.incomplete = False
        self._seen: set = set()
        self._more = 0

    def __call__(self, message: str) -> None:
        """A decoder's note (``decode.is_skip`` tells whether data was lost)."""
        self.add(message, lost=decode.is_skip(message))

    def lost(self, message: str) -> None:
        """A part of a file that was not read."""
        self.add(message, lost=True)

    def add(self, message: str, lost: bool) -> None:
        self.incomplete = self.incomplete or lost
        if message in self._seen:
            return
        if len(self.lines) >= MAX_NOTES:
            self._more += 1
            return
        self._seen.add(message)
        self.lines.append(message)
        warnings.warn(f"run {self.run[:200]!r}: {message}", NeuralDbgDataWarning, stacklevel=3)

    def finish(self) -> list[str]:
        """The lines kept, with a last one counting those left out."""
        if self._more:
            line = f"{self._more} more notes not shown"
            warnings.warn(f"run {self.run[:200]!r}: {line}", NeuralDbgDataWarning, stacklevel=2)
            return self.lines + [line]
        return list(self.lines)


# ---------------------------------------------------------------------------
# Records of a run


# Tags read from a run (histograms and anything else are left alone).
_TAGS = frozenset(
    [metadata.stats_tag(m) for m in metadata.METRICS] + [metadata.TAG_STATES, *decode.JSON_TAGS]
)


class _Records:
    """The neuraldbg records of one run, per tag, in the order read.

    A tag is ours unless the first metadata written for it names another
    plugin (TensorBoard keeps the first metadata of a tag). Values of a tag
    whose metadata was lost with a corrupt record still count. Any metadata
    of a newer format version refuses the whole run (FormatError).
    """

    def __init__(self, run: str, note: _Notes):
        self.run = run
        self.note = note
        self.steps: dict = {}
        self.tensors: dict = {}
        self._owner: dict = {}  # tag -> plugin name of its first metadata

    def add(self, event) -> None:
        for value in event.summary.value:
            tag = value.tag
            if tag not in _TAGS:
                continue
            if value.HasField("metadata"):
                self._check(tag, value.metadata.plugin_data)
            if self._owner.get(tag, metadata.PLUGIN_NAME) != metadata.PLUGIN_NAME:
                continue
            if not value.HasField("tensor"):
                continue
            self.steps.setdefault(tag, []).append(event.step)
            self.tensors.setdefault(tag, []).append(value.tensor)

    def _check(self, tag: str, plugin_data) -> None:
        owner = self._owner.setdefault(tag, plugin_data.plugin_name)
        if plugin_data.plugin_name != metadata.PLUGIN_NAME or owner != metadata.PLUGIN_NAME:
            return
        try:
            metadata.parse_plugin_metadata(plugin_data.content)
        except metadata.NewerFormatError as e:
            raise FormatError(f"run {self.run[:200]!r}, tag {tag!r}: {e}") from None
        except ValueError as e:
            self.note(f"tag {tag!r}: {e}; read as format version {metadata.FORMAT_VERSION}")

    def get(self, tag: str) -> tuple[list, list]:
        return self.steps.get(tag, []), self.tensors.get(tag, [])


def _read_records(name: str, files: list, note: _Notes) -> _Records:
    """Every neuraldbg record of the run's event files, in reading order."""
    recs = _Records(name, note)
    for path in files:
        shown = path.replace("\\", "/").rsplit("/", 1)[-1]  # the run's name says where
        try:
            for event in records.read_events(path, note.lost, shown):
                recs.add(event)
        except records.NotRegularFile as e:
            note.add(f"skipped {shown}: {e}", lost=False)
        except OSError as e:
            note.lost(f"{shown}: cannot be read ({e.strerror or e})")
    return recs


# ---------------------------------------------------------------------------
# Runs


def _row_series(recs: _Records, note: decode.Note, max_width: int) -> dict:
    """{tag: decode.Rows} of the run's per-step tags (every metric, the states)."""
    row_tags = [t for t in sorted(recs.steps) if metadata.metric_of_tag(t) or t == metadata.TAG_STATES]
    return {t: decode.decode_tag_rows(t, *recs.get(t), note, max_width) for t in row_tags}


def _json_series(recs: _Records, note: decode.Note) -> dict:
    """{tag: [(step, parsed JSON)]} of every JSON tag (empty when absent)."""
    return {tag: decode.decode_json(*recs.get(tag), note, tag).pairs()
            for tag in sorted(decode.JSON_TAGS)}


def _step_axis(series: dict) -> tuple[np.ndarray, np.ndarray]:
    """(every step logged by any per-step tag, ascending; the number of rows
    stored at each of those steps)."""
    if not series:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    steps = np.unique(np.concatenate([rows.steps for rows in series.values()]))
    layer_counts = np.zeros(len(steps), dtype=np.int64)
    for rows in series.values():
        np.maximum.at(layer_counts, np.searchsorted(steps, rows.steps), rows.lengths)
    return steps, layer_counts


def _place(rows: decode.Rows, steps: np.ndarray, out: np.ndarray) -> None:
    """Write ``rows`` into ``out`` ([len(steps), num_layers]) at their steps."""
    if len(rows.steps):
        out[np.searchsorted(steps, rows.steps), : rows.values.shape[1]] = rows.values


def _matrices(series: dict, steps: np.ndarray, num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """(stats [S, L, M] float32, states [S, L] uint8) on the run's step axis."""
    stats = np.full((len(steps), num_layers, len(metadata.METRICS)), np.nan, dtype=np.float32)
    states = np.full((len(steps), num_layers), metadata.STATE_UNKNOWN, dtype=np.uint8)
    for tag, rows in series.items():
        metric = metadata.metric_of_tag(tag)
        _place(rows, steps, stats[..., metadata.METRIC_INDEX[metric]] if metric else states)
    return stats, states


def _build_run(name: str, path: str, files: list) -> Run | None:
    """The Run of one directory's event files, None without neuraldbg data.
    Raises FormatError for data of a newer format version."""
    note = _Notes(name)
    recs = _read_records(name, files, note)
    if not recs.steps:
        note.finish()
        return None
    records = _json_series(recs, note)
    named = decode.layer_list(records[metadata.TAG_LAYERS])
    series = _row_series(recs, note, decode.row_limit(len(named)))
    del recs
    steps, layer_counts = _step_axis(series)
    width = int(layer_counts.max(initial=0))
    layers = decode.layer_list(records[metadata.TAG_LAYERS], width, note)
    stats, states = _matrices(series, steps, len(layers))
    run = Run(
        name=name,
        path=path,
        layers=layers,
        metrics=tuple(metadata.METRICS),
        steps=steps,
        stats=stats,
        states=states,
        layer_counts=layer_counts,
        events=decode.run_events(records[metadata.TAG_EVENTS], note),
        diagnosis=decode.last_diagnosis(records[metadata.TAG_DIAGNOSIS], note),
        config=decode.run_config(records[metadata.TAG_CONFIG], note),
    )
    run.warnings = note.finish()
    run.incomplete = note.incomplete
    return run


def _refuse_bucket_root(path: str) -> None:
    """A bucket root (``s3://bucket``, ``s3://bucket/``): TensorBoard's S3
    layer lists only below a key prefix (it fails with ``ValueError:
    substring not found`` or finds nothing), so say so in one line."""
    bucket = path[len("s3://"):].strip("/")
    raise FileNotFoundError(
        f"{path} is the root of bucket {bucket!r}, which TensorBoard's S3 reader cannot list; "
        f"point at a folder in it (e.g. s3://{bucket}/runs)"
    )


def _check_dir(path) -> str:
    """The path as TensorBoard will read it; raises for a missing or non-directory path.

    TensorBoard's own file layer answers, so remote logdirs it can read
    (s3://, gs://, ... with the matching fsspec package) work here too.
    """
    path = os.fspath(path)
    if "://" not in path:
        path = os.path.expanduser(path)
    elif path.startswith("s3://") and not path[len("s3://"):].partition("/")[2].strip("/"):
        _refuse_bucket_root(path)
    gfile = tf.io.gfile
    try:
        exists, isdir = gfile.exists(path), gfile.isdir(path)
    except ImportError as e:  # e.g. "Install s3fs to access S3"
        raise FileNotFoundError(f"cannot open {path}: {e}") from None
    except Exception as e:  # noqa: BLE001 -- a missing bucket, no credentials, no network
        reason = " ".join(str(e).split()) or type(e).__name__
        raise FileNotFoundError(f"cannot open {path}: {reason}") from None
    if not exists:
        raise FileNotFoundError(f"no such directory: {path}")
    if not isdir:
        raise NotADirectoryError(f"not a directory: {path}")
    return path


def _logdir_note(notes: list | None) -> decode.Note:
    """A note about the logdir (not one run): warned, and kept in ``notes``."""

    def note(message: str) -> None:
        warnings.warn(message, NeuralDbgDataWarning, stacklevel=2)
        if notes is not None:
            notes.append(message)

    return note


def read_logdir(logdir, notes: list | None = None) -> list[Run]:
    """Every run under ``logdir`` that holds readable neuraldbg data, sorted by name.

    Run names are TensorBoard's (the path relative to ``logdir``, "." for
    ``logdir`` itself). Returns [] when there is no neuraldbg data. Raises
    FileNotFoundError / NotADirectoryError for a bad path, and nothing for
    bad data: a run of a newer format version, a FIFO or a symlink loop is
    skipped with one ``NeuralDbgDataWarning`` line, also appended to
    ``notes`` when a list is given (notes about one run's data are that
    run's ``warnings``).
    """
    logdir = _check_dir(logdir)
    note = _logdir_note(notes)
    runs = []
    for found in logdir_files.list_runs(logdir, note):
        try:
            run = _build_run(found.name, found.path, found.files)
        except FormatError as e:
            note(f"{e}: run not read")
            continue
        if run is not None:
            runs.append(run)
    return runs


def read_run(path, name: str | None = None) -> Run:
    """The neuraldbg data of the event files directly in directory ``path``.

    ``name`` defaults to the directory's base name. Raises ValueError when
    the directory holds no neuraldbg data, FormatError (a ValueError) when
    it holds data of a newer format version.
    """
    path = _check_dir(path)
    if not name:
        local = "://" not in path
        name = os.path.basename(os.path.abspath(path)) if local else path.rstrip("/").rsplit("/", 1)[-1]
    files = logdir_files.run_files(path, _logdir_note(None))
    run = _build_run(name, path, files)
    if run is None:
        raise ValueError(f"no neuraldbg data in {path}")
    return run
