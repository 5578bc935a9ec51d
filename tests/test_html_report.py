"""tb_neuraldbg.offline.html_report and ``neuraldbg export``: a safe, self-contained HTML file."""

from __future__ import annotations

import html.parser
import re

from tb_neuraldbg import cli, metadata
from tb_neuraldbg.offline.html_report import STATE_COLORS, render_html
from tb_neuraldbg.reader import read_logdir
from tb_neuraldbg.format.contract import run_report
from tests.synthetic import Plant, event, write_run


class _Collector(html.parser.HTMLParser):
    """Tags and text of a document, to assert on structure rather than bytes."""

    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(doc):
    c = _Collector()
    c.feed(doc)
    return c


def test_untrusted_strings_are_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    write_run(tmp_path, "r<img src=x onerror=alert(1)>", num_steps=4,
              layers=[{"name": evil, "type": "Linear"}],
              events=[event(1, evil, "nonfinite", message=evil)])
    runs = read_logdir(tmp_path)
    reports = [run_report(r.name, r.diagnosis, r.events) for r in runs]
    doc = render_html(reports, runs)
    parsed = _parse(doc)
    assert not any(tag in ("script", "img", "iframe") for tag, _ in parsed.tags)
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    assert evil in "".join(parsed.text)  # shown as text, intact


def test_state_map_shows_planted_states_and_root_layer(tmp_path):
    write_run(tmp_path, "r", num_modules=4, num_steps=500,
              plants=[Plant(step=200, layer="fc2", state="vanishing", until=499),
                      Plant(step=300, layer="fc1", state="nonfinite")],
              events=[event(300, "fc1", "nonfinite")])
    runs = read_logdir(tmp_path)
    reports = [run_report(r.name, r.diagnosis, r.events) for r in runs]
    parsed = _parse(render_html(reports, runs, max_cols=100))
    rects = [a for t, a in parsed.tags if t == "rect"]
    fills = {a["fill"] for a in rects}
    assert {STATE_COLORS["healthy"], STATE_COLORS["vanishing"], STATE_COLORS["nonfinite"]} <= fills
    # The single non-finite step survives binning 500 steps into 100 columns.
    (nf,) = [a for a in rects if a["fill"] == STATE_COLORS["nonfinite"]]
    assert float(nf["width"]) > 0
    # Runs of equal cells are merged: far fewer rects than rows x columns.
    assert len(rects) < 20
    bold = [a for t, a in parsed.tags if t == "text" and a.get("font-weight") == "700"]
    assert len(bold) == 1  # the root-cause layer's label
    assert "root" in {a.get("class") for t, a in parsed.tags if t == "tr"}


def test_state_map_turns_at_the_events_onset(tmp_path):
    """A layer born vanishing whose rows turn only once the state is
    confirmed (step 29): the export's map, like the tab's, shows it from the
    event's step 0 (format/event_states.py)."""
    write_run(tmp_path, "r", num_modules=3, num_steps=100,
              plants=[Plant(step=29, layer="fc1", state="vanishing", until=99)],
              events=[event(0, "fc1", "vanishing_gradient", from_state="healthy", to_state="vanishing")])
    runs = read_logdir(tmp_path)
    reports = [run_report(r.name, r.diagnosis, r.events) for r in runs]
    parsed = _parse(render_html(reports, runs, max_cols=100))
    vanishing = [a for t, a in parsed.tags if t == "rect" and a["fill"] == STATE_COLORS["vanishing"]]
    assert vanishing and min(float(a["x"]) for a in vanishing) == min(
        float(a["x"]) for t, a in parsed.tags if t == "rect")


def test_export_command(tmp_path, capsys):
    write_run(tmp_path / "logs", "bad", num_steps=5, events=[event(1, "fc0", "nonfinite")])
    out = tmp_path / "report.html"
    assert cli.main(["export", str(tmp_path / "logs"), "-o", str(out), "--fail-on", "error"]) == 1
    doc = out.read_text(encoding="utf-8")
    assert doc.startswith("<!doctype html>") and "bad" in doc and "nonfinite" in doc
    assert re.search(r"1 run, 1 failing", doc)
    assert "wrote" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "logs"), "-o", str(tmp_path / "no" / "x.html")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "missing"), "-o", str(out)]) == 2


def test_reports_without_runs_render_without_a_map():
    doc = render_html([run_report("r", None, [event(3, "fc", "dead_activation")])])
    assert "<svg" not in doc and "dead_activation" in doc
    assert metadata.PLUGIN_NAME in doc
