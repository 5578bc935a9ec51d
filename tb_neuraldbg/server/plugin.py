"""The NeuralDbg TensorBoard plugin: loader, plugin and HTTP routes.

Routes and JSON shapes are specified in docs/API.md. Each ``*_route`` only
parses the request (``query.py``) and answers; the matching ``*_impl`` does
the work and is testable without HTTP. Data comes only from
``context.data_provider`` (through plugin_data.PluginData); bad input raises
``tensorboard.errors.InvalidArgumentError`` (400) or ``NotFoundError`` (404),
which TensorBoard's WSGI app turns into plain-text answers.

The logdir is untrusted (docs/API.md, "Untrusted logdirs"): bad data never
makes a 500, answers are bounded (events paged, the report cut per run,
strings at MAX_TEXT characters), a run of a newer format is refused alone,
and what a run's report depends on is cached until its tags change.
"""

from __future__ import annotations

import functools
import gzip
import logging
import os
from typing import Sequence

import numpy as np
from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from ..format import binning, contract, crc, decode, metadata
from ..format.event_states import apply_spans, event_spans
from . import cells, heatmap, jsonfast, query
from .align import align, column, step_slice
from .plugin_data import FULL_DOWNSAMPLE, PluginData

__all__ = ["NeuralDbgLoader", "NeuralDbgPlugin"]

logger = logging.getLogger(__name__)

# The bundle lives at the package root (tb_neuraldbg/static/), beside the faces.
_STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
_BUNDLE = os.path.join(_STATIC_DIR, "index.js")
BUILD_HINT = "cd frontend && npm ci && npm run build"
# Served instead of a 404 when the bundle was not built, so the tab explains
# itself. The message is a constant: nothing from the request is echoed.
_MISSING_BUNDLE_JS = (
    "export function render() {\n"
    "  const p = document.createElement('p');\n"
    "  p.style.cssText = 'font: 14px sans-serif; margin: 24px; color: #b00020';\n"
    "  p.textContent = 'NeuralDbg: frontend bundle not built: run `%s` in the "
    "tb_neuraldbg source tree, then reload this page (reinstall the package if it "
    "is not an editable install).';\n"
    "  document.body.appendChild(p);\n"
    "}\n" % BUILD_HINT
)

DEFAULT_MAX_COLS = 1000
MAX_MAX_COLS = 5000
# A heatmap answer holds at most this many cells; with very many layers the
# number of columns is lowered to fit (the answer's "cols" says how many).
MAX_CELLS = 8_000_000
DEFAULT_EVENT_LIMIT = 1000
MAX_EVENT_LIMIT = 10000
MAX_LAYER_POINTS = 100_000
# Events per run in a `report` answer unless `limit` says otherwise.
DEFAULT_REPORT_LIMIT = 1000
# Characters of one string from a logdir in an answer (a message, a layer or
# state name); longer ones are cut with a marker (the CLI's JSON keeps them).
MAX_TEXT = 10_000
_MAX_OFFSET = 2**31
_FORMATS = ("json", "b64")
_FAST_GZIP_BYTES = 1 << 20

# /meta's copy of the state and metric tables: the tab draws with these
# (its built-in copy is only a fallback for an older server).
_STATES = [
    {"code": s.code, "name": s.name, "severity": s.severity, "rank": s.rank, "kind": s.kind,
     "evidence": s.evidence, "color": s.color, "label": s.label}
    for s in metadata.STATE_TABLE
]
_METRIC_INFO = [
    {"name": m.name, "scale": m.scale, "label": m.label, "description": m.description}
    for m in metadata.METRIC_TABLE
]
_COLORS = {"no_data": metadata.NO_DATA_COLOR, "unknown_state": metadata.UNKNOWN_STATE_COLOR}
# The writers' session records: whether a run was closed (format/sessions.py).
_SESSION_TAGS = (metadata.TAG_SESSION_START, metadata.TAG_SESSION_END)


def _respond(request, body, *, compress: bool = True) -> wrappers.Response:
    """JSON answer. ``compress=False`` is for base64 payloads of raw floats:
    gzip barely shrinks them and costs a third of a second for a big heatmap."""
    text = jsonfast.encode(body)
    if not compress:
        return wrappers.Response(text, content_type="application/json", headers=[
            ("X-Content-Type-Options", "nosniff"),
            ("Expires", "0"),
            ("Cache-Control", "no-cache, must-revalidate"),
        ])
    if len(text) > _FAST_GZIP_BYTES and request.accept_encodings["gzip"] > 0:
        # Respond would gzip at level 3: for a large heatmap that is most of
        # the answer's time budget; level 1 takes a fraction of it for a few
        # more bytes (benchmarks/plugin_scale.py).
        text = gzip.compress(text, compresslevel=1, mtime=0)
        return http_util.Respond(request, text, "application/json", content_encoding="gzip")
    return http_util.Respond(request, text, "application/json")


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]} [... {len(text) - MAX_TEXT} more characters]"


def _capped(item: dict) -> dict:
    """An event or root cause with its strings at most MAX_TEXT characters."""
    if all(len(v) <= MAX_TEXT for v in item.values() if isinstance(v, str)):
        return item
    return {k: _cut(v) if isinstance(v, str) else v for k, v in item.items()}


# -- the plugin -----------------------------------------------------------------


class NeuralDbgPlugin(base_plugin.TBPlugin):
    """Serves the NeuralDbg tab: heatmap, events, layer detail, report."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context):
        hint = (context.sampling_hints or {}).get(metadata.PLUGIN_NAME, 0)
        self._data = PluginData(context.data_provider, downsample=hint or FULL_DOWNSAMPLE)
        self._warned_bundle = False

    def get_plugin_apps(self):
        return {
            "/index.js": self.index_js_route,
            "/runs": self.runs_route,
            "/meta": self.meta_route,
            "/heatmap": self.heatmap_route,
            "/events": self.events_route,
            "/layer": self.layer_route,
            "/report": self.report_route,
        }

    def is_active(self):
        # TensorBoard shows the tab when list_plugins() has our name.
        return False

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="NeuralDbg")

    # -- shared reads ---------------------------------------------------

    def _listing(self, ctx, eid: str, run: str) -> dict:
        found = self._data.listing(ctx, eid, run)
        if run in found.refused:
            raise errors.NotFoundError(f"run {run[:200]!r} is not read: {found.refused[run]}")
        listing = found.runs.get(run)
        if not listing:
            raise errors.NotFoundError(f"no neuraldbg data for run {run[:200]!r}")
        return listing

    @staticmethod
    def _version(listing: dict, tags) -> tuple:
        """What a value derived from ``tags`` depends on: their listed versions."""
        return tuple((t, listing[t].max_step, listing[t].max_wall_time)
                     for t in sorted(set(tags)) if t in listing)

    def _run_report(self, ctx, eid: str, run: str, listing: dict) -> dict:
        """The run's contract report (cached per version of its events and
        diagnosis: 200,000 events are not coerced again on every request).
        Shared: callers copy what they change."""
        tags = (metadata.TAG_EVENTS, metadata.TAG_DIAGNOSIS, *_SESSION_TAGS)

        def build() -> dict:
            series = self._data.read(ctx, eid, run, tags, listing)
            note = self._data.note(run)
            rep = contract.run_report(run, self._data.diagnosis(series, run),
                                      self._data.events(series, run), note)
            rep["events"] = [_capped(e) for e in rep["events"]]
            if rep["root_cause"] is not None:
                rep["root_cause"] = _capped(rep["root_cause"])
            return rep

        # Coerced events weigh about 400 bytes each in memory.
        return self._data.memo(eid, run, "report", self._version(listing, tags), build,
                               lambda rep: 4096 + 400 * len(rep["events"]))

    def _complete(self, ctx, eid: str, run: str, listing: dict) -> bool | None:
        """Whether the run's last writer closed it (``format.sessions``;
        None: written before writers marked their close)."""
        series = self._data.read(ctx, eid, run, _SESSION_TAGS, listing)
        return self._data.run_sessions(series, run).complete

    def _annotated(self, run: str, body: dict, complete: bool | None = None,
                   last_step: int | None = None) -> dict:
        """``body`` with the notes kept about the run, and for a run whose
        writer did not close it ``complete`` false, its ``last_step`` and a
        line saying so (``contract.annotate``)."""
        notes = self._data.warnings(run)
        if complete is False:
            notes = notes + [contract.unclosed_note(last_step)]
        return contract.annotate(body, notes, any(decode.is_skip(n) for n in notes), complete, last_step)

    @staticmethod
    def _axis_tag(listing: dict) -> str:
        """The tag whose steps are the run's logged steps: the states, or
        (a writer that stores no states) the first stats tag present."""
        if metadata.TAG_STATES in listing:
            return metadata.TAG_STATES
        stats = [metadata.stats_tag(m) for m in metadata.METRICS]
        return next((t for t in stats if t in listing), metadata.TAG_STATES)

    def _axis(self, series: dict) -> np.ndarray:
        """The run's logged steps: those of the states tag, else of any stats tag."""
        s = series.get(metadata.TAG_STATES)
        if s is None:
            s = next((v for t, v in series.items() if metadata.metric_of_tag(t)), None)
        return s.steps if s is not None else np.zeros(0, dtype=np.int64)

    @staticmethod
    def _width(series: dict) -> int:
        return max(
            (s.data.shape[1] for s in series.values()
             if isinstance(s.data, np.ndarray) and s.data.ndim == 2),
            default=0,
        )

    # -- impls ------------------------------------------------------------

    def runs_impl(self, ctx, eid: str) -> dict:
        """Every run with neuraldbg data, its status and root cause; the
        runs refused (a newer format version) under "skipped"."""
        out = []
        found = self._data.listing(ctx, eid)
        tags = (metadata.TAG_LAYERS, metadata.TAG_EVENTS, metadata.TAG_DIAGNOSIS, *_SESSION_TAGS)
        for run in sorted(found.runs):
            listing = found.runs[run]
            axis = self._axis_tag(listing)

            def build(run=run, listing=listing, axis=axis) -> dict:
                layers, first, last, count = self._span(ctx, eid, run, listing, axis, tags)
                rep = self._run_report(ctx, eid, run, listing)
                body = {
                    "run": run,
                    "status": rep["status"],
                    "root_cause": rep["root_cause"],
                    "num_layers": len(layers),
                    "first_step": first,
                    "last_step": last,
                    "num_steps": count,
                    "num_events": len(rep["events"]),
                }
                complete = self._complete(ctx, eid, run, listing)
                if complete is not None:  # (runs written before writers marked their close: absent)
                    body["complete"] = complete
                return body

            version = self._version(listing, (axis, *tags, *heatmap.block_tags(None)))
            summary = self._data.memo(eid, run, "summary", version, build)
            out.append(self._annotated(run, dict(summary), summary.get("complete"), summary["last_step"]))
        skipped = [{"run": run, "reason": found.refused[run]} for run in sorted(found.refused)]
        return {"runs": out, "skipped": skipped}

    def meta_impl(self, ctx, eid: str, run: str) -> dict:
        """Layers, metrics, state codes and step span of one run."""
        listing = self._listing(ctx, eid, run)
        layers, first, last, count = self._span(ctx, eid, run, listing, self._axis_tag(listing),
                                                (metadata.TAG_LAYERS,))
        return {
            "run": run,
            "layers": layers,
            "metrics": list(metadata.METRICS),
            "states": _STATES,
            "metric_info": _METRIC_INFO,
            "colors": _COLORS,
            "first_step": first,
            "last_step": last,
            "num_steps": count,
            "warnings": self._data.warnings(run),
        }

    def _span(self, ctx, eid: str, run: str, listing: dict, axis: str, tags) -> tuple:
        """(layers, first step, last step, number of logged steps) of a run:
        from its block spans where they stand for its rows (a few KB), else
        from the steps of ``axis``; ``tags`` are read too."""
        blocks = heatmap.block_series(self._data, ctx, eid, run, listing)
        if blocks is not None:
            series = {**blocks.series, **self._data.read(ctx, eid, run, tags, listing)}
            return (self._data.layers(series, self._width(series), run), int(blocks.first[0]),
                    int(blocks.last[-1]), int(blocks.rows.sum()))
        series = self._data.read(ctx, eid, run, (axis, *tags), listing)
        steps = self._axis(series)
        return (self._data.layers(series, self._width(series), run),
                int(steps[0]) if steps.size else None, int(steps[-1]) if steps.size else None,
                int(steps.size))

    def heatmap_impl(self, ctx, eid: str, run: str, metric: str, start: int, end: int,
                     max_cols: int, fmt: str = "json") -> dict:
        """One metric (or "state") of a run, binned to at most max_cols columns:
        from its block summaries where they give the same cells (see
        ``heatmap``), else from its rows."""
        if metric != binning.STATE_METRIC and metric not in metadata.METRIC_INDEX:
            raise errors.NotFoundError(
                f"unknown metric {metric[:60]!r}; expected 'state' or one of: "
                f"{', '.join(metadata.METRICS)}"
            )
        listing = self._listing(ctx, eid, run)
        notes: dict = {}
        hm = self._binned_blocks(ctx, eid, run, listing, metric, start, end, max_cols, notes)
        if hm is None:
            hm = self._binned_steps(ctx, eid, run, listing, metric, start, end, max_cols, notes)
        layers, binned, hm = hm
        body = {
            "run": run,
            "metric": metric,
            "rows": len(layers),
            "cols": int(hm.col_start.shape[0]),
            "layers": [l["name"] for l in layers],
            "col_start": hm.col_start,
            "col_end": hm.col_end,
            "binned": binned,
        }
        body.update(notes)
        if fmt == "b64":
            values = np.ascontiguousarray(hm.values, dtype="<f4")  # no copy on little-endian
            body["values_b64"] = jsonfast.Base64Text(values)
            body["states_b64"] = jsonfast.Base64Text(np.ascontiguousarray(hm.states))
        else:
            body["values"] = hm.values
            body["states"] = hm.states
        return body

    @staticmethod
    def _cols(max_cols: int, width: int) -> int:
        return max(1, min(max_cols, MAX_CELLS // max(width, 1)))

    def _binned_blocks(self, ctx, eid, run, listing, metric, start, end, max_cols, notes=None):
        """(layers, "blocks", Heatmap) from the run's block summaries, or None
        where they do not give the cells its rows give (``heatmap``); ``notes``
        receives the cell notes of docs/API.md (``cells.block_notes``)."""
        blocks = heatmap.block_series(self._data, ctx, eid, run, listing, metric)
        if blocks is None:
            return None
        window = heatmap.blocks_in(blocks, start, end)
        series = blocks.series
        layers = self._data.layers(series, self._width(series), run)
        width = len(layers)
        cols = self._cols(max_cols, width)
        if window is None or window.stop - window.start < cols:
            return None
        keys = blocks.last
        states = align(series[metadata.TAG_BLOCK_STATES], keys, width, metadata.STATE_UNKNOWN,
                        np.uint8)[window]
        states = apply_spans(states, blocks.first[window], blocks.last[window],
                             self._spans(ctx, eid, run, listing, layers))
        values = whole = None
        if metric != binning.STATE_METRIC:
            whole = align(series[metadata.block_stats_tag(metric)], keys, width, np.nan, np.float32)
            values = whole[window]
        hm = binning.bin_heatmap(blocks.first[window], values, states, cols, metric,
                                 last_steps=blocks.last[window])
        if notes is not None:
            notes.update(cells.block_notes(cells.run_config(series), [l["name"] for l in layers], metric,
                                           values, whole, hm, blocks, window, self._skips(ctx, eid, run, listing)))
        return layers, "blocks", hm

    def _skips(self, ctx, eid, run, listing):
        """``skips(names)``: the run's skipped steps, cached (``cells.run_skips``)."""
        return functools.partial(cells.run_skips, self._data, ctx, eid, run, listing,
                                 version=self._version(listing, cells.SKIP_TAGS))

    def _spans(self, ctx, eid, run, listing, layers) -> list:
        """The (row, state, first, last) spans the run's events give its cells
        (``format.event_states``: a state shows from its event's
        onset, not from its confirmation)."""
        names = [l["name"] for l in layers]
        tags = (metadata.TAG_EVENTS, metadata.TAG_DIAGNOSIS, *_SESSION_TAGS)
        # Cached like the report they come from (a long run has many events);
        # keyed by the layer list too, which only grows.
        return self._data.memo(eid, run, f"spans{len(names)}", self._version(listing, tags),
                               lambda: event_spans(self._run_report(ctx, eid, run, listing)["events"],
                                                   names, query.MAX_STEP),
                               lambda spans: 4096 + 64 * len(spans))

    def _event_states(self, ctx, eid, run, listing, series, layers, axis) -> np.ndarray:
        """The run's states [len(axis), L] on ``axis`` with its events' spans
        (``_spans``): built once per version of the states and the events,
        then cached (a zoom or another metric only slices it)."""
        tags = (metadata.TAG_STATES, metadata.TAG_EVENTS, metadata.TAG_DIAGNOSIS, *_SESSION_TAGS)
        key = f"states{len(layers)}:{axis.shape[0]}:{int(axis[-1]) if axis.size else -1}"

        def build() -> np.ndarray:
            states = align(series.get(metadata.TAG_STATES), axis, len(layers), metadata.STATE_UNKNOWN, np.uint8)
            return apply_spans(states, axis, axis, self._spans(ctx, eid, run, listing, layers))

        return self._data.memo(eid, run, key, self._version(listing, tags), build, lambda a: 4096 + a.nbytes)

    def _binned_steps(self, ctx, eid, run, listing, metric, start, end, max_cols, notes=None):
        """(layers, "steps", Heatmap) from the run's rows; ``notes`` (a dict)
        receives the cell notes of docs/API.md (``cells.heatmap_notes``)."""
        tags = [metadata.TAG_STATES, metadata.TAG_LAYERS]
        stats = None
        if metric != binning.STATE_METRIC:
            stats = metadata.stats_tag(metric)
            tags.append(stats)
        series = self._data.read(ctx, eid, run, tags, listing)
        layers = self._data.layers(series, self._width(series), run)
        width = len(layers)
        axis = series[stats].steps if stats in series else self._axis(series)
        window = step_slice(axis, start, end)
        steps = axis[window]
        states = self._event_states(ctx, eid, run, listing, series, layers, axis)[window]
        values = whole = None
        if stats is not None:
            whole = align(series.get(stats), axis, width, np.nan, np.float32)
            values = whole[window]
        hm = binning.bin_heatmap(steps, values, states, self._cols(max_cols, width), metric)
        if notes is not None:
            config = cells.run_config(self._data.read(ctx, eid, run, (metadata.TAG_CONFIG,), listing))
            notes.update(cells.heatmap_notes(config, [l["name"] for l in layers], metric, steps, values, whole, hm,
                                             self._skips(ctx, eid, run, listing)))
        return layers, "steps", hm

    def events_impl(self, ctx, eid: str, run: str, *, kinds=(), layers=(), severities=(),
                    start: int = 0, end: int = query.MAX_STEP,
                    limit: int = DEFAULT_EVENT_LIMIT, offset: int = 0) -> dict:
        """The run's events (contract keys, sorted by onset step), filtered;
        ``limit`` of them from ``offset`` on (a page)."""
        listing = self._listing(ctx, eid, run)
        events = [
            e for e in self._run_report(ctx, eid, run, listing)["events"]
            if start <= e["step"] <= end
            and (not kinds or e["kind"] in kinds)
            and (not layers or e["layer"] in layers)
            and (not severities or e["severity"] in severities)
        ]
        page = events[offset: offset + limit]
        return {"run": run, "total": len(events), "offset": offset,
                "truncated": offset + len(page) < len(events), "events": page}

    def layer_impl(self, ctx, eid: str, run: str, layer: str, start: int, end: int,
                   metrics: Sequence[str] = (), event_limit: int = DEFAULT_EVENT_LIMIT,
                   event_offset: int = 0) -> dict:
        """One layer at full resolution over [start, end]; ``metrics`` limits
        the metrics returned (default: all); ``event_limit`` of the layer's
        events in range from ``event_offset`` on."""
        metrics = list(dict.fromkeys(metrics)) or list(metadata.METRICS)
        listing = self._listing(ctx, eid, run)
        head = self._data.read(ctx, eid, run, (metadata.TAG_LAYERS, metadata.TAG_STATES,
                                               self._axis_tag(listing)), listing)
        stats_tags = [metadata.stats_tag(m) for m in metrics]
        layers = self._data.layers(head, self._width(head), run)
        names = [l["name"] for l in layers]
        if layer not in names:
            raise errors.NotFoundError(f"unknown layer {layer[:200]!r} in run {run[:200]!r}")
        row = names.index(layer)
        axis = self._axis(head)
        window = step_slice(axis, start, end)
        n = window.stop - window.start
        if n > MAX_LAYER_POINTS:
            raise errors.InvalidArgumentError(
                f"{n} steps in [{start}, {end}]; at most {MAX_LAYER_POINTS} per request: "
                "narrow the range with start and end"
            )
        steps = axis[window]
        # The provider cannot select a row or a step range: each metric of the
        # whole run is read to return one row. Matrices already cached (the
        # heatmap's) are used, but these wide reads must not evict them.
        stats = self._data.read(ctx, eid, run, stats_tags, listing, keep=False)
        columns = {
            m: column(stats.get(metadata.stats_tag(m)), row, steps, np.nan, np.float32)
            for m in metrics
        }
        states = column(head.get(metadata.TAG_STATES), row, steps, metadata.STATE_UNKNOWN,
                         np.uint8)
        spans = [(0, *rest) for r, *rest in self._spans(ctx, eid, run, listing, layers) if r == row]
        states = apply_spans(states[:, None], steps, steps, spans)[:, 0]
        events = [
            e for e in self._run_report(ctx, eid, run, listing)["events"]
            if e["layer"] == layer and start <= e["step"] <= end
        ]
        page = events[event_offset: event_offset + event_limit]
        return {"run": run, "layer": layer, "type": layers[row]["type"], "steps": steps,
                "metrics": columns, "states": states, "events": page,
                "events_total": len(events),
                "events_truncated": event_offset + len(page) < len(events)}

    def report_impl(self, ctx, eid: str, limit: int = DEFAULT_REPORT_LIMIT) -> dict:
        """``neuraldbg report --json`` for every run, at most ``limit`` events
        per run (the first by onset step; a run cut says "truncated" and its
        "total_events"); runs refused are named in "notes"."""
        found = self._data.listing(ctx, eid)
        runs = []
        for run in sorted(found.runs):
            listing = found.runs[run]
            rep = dict(self._run_report(ctx, eid, run, listing))
            if len(rep["events"]) > limit:
                rep["total_events"] = len(rep["events"])
                rep["truncated"] = True
                rep["events"] = rep["events"][:limit]
            complete = self._complete(ctx, eid, run, listing)
            last = None
            if complete is False:
                last = self._span(ctx, eid, run, listing, self._axis_tag(listing), ())[2]
            runs.append(self._annotated(run, rep, complete, last))
        notes = [f"run {run[:200]!r}: {why}: run not read" for run, why in sorted(found.refused.items())]
        return contract.logdir_report(runs, notes)

    def index_js_impl(self) -> str:
        """The frontend bundle, or a module that says it was not built."""
        try:
            with open(_BUNDLE, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            if not self._warned_bundle:
                logger.warning("neuraldbg: %s is missing; run `%s`", _BUNDLE, BUILD_HINT)
                self._warned_bundle = True
            return _MISSING_BUNDLE_JS

    # -- routes -----------------------------------------------------------------

    @staticmethod
    def _ids(request):
        return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)

    @wrappers.Request.application
    def index_js_route(self, request):
        return http_util.Respond(request, self.index_js_impl(), "text/javascript")

    @wrappers.Request.application
    def runs_route(self, request):
        return _respond(request, self.runs_impl(*self._ids(request)))

    @wrappers.Request.application
    def meta_route(self, request):
        run = query.required(request.args, "run")
        return _respond(request, self.meta_impl(*self._ids(request), run))

    @wrappers.Request.application
    def heatmap_route(self, request):
        args = request.args
        run, metric, start, end = query.run_span(args, "metric")
        max_cols = query.int_arg(args, "max_cols", DEFAULT_MAX_COLS, 1, MAX_MAX_COLS)
        fmt = args.get("format") or "json"
        if fmt not in _FORMATS:
            raise errors.InvalidArgumentError(f"format must be one of {', '.join(_FORMATS)}")
        body = self.heatmap_impl(*self._ids(request), run, metric, start, end, max_cols, fmt)
        return _respond(request, body, compress=fmt != "b64")

    @wrappers.Request.application
    def events_route(self, request):
        args = request.args
        run, start, end = query.run_span(args)
        body = self.events_impl(
            *self._ids(request), run,
            kinds=query.choices(args, "kind", metadata.KINDS),
            layers=args.getlist("layer"),
            severities=query.choices(args, "severity", metadata.SEVERITIES),
            start=start, end=end,
            limit=query.int_arg(args, "limit", DEFAULT_EVENT_LIMIT, 1, MAX_EVENT_LIMIT),
            offset=query.int_arg(args, "offset", 0, 0, _MAX_OFFSET),
        )
        return _respond(request, body)

    @wrappers.Request.application
    def layer_route(self, request):
        args = request.args
        run, layer, start, end = query.run_span(args, "layer")
        metrics = query.choices(args, "metric", metadata.METRICS)
        body = self.layer_impl(
            *self._ids(request), run, layer, start, end, metrics,
            event_limit=query.int_arg(args, "event_limit", DEFAULT_EVENT_LIMIT, 1, MAX_EVENT_LIMIT),
            event_offset=query.int_arg(args, "event_offset", 0, 0, _MAX_OFFSET),
        )
        return _respond(request, body)

    @wrappers.Request.application
    def report_route(self, request):
        limit = query.int_arg(request.args, "limit", DEFAULT_REPORT_LIMIT, 1, MAX_EVENT_LIMIT)
        return _respond(request, self.report_impl(*self._ids(request), limit))


class NeuralDbgLoader(base_plugin.TBLoader):
    """Entry point: keeps every neuraldbg step and builds the plugin."""

    def fix_flags(self, flags):
        # The heatmap needs every logged step; TensorBoard would otherwise keep
        # a random sample of 100 (Rust loader) or 10 (Python loader) per tag.
        # An explicit --samples_per_plugin=neuraldbg=N still wins.
        spp = getattr(flags, "samples_per_plugin", None)
        if isinstance(spp, dict):
            spp.setdefault(metadata.PLUGIN_NAME, 0)

    def load(self, context):
        # TensorBoard's Python reader (without TensorFlow) checks every
        # record's checksum in pure Python: C where installed, same result.
        crc.use_fast_crc()
        return NeuralDbgPlugin(context)
