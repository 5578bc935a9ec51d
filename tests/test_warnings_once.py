"""A warning of the writer is shown once, at the user's line, not twice."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TAKEOVER = """
import gc, tempfile
from torch import nn
from tb_neuraldbg import DebugWriter
m = nn.Linear(3, 2)
w = DebugWriter(tempfile.mkdtemp()); w.watch(m)
del w
gc.collect()
w2 = DebugWriter(tempfile.mkdtemp())
w2.watch(m)  # the line the warning points at
w2.close()
"""


def test_the_notebook_takeover_warning_is_shown_once_at_the_users_line(tmp_path):
    script = tmp_path / "cell.py"
    script.write_text(TAKEOVER)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT}, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "no longer in use" in line]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{script}:10: RuntimeWarning"), lines[0]
