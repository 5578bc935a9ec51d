"""Every cell explained (issue 44), in a real browser on the demo logdir.

Writes the demo runs (``neuraldbg demo --no-serve``), takes the ground truth
from ``neuraldbg report --json``, starts ``tensorboard --logdir`` and runs
tests/browser/check_cells.mjs (playwright-core + headless Debian chromium):
GradScaler-skipped steps hatched and said so, a metric sampled every N steps
held and said so, rows without the metric saying why, each layer's first
failing cell at its event's step, the banner's title and advice, the
<optimizer> root cause's cells, one root-cause marker, and the onset marker
outlining (not hiding) bad_batch's single-step cell. A screenshot per item
goes to tests/browser/screenshots/cells_*.png.

Skips only when chromium is missing and CI is not set (as test_browser.py);
under CI it runs.
"""

import json

import pytest

from tests.browser_checks import SHOTS, browser_prerequisites, has_demo, neuraldbg, run_check

pytestmark = pytest.mark.slow  # trains the demo, chromium, node and a real tensorboard


def test_cells_explained_on_the_demo(tmp_path):
    chromium, node = browser_prerequisites()
    if not has_demo():
        pytest.skip("the demo scenarios are not installed")
    logdir = tmp_path / "demo"
    demo = neuraldbg("demo", "--no-serve", "--logdir", str(logdir))
    assert demo.returncode == 0, f"neuraldbg demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
    rep = neuraldbg("report", str(logdir), "--json", timeout=300)
    assert rep.returncode == 0, rep.stderr
    report = json.loads(rep.stdout)
    runs = {r["run"] for r in report["runs"]}
    assert {"amp_scaler", "vanishing", "exploding", "nan_op", "bad_batch"} <= runs, runs
    report_path = tmp_path / "report.json"
    report_path.write_text(rep.stdout)
    run_check("check_cells.mjs", logdir, runs, tmp_path, chromium, node, ND_REPORT=str(report_path))
    for item in ("skipped", "empty_rows", "sampled", "onset", "banner", "optimizer", "onset_outline"):
        assert (SHOTS / f"cells_{item}.png").stat().st_size > 10_000, item
