"""What every browser test module needs: chromium and node found (skip or
fail as the modules' docstrings say), the tab's bundle built, the
``neuraldbg`` CLI of this interpreter, and a check script run against a real
``tensorboard --logdir`` once it lists the runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_server import serve

ROOT = Path(__file__).resolve().parents[1]
FRONTEND = ROOT / "frontend"
BROWSER_DIR = ROOT / "tests" / "browser"
SHOTS = BROWSER_DIR / "screenshots"
BUNDLE = ROOT / "tb_neuraldbg" / "static" / "index.js"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def chromium_path() -> str | None:
    """$CHROMIUM, else chromium on PATH, else /usr/bin/chromium; None when absent."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return path if os.path.exists(path) else None


def neuraldbg(*args, timeout=900) -> subprocess.CompletedProcess:
    """Run the `neuraldbg` CLI of this interpreter's environment."""
    cmd = [sys.executable, "-c", "import sys; from tb_neuraldbg.cli import main; sys.exit(main())", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)


def has_demo() -> bool:
    """Whether the demo scenarios are installed (``neuraldbg demo`` can train them)."""
    try:
        import tb_neuraldbg._demo  # noqa: F401
        import tb_neuraldbg.demo_cli  # noqa: F401
    except ImportError:
        return False
    return True


def browser_prerequisites() -> tuple[str, str]:
    """(chromium, node) paths, the bundle built; skips without chromium
    unless CI is set (then fails: the browser tests must run there)."""
    chromium = chromium_path()
    if chromium is None:
        if IN_CI:
            pytest.fail("chromium is not installed and CI is set: the browser test must run (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI is not set")
    node = shutil.which("node")
    assert node, "node is needed for the browser test (and to build the tab)"
    assert (FRONTEND / "node_modules" / "playwright-core").is_dir(), \
        "frontend/node_modules is missing: run `npm ci` in frontend/"
    build = ROOT / "scripts" / "build_frontend.py"
    if build.exists():
        subprocess.run([sys.executable, str(build)], check=True, cwd=ROOT, timeout=300)
    else:
        subprocess.run(["npm", "run", "build"], check=True, cwd=FRONTEND, timeout=300)
    assert BUNDLE.is_file(), f"{BUNDLE} was not built"
    return chromium, node


def run_check(script: str, logdir, runs: set, tmp_path, chromium: str, node: str, **env: str) -> str:
    """Serve ``logdir`` with tensorboard, wait until it lists ``runs``, run
    tests/browser/``script`` with ND_TB_URL, ND_SHOTS, CHROMIUM and ``env``;
    fails with the script's output unless it exits 0. Returns its stdout."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    with serve(logdir, log_path=Path(tmp_path) / "tensorboard.log") as tb:
        tb.wait_for(f"tensorboard to list the runs {sorted(runs)}",
                    lambda: set(runs) <= {x["run"] for x in tb.json("/data/plugin/neuraldbg/runs")["runs"]},
                    timeout=120)
        full = dict(os.environ, ND_TB_URL=tb.url, ND_SHOTS=str(SHOTS), CHROMIUM=chromium, **env)
        proc = subprocess.run([node, str(BROWSER_DIR / script)], env=full, capture_output=True,
                              text=True, timeout=600, cwd=ROOT, check=False)
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, f"browser checks failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout
