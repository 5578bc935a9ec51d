"""tb_neuraldbg.format.contract and offline.text_report: the contract JSON (validated by docs/report.schema.json) and the text."""

from __future__ import annotations

import json
import math
import pathlib

import jsonschema
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.cli import main
from tb_neuraldbg.format.contract import (
    EVENT_KEYS,
    ROOT_CAUSE_KEYS,
    NeuralDbgDataWarning,
    logdir_report,
    run_report,
)
from tb_neuraldbg.offline.text_report import _width, format_report
from tests.synthetic import Plant, derive_diagnosis, event, write_run

SCHEMA = json.loads(
    (pathlib.Path(__file__).resolve().parents[1] / "docs" / "report.schema.json").read_text()
)


def validate(report):
    jsonschema.Draft202012Validator(SCHEMA).validate(report)


def _events():
    return [
        event(47, "encoder.layers.3.linear1", "vanishing_gradient", value=3e-5, value_before=0.12,
              message="Gradient norm fell from 0.12 to 3e-05. Try a different initialisation."),
        event(3, "<input>", "data_anomaly", value=math.nan, message="The batch holds NaN."),
        event(47, "fc1", "dead_activation", value=0.93),
        event(60, "fc1", "dead_activation", from_state="dead", to_state="healthy", severity="info",
              value=math.inf),
    ]


# ---------------------------------------------------------------------------
# The schema itself


def test_schema_is_valid_and_matches_metadata():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$defs"]["kind"]["enum"] == list(metadata.KINDS)
    assert SCHEMA["$defs"]["event"]["required"] == list(EVENT_KEYS)
    root = SCHEMA["$defs"]["run"]["properties"]["root_cause"]["oneOf"][1]
    assert root["required"] == list(ROOT_CAUSE_KEYS)


def test_schema_rejects_what_the_contract_forbids():
    good = run_report("r", None, _events())
    validate({"runs": [good]})
    for mutate in (
        lambda r: r["events"][0].update(extra=1),  # no extra keys
        lambda r: r["events"][0].update(kind="bogus"),
        lambda r: r["events"][0].update(value="NaN"),
        lambda r: r.update(status="ok"),
        lambda r: r.pop("root_cause"),
    ):
        bad = json.loads(json.dumps(good))
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate({"runs": [bad]})


# ---------------------------------------------------------------------------
# run_report


def test_run_report_has_exactly_the_contract_keys_sorted_by_step():
    diag = derive_diagnosis(_events())
    r = run_report("mlp", diag, _events())
    validate(logdir_report([r]))
    assert list(r) == ["run", "status", "root_cause", "events"]
    assert all(tuple(e) == EVENT_KEYS for e in r["events"])
    # Stable sort: the two step-47 events keep their given order.
    assert [(e["step"], e["layer"]) for e in r["events"]] == [
        (3, "<input>"), (47, "encoder.layers.3.linear1"), (47, "fc1"), (60, "fc1")
    ]
    assert r["status"] == "failing"
    assert r["root_cause"] == {"kind": "data_anomaly", "layer": "<input>", "step": 3,
                               "message": "The batch holds NaN."}
    # JSON has no NaN/Infinity: non-finite values become null, finite ones stay.
    assert [e["value"] for e in r["events"]] == [None, 3e-5, 0.93, None]
    json.dumps(r, allow_nan=False)


def test_status_without_diagnosis_comes_from_warning_and_error_events():
    warn_only = [e for e in _events() if e["severity"] != "error"]
    info_only = [e for e in _events() if e["severity"] == "info"]
    assert info_only and len(warn_only) > len(info_only)
    assert run_report("a", None, info_only)["status"] == "healthy"
    assert run_report("a", None, warn_only)["status"] == "failing"
    assert run_report("a", None, _events())["status"] == "failing"
    assert run_report("a", None, _events())["root_cause"] is None
    # A stored diagnosis wins over the events (it is what the engine decided).
    healthy = {"status": "healthy", "root_cause": None}
    assert run_report("a", healthy, _events())["status"] == "healthy"
    # ... with a root cause too: a run whose findings are all warnings that
    # were resolved is healthy with warnings (DESIGN.md, Severity and status)
    warned = {"status": "healthy", "root_cause": {"kind": "initial_loss", "layer": "<loss>", "step": 0,
                                                  "message": "m"}}
    assert run_report("a", warned, [])["status"] == "healthy"


def test_bad_records_are_skipped_with_warnings():
    events = _events() + [
        {"step": "x", "layer": "fc", "kind": "nonfinite"},
        {**_events()[0], "kind": "not_a_kind"},
        {**_events()[0], "step": True},
        {**_events()[0], "severity": "fatal"},
        "not a dict",
        {**_events()[0], "step": 5.0},  # an integral float is a fine step
    ]
    with pytest.warns(NeuralDbgDataWarning) as rec:
        r = run_report("r", {"status": "broken", "root_cause": None}, events)
    assert len(rec) == 6  # five bad events and the bad diagnosis
    assert len(r["events"]) == 5 and r["events"][1]["step"] == 5
    assert r["status"] == "failing"  # derived, since the diagnosis was unusable
    validate(logdir_report([r]))


# ---------------------------------------------------------------------------
# format_report


def _lines(text):
    return text.rstrip("\n").split("\n")


@pytest.mark.parametrize("width", [80, 60, 40])
def test_text_fits_the_width(width):
    long_layer = "transformer.encoder.layers.11.self_attention.multi_head.out_projection_weight"
    events = _events() + [
        event(90, long_layer, "exploding_gradient", value=1e9, message="x" * 200),
        event(91, "层" * 50, "nonfinite", message="宽字符" * 40),
    ]
    r = run_report("a/very/long/run/name/" + "n" * 100, derive_diagnosis(events), events)
    text = format_report(r, width=width)
    assert max(_width(line) for line in _lines(text)) <= width
    assert "FAILING" in _lines(text)[0]
    # A long layer name is cut in the middle, keeping its most specific end.
    assert long_layer[-10:] in text
    # Wide characters are wrapped by columns, not cut: the whole message is there.
    assert "".join(l.strip() for l in _lines(text)).count("宽字符") == 40


def test_text_puts_root_cause_before_the_timeline_and_keeps_every_event():
    events = _events()
    text = format_report({"runs": [run_report("mlp", derive_diagnosis(events), events),
                                   run_report("ok", None, [])]})
    lines = _lines(text)
    root = next(i for i, l in enumerate(lines) if l.startswith("Root cause: <input>: data_anomaly at step 3"))
    timeline = next(i for i, l in enumerate(lines) if l.startswith("Timeline ("))
    assert root < timeline
    assert "Timeline (1 error, 2 warnings, 1 info):" in lines
    for e in events:  # step and layer on one line; the kind on it or the next
        assert any(e["layer"] in l and l.lstrip("> ").startswith(str(e["step"]))
                   and e["kind"] in l + lines[i + 1] for i, l in enumerate(lines[:-1])), e
    # The root-cause event is marked in the timeline, and only it.
    assert [l for l in lines if l.startswith(">")] == [
        ">  3  ERROR  <input>  data_anomaly  healthy -> data_anomaly"]
    assert "Gradient norm fell from 0.12 to 3e-05." in text
    assert lines[-1] == "2 runs: 1 failing, 1 healthy"
    assert "No failure found." in lines


def test_text_escapes_control_characters():
    bad = event(1, "fc\x1b[2J", "nonfinite", message="evil \x1b]0;title\x07 \r\n msg")
    text = format_report(run_report("run\x1b[31m", None, [bad]))
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\\x1b[2J" in text


def test_long_timelines_are_cut_but_keep_errors():
    events = [event(i, f"fc{i % 7}", "dead_activation") for i in range(200)]
    events.append(event(150, "fc3", "exploding_gradient"))
    text = format_report(run_report("r", None, events), max_events=20)
    assert "fc3  exploding_gradient" in text
    assert "181 more events not shown" in text
    assert sum(1 for l in _lines(text) if "dead_activation" in l) == 19


def test_empty_report():
    assert "No runs" in format_report({"runs": []})


# ---------------------------------------------------------------------------
# The CLI's output against the schema (more CLI behaviour in test_cli.py)


def test_cli_json_validates_and_matches_what_was_written(tmp_path, capsys):
    ev = [event(12, "fc1", "exploding_gradient", value=3e7, value_before=0.01),
          event(15, "fc2", "vanishing_gradient", value=1e-9)]
    write_run(tmp_path, "bad", num_steps=30, events=ev, confirm_delay=2,
              plants=[Plant(step=12, layer="fc1", values={"grad_norm": 3e7}, until=29)])
    write_run(tmp_path, "good", num_steps=10)
    assert main(["report", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    validate(out)
    bad, good = out["runs"]
    assert (bad["run"], good["run"]) == ("bad", "good")
    assert bad["status"] == "failing" and good["status"] == "healthy"
    assert bad["events"] == [{k: e[k] for k in EVENT_KEYS} for e in ev]
    assert bad["root_cause"] == derive_diagnosis(ev)["root_cause"]
    assert good == {"run": "good", "status": "healthy", "root_cause": None, "events": []}


def test_cli_text_fits_80_columns(tmp_path, capsys):
    ev = [event(3, "backbone.stages.3.blocks.12.attention.qkv_projection", "exploding_gradient",
                value=1e12, message="Gradient norm " + "grew " * 40)]
    write_run(tmp_path, "r", num_steps=5, events=ev)
    assert main(["report", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert max(len(l) for l in _lines(text)) <= 80
    assert "qkv_projection" in text and "Root cause:" in text


def test_compact_timeline_groups_one_step_of_spreading_events():
    spread = [event(25, layer, "nonfinite", message=f"{layer}: non-finite") for layer in
              ("0", "1", "2", "<loss>", "2")]
    events = [event(25, "<input>", "data_anomaly", message="bad batch")] + spread + [
        event(26, "3", "nonfinite"),  # another step: its own entry
        event(25, "fc", "dead_activation"),  # another kind: its own entry
    ]
    r = run_report("r", derive_diagnosis(events), events)
    lines = _lines(format_report(r))
    entries = [l for l in lines if l.lstrip("> ").split("  ")[0].isdigit()]
    assert len(entries) == 4
    assert "  25  ERROR  0, 1, 2, <loss>  nonfinite  healthy -> nonfinite" in lines
    assert any("0: non-finite (+4 similar; --all lists each)" in l for l in lines)
    assert lines[[i for i, l in enumerate(lines) if l.startswith(">")][0]].endswith(
        "<input>  data_anomaly  healthy -> data_anomaly")
    # compact=False: one entry per event, every message.
    full = _lines(format_report(r, compact=False))
    assert len([l for l in full if l.lstrip("> ").split("  ")[0].isdigit()]) == len(events)
    assert "similar" not in "\n".join(full)


def test_compact_entry_with_many_layers_fits():
    events = [event(7, f"encoder.layers.{i}.self_attn.out_proj", "nonfinite") for i in range(40)]
    text = format_report(run_report("r", None, events), width=60)
    assert max(_width(l) for l in _lines(text)) <= 60
    assert "more" in text and "encoder.layers.0.self_attn.out_proj" in text


def test_a_healthy_run_with_a_resolved_warning_says_so():
    """DESIGN.md, Severity and status: a root cause beside a healthy status
    is a run whose warnings were resolved; the text report says both."""
    root = {"kind": "initial_loss", "layer": "<loss>", "step": 0, "message": "Try: a smaller init."}
    text = format_report({"runs": [run_report("r", {"status": "healthy", "root_cause": root}, [])]})
    assert "healthy, with warnings" in text and "Root cause: <loss>: initial_loss at step 0" in text
