"""Runs side by side, names a user recognises, and the HTML export, in a real browser.

Writes a logdir of a failing run and its healthy twin (shorter, and one layer
different each way, so the shared step axis and the row alignment have
something to do), with names that hold a comma, an equals sign and a slash,
and a run with a long name; exports it with ``neuraldbg export``; starts
``tensorboard --logdir`` and runs tests/browser/check_runs.mjs (playwright-core
+ headless chromium): both runs opened from a URL with
``p.neuraldbg.runs=a,b``, their panels (``data-run``) on one step axis with
the same rows at the same heights, the hover echoed, the event list and the
root cause naming their run, a reload keeping them, one run in the URL too,
the run list's names uncut, and the export's layer names whole with ticks
along its axis.

A second test opens the demo's ``exploding`` run and its ``healthy`` control
from a URL the same way (``neuraldbg demo --no-serve``; skipped when the demo
scenarios are not installed). Screenshots go to tests/browser/screenshots/;
with ND_UPDATE_SCREENSHOT=1 the demo's side-by-side one (the synthetic one
without the demo) is also copied to docs/screenshot_runs.png, the README's image.

Skips only when chromium is missing and CI is not set; under CI it runs.
"""

from __future__ import annotations

import os

import pytest

from tests.browser_checks import ROOT, browser_prerequisites, has_demo, neuraldbg, run_check
from tests.synthetic import Plant, event, make_layers, write_run

pytestmark = pytest.mark.slow  # chromium, node and a real tensorboard

FAILING = "exploding, lr=0.1"
TWIN = "healthy twin (lr=1e-3)"
LONG_RUN = "sweep/adamw_lr3e-4_warmup500_batch256_seed3"
SOFTMAX = "encoder.layers.11.attention.self_attention.softmax"
ONLY_TWIN = "fc6"


def _write_logdir(logdir) -> None:
    """The failing run (200 steps, has SOFTMAX), its twin (120 steps, has fc6), a long-named run."""
    failing_layers = make_layers(6)
    failing_layers.insert(-2, {"name": SOFTMAX, "type": "Softmax"})
    write_run(
        logdir, FAILING, layers=failing_layers, num_steps=200, seed=1,
        plants=[Plant(step=80, layer="fc3", state="exploding", values={"grad_norm": 1e5}, until=199),
                Plant(step=86, layer=SOFTMAX, state="exploding", values={"grad_norm": 1e6}, until=199)],
        events=[event(80, "fc3", "exploding_gradient", value=1e5,
                      message="Gradient norm of fc3 jumped from 1.2e-2 to 1e5. Lower the learning rate."),
                event(86, SOFTMAX, "exploding_gradient", value=1e6),
                event(90, "<optimizer>", "exploding_gradient", value=3e3)],
    )
    write_run(logdir, TWIN, layers=make_layers(7), num_steps=120, seed=2)
    write_run(logdir, LONG_RUN, num_modules=3, num_steps=50, seed=3)




def _check_runs(tmp_path, logdir, runs: set[str], chromium: str, node: str, **extra: str) -> None:
    """check_runs.mjs against ``logdir`` once tensorboard lists ``runs``, ``extra`` as ND_ variables."""
    run_check("check_runs.mjs", logdir, runs, tmp_path, chromium, node,
              **{f"ND_{k.upper()}": v for k, v in extra.items()})


def _update_screenshot() -> bool:
    return os.environ.get("ND_UPDATE_SCREENSHOT", "").strip() not in ("", "0")




def test_runs_side_by_side_and_the_export(tmp_path):
    chromium, node = browser_prerequisites()
    logdir = tmp_path / "logdir"
    _write_logdir(logdir)
    export = tmp_path / "export.html"
    done = neuraldbg("export", str(logdir), "-o", str(export))
    assert export.is_file(), done.stderr
    extra = {}
    if _update_screenshot() and not has_demo():
        extra["docs_shot"] = str(ROOT / "docs" / "screenshot_runs.png")
    _check_runs(tmp_path, logdir, {FAILING, TWIN, LONG_RUN}, chromium, node, run_a=FAILING, run_b=TWIN,
                long_run=LONG_RUN, only_a=SOFTMAX, only_b=ONLY_TWIN, hover_layer="fc3", shorter_b="1",
                export=str(export), **extra)


def test_demo_runs_side_by_side(tmp_path):
    if not has_demo():
        pytest.skip("the demo scenarios are not installed (tb_neuraldbg._demo)")
    chromium, node = browser_prerequisites()
    logdir = tmp_path / "logdir"
    demo = neuraldbg("demo", "--no-serve", "--logdir", str(logdir))
    assert demo.returncode == 0, f"neuraldbg demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
    extra = {"docs_shot": str(ROOT / "docs" / "screenshot_runs.png")} if _update_screenshot() else {}
    _check_runs(tmp_path, logdir, {"exploding", "healthy"}, chromium, node, run_a="exploding", run_b="healthy",
                hover_layer="fc2", shot_name="runs_demo.png", **extra)
