"""Packaging: the wheel ships the frontend bundle and the demo package, and the
frontend build (scripts/build_frontend.py, run by setup.py) rebuilds a stale
bundle and fails clearly without node."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLE = os.path.join(ROOT, "tb_neuraldbg", "static", "index.js")


def _load_build_frontend():
    path = os.path.join(ROOT, "scripts", "build_frontend.py")
    spec = importlib.util.spec_from_file_location("build_frontend_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_tree(tmp_path, monkeypatch):
    """build_frontend pointed at a throw-away frontend/ and bundle."""
    bf = _load_build_frontend()
    frontend = tmp_path / "frontend"
    (frontend / "src").mkdir(parents=True)
    (frontend / "package.json").write_text("{}")
    (frontend / "src" / "index.ts").write_text("export {}")
    bundle = tmp_path / "static" / "index.js"
    monkeypatch.setattr(bf, "FRONTEND", str(frontend))
    monkeypatch.setattr(bf, "BUNDLE", str(bundle))
    return bf, frontend, bundle


def _age(path, seconds):
    t = os.path.getmtime(path) - seconds
    os.utime(path, (t, t))


def test_stale_when_missing_or_older_than_a_source(fake_tree):
    bf, frontend, bundle = fake_tree
    assert bf.is_stale()  # no bundle yet
    bundle.parent.mkdir()
    bundle.write_text("built")
    assert not bf.is_stale()
    _age(bundle, 60)
    assert bf.is_stale()  # src/index.ts is newer
    os.utime(bundle)
    assert not bf.is_stale()
    # Installed packages do not make the bundle stale; the lock file does.
    (frontend / "node_modules").mkdir()
    (frontend / "node_modules" / "x.js").write_text("")
    os.utime(frontend / "node_modules" / "x.js", (2e9, 2e9))
    assert not bf.is_stale()
    (frontend / "package-lock.json").write_text("{}")
    os.utime(frontend / "package-lock.json", (2e9, 2e9))
    assert bf.is_stale()


def test_missing_node_is_a_clear_error(fake_tree, monkeypatch):
    bf, _, _ = fake_tree
    monkeypatch.setattr(bf.shutil, "which", lambda name: None)
    with pytest.raises(bf.FrontendBuildError, match="needs Node.js and npm"):
        bf.build_frontend()


def test_up_to_date_bundle_needs_no_node(fake_tree, monkeypatch):
    bf, _, bundle = fake_tree
    bundle.parent.mkdir()
    bundle.write_text("built")
    monkeypatch.setattr(bf.shutil, "which", lambda name: None)
    bf.build_frontend()  # nothing to do, so no npm needed
    assert bundle.read_text() == "built"


def test_a_stale_bundle_runs_npm_ci_when_needed_then_the_build(fake_tree, monkeypatch):
    bf, frontend, bundle = fake_tree
    (frontend / "package-lock.json").write_text("{}")
    calls = []

    def fake_npm(npm, *args):
        calls.append(args)
        if args == ("ci", "--no-audit", "--no-fund"):
            (frontend / "node_modules").mkdir(exist_ok=True)
            (frontend / "node_modules" / ".package-lock.json").write_text("{}")
        if args == ("run", "build"):
            bundle.parent.mkdir(exist_ok=True)
            bundle.write_text("built")

    monkeypatch.setattr(bf, "_npm", fake_npm)
    monkeypatch.setattr(bf.shutil, "which", lambda name: "/usr/bin/" + name)
    bf.build_frontend()
    assert calls == [("ci", "--no-audit", "--no-fund"), ("run", "build")]
    calls.clear()
    bf.build_frontend()  # up to date: nothing runs
    assert calls == []
    (frontend / "src" / "index.ts").write_text("export const x = 1")
    os.utime(frontend / "src" / "index.ts", (2e9, 2e9))
    bf.build_frontend()  # a TypeScript edit: rebuild, node_modules still current
    assert calls == [("run", "build")]


def test_a_tree_without_frontend_sources_uses_its_bundle(fake_tree):
    bf, frontend, bundle = fake_tree
    shutil.rmtree(frontend)
    with pytest.raises(bf.FrontendBuildError, match="no built bundle"):
        bf.build_frontend()
    bundle.parent.mkdir()
    bundle.write_text("built")
    bf.build_frontend()  # an sdist: ships the bundle, has no frontend/


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built with `pip wheel` from a copy of the source tree."""
    # Bring the checkout's bundle up to date first (what `pip install -e .`
    # does), so the copy below needs no node_modules and no npm.
    _load_build_frontend().build_frontend()
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    # A copy, so the build's build/ and egg-info stay out of the checkout;
    # copy2 keeps mtimes, so the bundle stays fresh and no npm runs.
    shutil.copytree(
        ROOT, src,
        ignore=shutil.ignore_patterns(".venv", "node_modules", ".git", "build", "dist",
                                      "*.egg-info", "__pycache__", ".pytest_cache"),
    )
    out = tmp / "dist"
    # With build isolation, as a user's `pip wheel .` builds (a fresh setuptools).
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [name] = os.listdir(out)
    return out / name


@pytest.mark.slow
def test_wheel_ships_the_bundle_the_demo_and_the_entry_points(wheel):
    from tb_neuraldbg._demo import SCENARIOS

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        with open(BUNDLE, "rb") as f:
            assert zf.read("tb_neuraldbg/static/index.js") == f.read()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_text = zf.read(entry_points).decode()
    for scenario in SCENARIOS + ("__init__", "_common"):
        assert f"tb_neuraldbg/_demo/{scenario}.py" in names
    assert "tb_neuraldbg/demo_cli.py" in names
    assert not any(n.endswith((".c", ".cpp", ".so")) for n in names)  # nothing native: torch's ops only
    assert "neuraldbg = tb_neuraldbg.server.plugin:NeuralDbgLoader" in entry_text
    assert "neuraldbg = tb_neuraldbg.cli:main" in entry_text
    assert not any(n.startswith(("demo/", "frontend/", "tests/")) for n in names)


@pytest.mark.slow
def test_installed_wheel_runs_a_scenario_without_the_source_tree(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True, timeout=300,
    )
    code = (
        "import os, sys, tb_neuraldbg, tb_neuraldbg._demo as d\n"
        "assert tb_neuraldbg.__file__.startswith(sys.argv[1]), tb_neuraldbg.__file__\n"
        "assert d.__file__.startswith(sys.argv[1]), d.__file__\n"
        "print(d.load('healthy').run(sys.argv[2], steps=2))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(target), str(tmp_path / "logs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(tmp_path / "logs" / "healthy")


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for script in ("demo.sh", "test.sh"):
        assert os.path.isfile(os.path.join(ROOT, "scripts", script))
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert ci[-1] == "exec bash scripts/test.sh"


def test_deps_are_judged_by_the_lock_files_content_not_its_mtime(fake_tree, monkeypatch):
    bf, frontend, _ = fake_tree
    lock = frontend / "package-lock.json"
    lock.write_text('{"v": 1}')
    calls = []

    def fake_npm(npm, *args):
        calls.append(args)
        (frontend / "node_modules").mkdir(exist_ok=True)
        (frontend / "node_modules" / ".package-lock.json").write_text("{}")

    monkeypatch.setattr(bf, "_npm", fake_npm)
    monkeypatch.setattr(bf.shutil, "which", lambda name: "/usr/bin/" + name)
    bf.install_deps()
    assert calls == [("ci", "--no-audit", "--no-fund")]
    # a checkout touches the lock file (a newer mtime, same content): no reinstall
    os.utime(lock, (2e9, 2e9))
    bf.install_deps()
    assert len(calls) == 1
    # a changed lock file: reinstall
    lock.write_text('{"v": 2}')
    bf.install_deps()
    assert len(calls) == 2
