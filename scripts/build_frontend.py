"""Build the TensorBoard tab: frontend/ (TypeScript) -> tb_neuraldbg/static/index.js.

Used by setup.py (every build from source: wheel, install, editable install)
and by scripts/setup_env.sh (an editable install does not notice TypeScript
edits). Runs ``npm ci`` only when node_modules is missing or older than the
lock file, and ``npm run build`` only when a frontend source is newer than the
bundle, so it is a quick no-op when nothing changed. Standard library only.

    python scripts/build_frontend.py [--force]   # the bundle, when stale (always with --force)
    python scripts/build_frontend.py --deps      # only node_modules (for `npm test`)
"""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRONTEND = os.path.join(ROOT, "frontend")
BUNDLE = os.path.join(ROOT, "tb_neuraldbg", "static", "index.js")
# What the bundle is built from: a change in any of these makes it stale.
INPUTS = ("src", "scripts", "package.json", "package-lock.json", "tsconfig.json")


class FrontendBuildError(RuntimeError):
    """The bundle cannot be built (no node/npm, a failed npm command, ...)."""


def _newest_mtime(paths):
    newest = 0.0
    for path in paths:
        if os.path.isfile(path):
            newest = max(newest, os.path.getmtime(path))
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d != "node_modules"]
            for name in files:
                newest = max(newest, os.path.getmtime(os.path.join(root, name)))
    return newest


def is_stale():
    """True when the bundle is missing or older than a frontend source."""
    if not os.path.isfile(BUNDLE):
        return True
    inputs = [os.path.join(FRONTEND, p) for p in INPUTS]
    return os.path.getmtime(BUNDLE) < _newest_mtime(inputs)


def _npm(npm, *args):
    cmd = [npm, *args]
    print("+ (cd frontend && " + " ".join(["npm", *args]) + ")", file=sys.stderr, flush=True)
    try:
        subprocess.run(cmd, cwd=FRONTEND, check=True, stdout=sys.stderr)
    except subprocess.CalledProcessError as e:
        raise FrontendBuildError(
            f"`npm {' '.join(args)}` failed in frontend/ (exit {e.returncode}); "
            "the TensorBoard tab cannot be built"
        ) from None


def _require_npm():
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise FrontendBuildError(
            "building from source needs Node.js and npm on PATH, to build "
            "the TensorBoard tab (frontend/ -> tb_neuraldbg/static/index.js). Install "
            "them (e.g. `apt-get install nodejs npm`), or install a built wheel instead"
        )
    return npm


def install_deps(npm=None):
    """``npm ci`` when node_modules is missing or older than the lock file."""
    lock = os.path.join(FRONTEND, "package-lock.json")
    installed = os.path.join(FRONTEND, "node_modules", ".package-lock.json")
    if not os.path.isfile(installed) or (
        os.path.isfile(lock) and os.path.getmtime(lock) > os.path.getmtime(installed)
    ):
        _npm(npm or _require_npm(), "ci", "--no-audit", "--no-fund")


def build_frontend(force=False):
    """Build the bundle when it is missing or stale; raises FrontendBuildError."""
    if not os.path.isfile(os.path.join(FRONTEND, "package.json")):
        if os.path.isfile(BUNDLE):
            return  # a source tree that ships the built bundle (an sdist)
        raise FrontendBuildError(
            "frontend/package.json not found and no built bundle at "
            "tb_neuraldbg/static/index.js; build from a full checkout"
        )
    if not force and not is_stale():
        return
    npm = _require_npm()
    install_deps(npm)
    _npm(npm, "run", "build")
    if not os.path.isfile(BUNDLE):
        raise FrontendBuildError("`npm run build` finished but wrote no tb_neuraldbg/static/index.js")
    # esbuild may keep the old mtime when the output bytes did not change;
    # touch it so the staleness check sees a fresh build.
    os.utime(BUNDLE)


if __name__ == "__main__":
    try:
        if "--deps" in sys.argv[1:]:
            install_deps()
        else:
            build_frontend(force="--force" in sys.argv[1:])
    except FrontendBuildError as e:
        sys.exit(f"error: {e}")
