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
import os
import subprocess
import sys

import pytest

from tests.plugin_server import serve
from tests.test_browser import BROWSER_DIR, ROOT, _browser_prerequisites, _has_demo, _neuraldbg

pytestmark = pytest.mark.slow  # trains the demo, chromium, node and a real tensorboard


def test_cells_explained_on_the_demo(tmp_path):
    chromium, node = _browser_prerequisites()
    if not _has_demo():
        pytest.skip("the demo scenarios are not installed")
    logdir = tmp_path / "demo"
    demo = _neuraldbg("demo", "--no-serve", "--logdir", str(logdir))
    assert demo.returncode == 0, f"neuraldbg demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
    rep = _neuraldbg("report", str(logdir), "--json", timeout=300)
    assert rep.returncode == 0, rep.stderr
    report = json.loads(rep.stdout)
    runs = {r["run"] for r in report["runs"]}
    assert {"amp_scaler", "vanishing", "exploding", "nan_op", "bad_batch"} <= runs, runs
    report_path = tmp_path / "report.json"
    report_path.write_text(rep.stdout)
    shots = BROWSER_DIR / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    with serve(logdir, log_path=tmp_path / "tensorboard.log") as tb:
        tb.wait_for(f"tensorboard to list the runs {sorted(runs)}",
                    lambda: runs <= {x["run"] for x in tb.json("/data/plugin/neuraldbg/runs")["runs"]},
                    timeout=120)
        env = dict(os.environ, ND_TB_URL=tb.url, ND_REPORT=str(report_path), ND_SHOTS=str(shots),
                   CHROMIUM=chromium)
        proc = subprocess.run([node, str(BROWSER_DIR / "check_cells.mjs")], env=env, capture_output=True,
                              text=True, timeout=600, cwd=ROOT)
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, f"browser checks failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    for item in ("skipped", "empty_rows", "sampled", "onset", "banner", "optimizer", "onset_outline"):
        assert (shots / f"cells_{item}.png").stat().st_size > 10_000, item
