"""Read neuraldbg data from a logdir without a TensorBoard server.

A run is a directory holding event files with neuraldbg data; it is named as
TensorBoard names it, by its path relative to the logdir ("." for the logdir
itself), and its event files are read in name order (``logdir.py``). Files
are read by a bounded record reader of our own (``records.py``), not by
TensorBoard's: only records holding neuraldbg tags are parsed, no length is
trusted, and what cannot be read is named.

A run written by several writers one after another is read as one
(``format/sessions.py``): a writer resumed with ``purge_step`` N hides what
the earlier ones wrote from step N on; a run whose last writer did not close
it (killed, or still writing) says so (``Run.complete`` False, a note, and
``Run.incomplete``); two writers writing one run at the same time (their
files' records interleave in time and steps) are said in one note.

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

from ..format import decode, metadata, sessions
from ..format.contract import NeuralDbgDataWarning, unclosed_note
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
    corrupt record, a lost tail, a skipped record, a writer that did not
    close it), so that its diagnosis may miss what that data held.
    ``complete``: True when the run's last writer closed it, False when it
    did not (its process was killed, or it is still writing: what it had
    not written after ``last_step`` is missing), None for a run written
    before writers marked their close.
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
    complete: bool | None = None

    @property
    def last_step(self) -> int | None:
        """The last logged step (None: no step yet)."""
        return int(self.steps[-1]) if self.steps.shape[0] else None

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
        self.walls: dict = {}
        self.tensors: dict = {}
        self._owner: dict = {}  # tag -> plugin name of its first metadata

    def add(self, event) -> bool:
        """Keep the event's neuraldbg values; True when it held data (a
        value of a tag other than the sessions')."""
        data = False
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
            self.walls.setdefault(tag, []).append(event.wall_time)
            self.tensors.setdefault(tag, []).append(value.tensor)
            data = data or tag not in sessions.TAGS
        return data

    def purge(self, purges) -> None:
        """Drop the records that a resumed writer's purge step hides."""
        for tag in list(self.steps):
            keep = sessions.kept(self.steps[tag], self.walls[tag], purges)
            if keep is not None:
                for d in (self.steps, self.walls, self.tensors):
                    d[tag] = [v for v, k in zip(d[tag], keep) if k]

    def has_data(self) -> bool:
        return any(tag not in sessions.TAGS and steps for tag, steps in self.steps.items())

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

    def walls_of(self, tag: str) -> list:
        return self.walls.get(tag, [])


class _Span:
    """The wall times and steps one event file's data records cover."""

    def __init__(self, name: str):
        self.name = name
        self.walls = [float("inf"), float("-inf")]
        self.steps = [float("inf"), float("-inf")]

    def add(self, wall: float, step: int) -> None:
        self.walls = [min(self.walls[0], wall), max(self.walls[1], wall)]
        self.steps = [min(self.steps[0], step), max(self.steps[1], step)]

    def overlaps(self, other: "_Span") -> bool:
        return (self.walls[0] < other.walls[1] and other.walls[0] < self.walls[1]
                and self.steps[0] <= other.steps[1] and other.steps[0] <= self.steps[1])


def _concurrent_writers(spans: list) -> str | None:
    """One line when two of the run's files were written at the same time
    over the same steps (two writers in one run directory), else None."""
    spans = [s for s in spans if s.walls[0] <= s.walls[1]]
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            if a.overlaps(b):
                return (f"two writers wrote this run at the same time ({a.name} and {b.name}, "
                        f"steps {int(max(a.steps[0], b.steps[0]))} to {int(min(a.steps[1], b.steps[1]))} "
                        "in both): their records interleave and are read as one; give each writer "
                        "its own log_dir")
    return None


def _read_records(name: str, files: list, note: _Notes) -> _Records:
    """Every neuraldbg record of the run's event files, in reading order."""
    recs = _Records(name, note)
    spans = []
    for path in files:
        shown = path.replace("\\", "/").rsplit("/", 1)[-1]  # the run's name says where
        span = _Span(shown)
        spans.append(span)
        try:
            for event in records.read_events(path, note.lost, shown):
                if recs.add(event):
                    span.add(event.wall_time, event.step)
        except records.NotRegularFile as e:
            note.add(f"skipped {shown}: {e}", lost=False)
        except OSError as e:
            note.lost(f"{shown}: cannot be read ({e.strerror or e})")
    both = _concurrent_writers(spans) if len(spans) > 1 else None
    if both:
        note.add(both, lost=False)
    return recs


# ---------------------------------------------------------------------------
# Runs


def _row_series(recs: _Records, note: decode.Note, max_width: int) -> dict:
    """{tag: decode.Rows} of the run's per-step tags (every metric, the states)."""
    row_tags = [t for t in sorted(recs.steps) if metadata.metric_of_tag(t) or t == metadata.TAG_STATES]
    return {t: decode.decode_tag_rows(t, *recs.get(t), note, max_width) for t in row_tags}


def _json_series(recs: _Records, note: decode.Note) -> dict:
    """{tag: decode.JsonRecords, with wall times} of every JSON tag (empty when absent)."""
    return {tag: decode.decode_json(*recs.get(tag), note, tag, recs.walls_of(tag))
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
    if not recs.has_data():  # (a writer's start alone: no data yet)
        note.finish()
        return None
    timed = {t: decode.decode_json(*recs.get(t), note, t, recs.walls_of(t)) for t in sessions.TAGS}
    sess = sessions.read_sessions(timed[metadata.TAG_SESSION_START], timed[metadata.TAG_SESSION_END], note)
    recs.purge(sess.purges)
    records = _json_series(recs, note)
    pairs = {tag: r.pairs() for tag, r in records.items()}
    named = decode.layer_list(pairs[metadata.TAG_LAYERS])
    series = _row_series(recs, note, decode.row_limit(len(named)))
    del recs
    steps, layer_counts = _step_axis(series)
    width = int(layer_counts.max(initial=0))
    layers = decode.layer_list(pairs[metadata.TAG_LAYERS], width, note)
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
        events=decode.run_events(pairs[metadata.TAG_EVENTS], note),
        diagnosis=sessions.combined_diagnosis(records[metadata.TAG_DIAGNOSIS], sess, note),
        config=decode.run_config(pairs[metadata.TAG_CONFIG], note),
        complete=sess.complete,
    )
    if sess.complete is False:
        note.lost(unclosed_note(run.last_step))
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
