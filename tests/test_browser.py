"""The TensorBoard tab in a real browser against a real ``tensorboard``.

Writes a logdir (``neuraldbg demo --no-serve`` when the demo scenarios are
installed, else synthetic runs from tests/synthetic.py), adds a run whose
names and messages are HTML (must render as text), takes the ground truth
from ``neuraldbg report --json``, starts ``tensorboard --logdir`` and runs
tests/browser/check_tab.mjs (playwright-core + headless Debian chromium):
heatmap drawn, root-cause row and event list equal to the report, hover,
click, keyboard, zoom, reload, metric, compare, screenshots, and a 1,000 x
2,000 heatmap drawn on a real canvas (its draw time is measured by
benchmarks/frontend_draw.mjs, not asserted here).

A second test drives the same bundle against tests/browser/mock_server.mjs
(docs/API.md shapes) for what a real logdir cannot easily show: the loading,
empty and error states, and that a superseded slow answer is never drawn.

A third runs tests/browser/check_tree.mjs on a big model (a 56-block
transformer, 510 rows, and a healthy run of it): the module tree, the
filter and the anomalies-first order, their URL and reloads, the run list.
It saves the README's screenshot in tests/browser/screenshots/; with
ND_UPDATE_SCREENSHOT=1 it also copies it to docs/screenshot.png (the tracked
image changes only when asked).

All skip only when chromium is missing and CI is not set; under CI they run.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.browser_checks import BROWSER_DIR, ROOT, SHOTS, browser_prerequisites, has_demo, neuraldbg, run_check
from tests.synthetic import Plant, event, make_layers, write_run

UNTRUSTED_RUN = "zz_untrusted<b class=evil>run</b>"
# The run exercised in depth and shown in the README screenshot: the first of
# these that the report finds failing (else the first run with a root cause).
FOCUS_PREFERENCE = ("exploding", "exploding_lr", "nan_op", "vanishing", "dead_relu")
HOSTILE = "<img src=x onerror=window.__nd_hacked=true>"

pytestmark = pytest.mark.slow  # chromium, node and a real tensorboard


def _write_synthetic(logdir: Path) -> None:
    """Fallback logdir: two failing runs and a healthy control."""
    write_run(
        logdir, "exploding_lr", num_modules=6, num_steps=200,
        plants=[Plant(step=80, layer="fc3", state="exploding", values={"grad_norm": 1e5}, until=199),
                Plant(step=86, layer="fc4", state="exploding", values={"grad_norm": 1e6}, until=199)],
        events=[event(80, "fc3", "exploding_gradient", value=1e5,
                      message="Gradient norm of fc3 jumped from 1.2e-2 to 1e5. Lower the learning rate or clip gradients."),
                event(86, "fc4", "exploding_gradient", value=1e6)],
    )
    write_run(
        logdir, "nan_op", num_modules=5, num_steps=150, seed=1,
        plants=[Plant(step=60, layer="fc2", state="nonfinite", values={"act_nonfinite": 12.0}, until=149)],
        events=[event(60, "fc2", "nonfinite", value=12.0,
                      message="fc2 produced NaN/inf from finite inputs. Check log/sqrt/division in its forward.")],
    )
    write_run(logdir, "healthy", num_modules=6, num_steps=200, seed=2)


def _write_untrusted(logdir: Path) -> None:
    """A run whose layer names and messages are HTML: must show as text."""
    layers = make_layers(3, prefix=f"{HOSTILE}fc")
    bad = f"{HOSTILE}fc1"
    write_run(
        logdir, UNTRUSTED_RUN, layers=layers, num_steps=40, seed=3,
        plants=[Plant(step=10, layer=bad, state="exploding", values={"grad_norm": 1e4}, until=39)],
        events=[event(10, bad, "exploding_gradient", value=1e4,
                      message=f'<b class="evil">boom</b>{HOSTILE}')],
    )


BIG_RUN = "big_transformer"
BIG_ROOT = "blocks.37.mlp.fc1"
BIG_BLOCK = ("ln1", "LayerNorm"), ("attn.q_proj", "Linear"), ("attn.k_proj", "Linear"), ("attn.v_proj", "Linear"), \
    ("attn.out_proj", "Linear"), ("ln2", "LayerNorm"), ("mlp.fc1", "Linear"), ("mlp.act", "GELU"), ("mlp.fc2", "Linear")


def big_model_layers(blocks: int = 56) -> list[dict]:
    """Rows of a transformer of ``blocks`` blocks (507 modules at 56), in forward order."""
    rows = [{"name": "<input>", "type": "input"}, {"name": "embed", "type": "Embedding"}]
    rows += [{"name": f"blocks.{b}.{m}", "type": t} for b in range(blocks) for m, t in BIG_BLOCK]
    rows += [{"name": "ln_f", "type": "LayerNorm"}, {"name": "head", "type": "Linear"},
             {"name": "<loss>", "type": "loss"}, {"name": "<optimizer>", "type": "optimizer"}]
    return rows


def _write_big_model(logdir: Path) -> None:
    """A 56-block transformer (510 rows) failing in blocks.37.mlp.fc1, and a healthy run of it."""
    layers = big_model_layers()
    last = 99
    fails = [  # (layer, state, kind, onset)
        (BIG_ROOT, "exploding", "exploding_gradient", 40),
        ("blocks.37.mlp.fc2", "exploding", "exploding_gradient", 44),
        ("blocks.38.attn.q_proj", "exploding", "exploding_gradient", 47),
        ("head", "exploding", "exploding_gradient", 52),
        ("<loss>", "loss_spike", "loss_spike", 55),
        ("blocks.5.ln1", "saturated", "saturated_activation", 60),
    ]
    write_run(
        logdir, BIG_RUN, layers=layers, num_steps=last + 1, seed=4,
        plants=[Plant(step=s, layer=l, state=st, values={"grad_norm": 3e4 * (i + 1)}, until=last)
                for i, (l, st, _, s) in enumerate(fails)],
        events=[event(s, l, k, value=3e4 * (i + 1),
                      message=f"{l}: gradient norm jumped to {3e4 * (i + 1):.0e}." if k == "exploding_gradient" else None)
                for i, (l, _, k, s) in enumerate(fails)],
    )
    write_run(logdir, "big_healthy", layers=layers, num_steps=last + 1, seed=5)




def test_tab_states_with_mock_backend():
    chromium, node = browser_prerequisites()
    proc = subprocess.run([node, str(BROWSER_DIR / "check_states.mjs")], env=dict(os.environ, CHROMIUM=chromium),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    print(proc.stdout)
    assert proc.returncode == 0, f"browser checks failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"


def test_tab_in_real_tensorboard(tmp_path):
    chromium, node = browser_prerequisites()

    logdir = tmp_path / "logdir"
    if has_demo():
        demo = neuraldbg("demo", "--no-serve", "--logdir", str(logdir))
        assert demo.returncode == 0, f"neuraldbg demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
        source = "neuraldbg demo"
    else:
        _write_synthetic(logdir)
        source = "tests/synthetic.py (demo scenarios not installed)"
    _write_untrusted(logdir)

    rep = neuraldbg("report", str(logdir), "--json", timeout=300)
    assert rep.returncode == 0, rep.stderr
    report = json.loads(rep.stdout)
    assert any(r["root_cause"] for r in report["runs"]), "no failing run in the logdir to check"
    causes = {r["run"] for r in report["runs"] if r["root_cause"]}
    focus = next((r for r in FOCUS_PREFERENCE if r in causes), "")
    report_path = tmp_path / "report.json"
    report_path.write_text(rep.stdout)

    results_path = SHOTS / "results.json"
    print(f"logdir from {source}")
    run_check("check_tab.mjs", logdir, {r["run"] for r in report["runs"]}, tmp_path, chromium, node,
              ND_REPORT=str(report_path), ND_RESULTS=str(results_path), ND_UNTRUSTED_RUN=UNTRUSTED_RUN,
              ND_FOCUS_RUN=focus)


def test_tree_on_a_big_model(tmp_path):
    chromium, node = browser_prerequisites()
    logdir = tmp_path / "logdir"
    _write_big_model(logdir)
    extra = {}
    if os.environ.get("ND_UPDATE_SCREENSHOT", "").strip() not in ("", "0"):
        extra["ND_DOCS_SHOT"] = str(ROOT / "docs" / "screenshot.png")
    run_check("check_tree.mjs", logdir, {BIG_RUN, "big_healthy"}, tmp_path, chromium, node,
              ND_RUN=BIG_RUN, ND_ROOT=BIG_ROOT, ND_HEALTHY="big_healthy", **extra)
