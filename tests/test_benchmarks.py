"""What a GPU session runs must not fail there for a Python error: its time
is minutes (benchmarks/gpu_check.sh). Part 2, the synchronisations' loops
(benchmarks/gpu_syncs.py), and part 3, overhead.py on a GPT under bf16
autocast with the script's own arguments, run here on the CPU. And the
benchmarks short enough to run whole in a test, and the performance page
overhead.py writes (--markdown)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

pytestmark = pytest.mark.slow  # each runs a benchmark in a fresh interpreter


def run_python(code: str, env: dict, timeout: float = 120) -> str:
    """What ``code`` prints, run by a fresh Python with ``env`` added."""
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _gpu_check_overhead_args() -> list[list[str]]:
    """The arguments of each run of overhead.py in gpu_check.sh (its command
    lines, the backslash-continued lines joined): the GPT's, then the small
    models'."""
    with open(os.path.join(ROOT, "benchmarks", "gpu_check.sh")) as f:
        script = f.read().replace("\\\n", " ")
    lines = [l for l in script.splitlines() if "benchmarks/overhead.py" in l and not l.lstrip().startswith("#")]
    runs = [line.split("benchmarks/overhead.py", 1)[1].split("2>&1")[0].split() for line in lines]
    assert [args[args.index("--models") + 1] for args in runs] == ["gpt", "tiny,mlp", "tiny,micro"]
    return runs


def test_gpu_checks_overhead_run_works_on_a_tiny_gpt_on_the_cpu():
    args = _gpu_check_overhead_args()[0]
    modes = args[args.index("--modes") + 1].split(",")
    # the script's arguments, on the CPU, with a short schedule
    for flag, value in (("--device", "cpu"), ("--blocks", "1"), ("--steps", "2")):
        args[args.index(flag) + 1] = value
    code = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
import overhead as O
O.MODELS["gpt"] = lambda: (O.GPT(vocab=2000, d=32, layers=2, heads=4, seq=32), (2, 32), 2000)
sys.exit(O.main({args + ['--warm', '1', '--own', '2']!r}))
"""
    out = run_python(code, {"PYTHONPATH": ROOT}, timeout=300)
    assert "amp bf16" in out
    for mode in modes:
        if mode != "bare":
            assert re.search(rf"^  {mode}\s+\d", out, re.M), (mode, out)
    for mode in ("watched", "watched_hand"):
        assert f"own CPU time per step ({mode}, 2 steps" in out, out
    if "--alternate" in args:
        for mode in modes:
            if mode != "bare":
                assert re.search(rf"^  {mode}\s+wall \d", out, re.M), (mode, out)


def test_gpu_checks_small_models_run_works_on_the_cpu():
    args = _gpu_check_overhead_args()[1]
    short = {"--device": "cpu", "--blocks": "1", "--steps": "2", "--alternate": "2", "--own": "2"}
    for flag, value in short.items():
        args[args.index(flag) + 1] = value
    args[args.index("--models") + 1] = "tiny"  # (the MLP's steps on a CPU take long)
    code = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
import overhead as O
sys.exit(O.main({args + ['--warm', '1']!r}))
"""
    out = run_python(code, {"PYTHONPATH": ROOT}, timeout=300)
    for mode in args[args.index("--modes") + 1].split(","):
        if mode != "bare":
            assert re.search(rf"^  {mode}\s+\d", out, re.M) and re.search(rf"^  {mode}\s+wall \d", out, re.M), out
    assert "tiny: 0.0M parameters" in out and "own CPU time per step (watched, 2 steps" in out, out


def test_gpu_checks_worker_process_run_works_on_the_cpu():
    # part 5: the watched loop with the worker in a child process, beside the thread
    args = _gpu_check_overhead_args()[2]
    for flag, value in (("--device", "cpu"), ("--blocks", "1"), ("--steps", "4")):
        args[args.index(flag) + 1] = value
    code = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
import overhead as O
sys.exit(O.main({args + ['--warm', '1']!r}))
"""
    out = run_python(code, {"PYTHONPATH": ROOT}, timeout=300)
    for model in ("tiny", "micro"):
        block = out.split(f"{model}: 0.0M parameters")[1]
        for mode in ("bare2", "watched", "process"):
            assert re.search(rf"^  {mode}\s+\d", block, re.M), (model, mode, out)


def test_overhead_trains_a_model_cast_to_bfloat16():
    # --amp bf16_model: every copy's weights and batch bfloat16, the watched
    # one's rows written.
    code = f"""
import sys, torch
sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
import overhead as O
from torch import nn
O.MODELS["mlp"] = lambda: (nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), (8, 16), 4)
r = O.Runner("bare", O.MODELS["mlp"]()[0], (8, 16), 4, torch.device("cpu"), "bf16_model")
assert {{p.dtype for p in r.model.parameters()}} == {{torch.bfloat16}} and r.x.dtype == torch.bfloat16
sys.exit(O.main(["--models", "mlp", "--modes", "bare,watched", "--blocks", "1", "--steps", "2", "--warm", "1",
                 "--own", "2", "--amp", "bf16_model"]))
"""
    out = run_python(code, {"PYTHONPATH": ROOT}, timeout=300)
    assert "amp bf16_model" in out and re.search(r"^  watched\s+\d", out, re.M), out
    assert "own CPU time per step (watched, 2 steps" in out, out


def test_overhead_norms_floor_reads_every_gradient_and_prints_its_figures():
    # Mode "norms": torch's per-parameter norms, grouped by device and dtype,
    # a NaN in any gradient seen on the host.
    code = f"""
import sys, torch
sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
import overhead as O
from torch import nn
m = nn.Sequential(nn.Linear(64, 600), nn.ReLU(), nn.Linear(600, 4))
m(torch.randn(8, 64)).sum().backward()
assert O.grad_norms_finite(m.parameters())
for p in m.parameters():
    p.grad.view(-1)[-1] = float("nan")
    assert not O.grad_norms_finite(m.parameters()), p.shape
    p.grad.view(-1)[-1] = 0.0
m[0].weight.grad = None  # (a parameter without a gradient: left out)
assert O.grad_norms_finite(m.parameters())
O.MODELS["mlp"] = lambda: (nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), (8, 16), 4)
sys.exit(O.main(["--models", "mlp", "--modes", "bare,clip,norms,watched", "--blocks", "1", "--steps", "2",
                 "--warm", "1", "--own", "2"]))
"""
    out = run_python(code, {"PYTHONPATH": ROOT}, timeout=300)
    assert re.search(r"^  norms\s+\d\.\d{3} ", out, re.M), out
    assert re.search(r"the gradient norms alone, timed the same way: \d+\.\d+ ms", out), out


def test_gpu_checks_synchronisation_loops_run_on_the_cpu():
    script = os.path.join(ROOT, "benchmarks", "gpu_syncs.py")
    with open(os.path.join(ROOT, "benchmarks", "gpu_check.sh")) as f:
        assert "benchmarks/gpu_syncs.py --device cuda" in f.read()
    r = subprocess.run([sys.executable, script, "--device", "cpu"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("  ok   no replay without a non-finite value") == 2, r.stdout
    assert "ok   a NaN batch under a GradScaler is replayed, once" in r.stdout
    assert "FAIL" not in r.stdout


def test_compile_overhead_benchmark_prints_every_mode_against_its_bare_one():
    # dynamo alone (--backend eager): the same loops as inductor's, in seconds
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "compile_overhead.py"), "--backend", "eager",
         "--blocks", "1", "--steps", "2", "--alternate", "2"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "OMP_WAIT_POLICY=PASSIVE" in r.stdout
    blocks, alternated = r.stdout.split("alternated:")
    for mode in ("eager", "eager_aa", "eager+watch", "compiled", "compiled_aa", "compiled+watch"):
        block = re.search(rf"^  {re.escape(mode)} +(\d+\.\d+) ms/step  x(\d+\.\d+) ", blocks, re.M)
        alt = re.search(rf"^  {re.escape(mode)} +\d+\.\d+ ms/step  wall x(\d+\.\d+)  cpu x(\d+\.\d+)", alternated, re.M)
        assert block and alt, (mode, r.stdout)
        assert float(block.group(1)) > 0 and float(alt.group(2)) > 0
        if mode in ("eager", "compiled"):  # the reference of its kind
            assert block.group(2) == "1.000" and alt.group(1) == "1.000", r.stdout



def test_overhead_writes_the_performance_page_and_keeps_its_hand_written_notes(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("# old\n\n<!-- kept -->\nnotes by hand\n<!-- native-price -->\n<!-- /kept -->\n\nold table\n")
    code = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
import overhead as O
from torch import nn
O.MODELS["mlp"] = lambda: (nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), (8, 16), 4)
sys.exit(O.main(["--models", "mlp", "--modes", "bare,bare2,clip,watched", "--blocks", "2", "--steps", "2",
                 "--warm", "1", "--own", "2", "--markdown", {str(page)!r}]))
"""
    run_python(code, {"PYTHONPATH": ROOT}, timeout=300)
    text = page.read_text()
    assert "<!-- kept -->\nnotes by hand\n<!-- native-price -->\n<!-- /kept -->" in text
    assert "old table" not in text
    for heading in ("## Method", "## Command", "## Machine", "## Results"):
        assert heading in text, heading
    assert "python benchmarks/overhead.py --models mlp --modes bare,bare2,clip,watched" in text
    assert "OMP_WAIT_POLICY=PASSIVE" in text
    for mode in ("bare2", "clip", "watched"):
        assert re.search(rf"^\|[^|]*\|[^|]*\| `{mode}`[^|]*\| \d+\.\d{{3}} \(", text, re.M), (mode, text)
    assert re.search(r"^\| mlp \| `watched` \| \d+\.\d\d ms \|", text, re.M), text
