"""The held-out scorer's scoring logic (benchmarks/heldout_score.py), on synthetic reports only.

No case is trained here: the reports are hand-written dicts shaped like ``neuraldbg report --json``.
"""

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "heldout_score.py")
_spec = importlib.util.spec_from_file_location("heldout_score", _PATH)
hs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hs)

TRUTH = {"kind": ["nonfinite"], "layer": ["attn", "enc.*"], "step": [40, 41]}


def report(root=None, status=None, events=()):
    """A one-run report as the CLI prints it."""
    if status is None:
        status = "failing" if root else "healthy"
    return {"runs": [{"run": ".", "status": status, "root_cause": root, "events": list(events)}]}


def root(kind="nonfinite", layer="attn", step=40):
    return {"kind": kind, "layer": layer, "step": step, "message": "m"}


def event(severity, kind="loss_plateau", layer="<loss>", step=3):
    return {"step": step, "layer": layer, "kind": kind, "from_state": "healthy", "to_state": "x",
            "value": None, "severity": severity, "message": "m"}


def test_a_root_cause_matching_kind_layer_and_step_is_fully_right():
    r = hs.score_case(TRUTH, report(root()))
    assert (r["fully_right"], r["kind_right"], r["layer_right"], r["step_right"], r["silent"]) == (
        True, True, True, True, False)


@pytest.mark.parametrize("found, wrong", [
    (root(kind="exploding_gradient"), "kind_right"),
    (root(layer="head"), "layer_right"),
    (root(step=39), "step_right"),
    (root(step=42), "step_right"),
])
def test_one_wrong_part_makes_it_not_fully_right(found, wrong):
    r = hs.score_case(TRUTH, report(found))
    assert r["fully_right"] is False
    assert r[wrong] is False
    assert all(r[k] for k in ("kind_right", "layer_right", "step_right") if k != wrong)


def test_layer_patterns_match_module_names_not_substrings():
    assert hs.score_case(TRUTH, report(root(layer="enc.layers.0.linear1")))["layer_right"] is True
    assert hs.score_case(TRUTH, report(root(layer="attn.out_proj")))["layer_right"] is False
    assert hs.score_case(TRUTH, report(root(layer="encoder")))["layer_right"] is False


def test_no_root_cause_is_silent_and_wrong():
    r = hs.score_case(TRUTH, report(None, status="healthy"))
    assert r["silent"] is True and r["fully_right"] is False and r["kind_right"] is False


def test_a_crashed_failing_case_is_a_miss_with_its_reason():
    r = hs.score_case(TRUTH, None, error="training exited 1: RuntimeError: boom")
    assert r["crashed"] is True and r["fully_right"] is False and r["silent"] is False
    assert "boom" in r["reason"] and "exited 1" in r["reason"]


def test_a_report_without_exactly_one_run_is_a_miss():
    r = hs.score_case(TRUTH, {"runs": []})
    assert r["crashed"] is True and "0 runs" in r["reason"]


def test_a_healthy_run_with_only_warnings_passes_and_is_counted_as_warned():
    r = hs.score_case({"healthy": True}, report(None, "healthy", [event("warning"), event("info")]))
    assert (r["passed"], r["false_alarm"], r["warned"]) == (True, False, True)


def test_a_healthy_case_with_an_error_event_or_failing_status_is_a_false_alarm():
    r1 = hs.score_case({"healthy": True}, report(None, "healthy", [event("error")]))
    r2 = hs.score_case({"healthy": True}, report(root(), "failing"))
    assert r1["false_alarm"] is True and r1["passed"] is False
    assert r2["false_alarm"] is True and r2["found"]["layer"] == "attn"


def test_a_crashed_healthy_case_does_not_pass():
    r = hs.score_case({"healthy": True}, None, error="training timed out after 5s")
    assert r["crashed"] is True and r["passed"] is False and r["false_alarm"] is False


def test_totals_count_each_outcome():
    results = [
        hs.score_case(TRUTH, report(root())),
        hs.score_case(TRUTH, report(root(layer="head"))),
        hs.score_case(TRUTH, report(None, "healthy")),
        hs.score_case(TRUTH, None, error="x"),
        hs.score_case({"healthy": True}, report(None, "healthy")),
        hs.score_case({"healthy": True}, report(None, "healthy", [event("warning")])),
        hs.score_case({"healthy": True}, report(root(), "failing", [event("error")])),
    ]
    t = hs.totals(results)
    assert (t["failing_cases"], t["fully_right"], t["kind_right"], t["layer_right"], t["silent"],
            t["failing_crashed"]) == (4, 1, 2, 1, 1, 1)
    assert (t["healthy_cases"], t["healthy_passed"], t["false_alarms"], t["warned"]) == (3, 2, 1, 1)
    table = hs.format_table([f"c{i}" for i in range(7)], results, t)
    assert "fully right 1/4" in table and "false alarms 1" in table and "CRASH" in table


def test_fixed_twins_are_scored_as_healthy_runs_and_counted_apart():
    bug = hs.score_case(TRUTH, report(root()))
    bug["twin"] = hs.score_case({"healthy": True}, report(None, "healthy"))
    other = hs.score_case(TRUTH, report(root()))
    other["twin"] = hs.score_case({"healthy": True}, report(root(kind="loss_plateau", layer="<loss>"), "failing"))
    t = hs.totals([bug, other])
    assert (t["twins_scored"], t["twins_passed"], t["fully_right"]) == (2, 1, 2)
    table = hs.format_table(["a", "b"], [bug, other], t)
    assert "ALARM loss_plateau @ <loss>" in table and "fixed twins of the failing cases: healthy 1/2" in table


def test_discover_lists_case_files_and_refuses_unknown_names(tmp_path):
    for name in ("f01_a.py", "h01_b.py", "_case.py", "README.md", "scores.json"):
        (tmp_path / name).write_text("")
    assert [n for n, _ in hs.discover(str(tmp_path))] == ["f01_a", "h01_b"]
    assert [n for n, _ in hs.discover(str(tmp_path), ["h01_b"])] == ["h01_b"]
    with pytest.raises(ValueError):
        hs.discover(str(tmp_path), ["nope"])


def test_every_truth_record_uses_the_contract_vocabulary():
    """Each dec07 case's kinds come from report.schema.json; steps are a window; healthy cases say what they fool."""
    import json
    root = os.path.dirname(_PATH)
    with open(os.path.join(os.path.dirname(root), "docs", "report.schema.json")) as f:
        kinds = set(json.load(f)["$defs"]["kind"]["enum"])
    cases = hs.discover(os.path.join(root, "heldout", "dec07"))
    assert sum(n.startswith("f") for n, _ in cases) >= 16 and sum(n.startswith("h") for n, _ in cases) >= 10
    for name, path in cases:
        truth = hs.load_truth(path)
        assert truth.get("source"), name
        if truth["healthy"]:
            assert truth.get("fools"), name
            continue
        assert truth["kind"] and set(truth["kind"]) <= kinds, name
        assert truth["layer"] and all(isinstance(x, str) for x in truth["layer"]), name
        lo, hi = truth["step"]
        assert 0 <= lo <= hi, name


@pytest.mark.slow
def test_a_case_that_crashes_is_scored_as_a_miss_with_its_reason(tmp_path):
    case = tmp_path / "f99_crash.py"
    case.write_text('CASE = {"kind": ["nonfinite"], "layer": ["x"], "step": [0, 1], "source": "s"}\n'
                    'if __name__ == "__main__":\n'
                    '    raise RuntimeError("boom: the case failed to train")\n')
    r = hs._one(("f99_crash", str(case)), timeout=60, with_truth=False)
    assert r["crashed"] is True and r["fully_right"] is False
    assert "boom" in r["reason"] and "exited 1" in r["reason"]


def test_a_case_file_that_exits_on_import_is_a_miss_not_the_end_of_the_run(tmp_path):
    case = tmp_path / "h99_exits.py"
    case.write_text('raise SystemExit("no CASE here")\n')
    r = hs._one(("h99_exits", str(case)), timeout=60, with_truth=False)
    assert r["crashed"] is True and r["passed"] is False and "cannot load" in r["reason"]
