"""The HTML export names what a user recognises: layer names never broken
inside a word, steps labelled along the state map's axis, a run directory
named by its directory (tb_neuraldbg/offline/html_report.py)."""

from __future__ import annotations

import html.parser
import re

from tb_neuraldbg import cli
from tb_neuraldbg.offline.html_report import axis_ticks, map_label
from tests.synthetic import Plant, event, make_layers, write_run

LONG = "encoder.layers.11.attention.self_attention.softmax"
PSEUDO = "<optimizer>"


class _Svg(html.parser.HTMLParser):
    """The texts of the export's <text> elements by class, and each <code class=name> as markup."""

    def __init__(self):
        super().__init__()
        self.texts: list[tuple[str, str, str]] = []  # (class, title, text)
        self.names: list[list[str]] = []  # per <code class=name>: its text pieces between tags
        self._text: dict | None = None
        self._code: list[str] | None = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "text":
            self._text = {"class": a.get("class", ""), "title": "", "text": ""}
        elif tag == "title" and self._text is not None:
            self._in_title = True
        elif tag == "code" and a.get("class") == "name":
            self._code = [""]
        elif tag == "wbr" and self._code is not None:
            self._code.append("")

    def handle_endtag(self, tag):
        if tag == "text" and self._text is not None:
            self.texts.append((self._text["class"], self._text["title"], self._text["text"]))
            self._text = None
        elif tag == "title":
            self._in_title = False
        elif tag == "code" and self._code is not None:
            self.names.append(self._code)
            self._code = None

    def handle_data(self, data):
        if self._text is not None:
            self._text["title" if self._in_title else "text"] += data
        if self._code is not None:
            self._code[-1] += data


def _export(tmp_path, logdir, name="out.html") -> _Svg:
    out = tmp_path / name
    assert cli.main(["export", str(logdir), "-o", str(out)]) in (0, 1)
    parsed = _Svg()
    parsed.feed(out.read_text(encoding="utf-8"))
    return parsed


def test_map_label_keeps_whole_segments():
    assert map_label("fc1") == "fc1"
    assert map_label(PSEUDO) == PSEUDO
    label = map_label(LONG)
    assert label.startswith("\u2026") and LONG.endswith("." + label[1:]), label
    assert len(label) <= 36
    # A single segment longer than the column: cut with an ellipsis (the title has it whole).
    assert map_label("x" * 50) == "x" * 35 + "\u2026"


def test_axis_ticks_are_round_steps():
    assert axis_ticks(0, 299, 8) == list(range(0, 300, 50))
    assert axis_ticks(13, 97, 4) == [20, 40, 60, 80]
    assert axis_ticks(5, 5, 8) == [5]


def test_export_names_are_whole_and_the_axis_has_ticks(tmp_path):
    layers = make_layers(3)  # ends with <loss>, <optimizer>
    layers.insert(-2, {"name": LONG, "type": "Softmax"})
    write_run(tmp_path, "run", layers=layers, num_steps=300,
              plants=[Plant(step=120, layer=LONG, state="exploding", values={"grad_norm": 1e5}, until=299)],
              events=[event(120, LONG, "exploding_gradient", value=1e5),
                      event(130, PSEUDO, "exploding_gradient", value=1e5)])
    doc = _export(tmp_path, tmp_path)
    labels = [(title, text) for cls, title, text in doc.texts if cls == "layer"]
    assert {t for t, _ in labels} == {x["name"] for x in layers}
    for title, text in labels:
        assert text == title or (text.startswith("\u2026") and title.endswith("." + text[1:])), (title, text)
    ticks = [int(text) for cls, _, text in doc.texts if cls == "tick"]
    assert len(ticks) >= 4 and ticks == sorted(ticks), ticks
    assert all(t % 10 == 0 for t in ticks), ticks
    # Break opportunities only after the dots: the pieces rejoin into the name, each ends a segment.
    pieces = {"".join(p): p for p in doc.names}
    assert LONG in pieces and PSEUDO in pieces
    assert pieces[LONG] == [s + "." for s in LONG.split(".")[:-1]] + [LONG.split(".")[-1]]
    assert pieces[PSEUDO] == [PSEUDO]


def test_export_of_a_run_dir_names_the_run(tmp_path):
    write_run(tmp_path, "exp1", num_steps=5)
    out = tmp_path / "o.html"
    cli.main(["export", str(tmp_path / "exp1"), "-o", str(out)])
    heads = re.findall(r"<h2>(.*?) <span", out.read_text(encoding="utf-8"))
    assert heads == ["exp1"], heads
