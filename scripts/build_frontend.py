"""Build the TensorBoard tab: frontend/ (TypeScript) -> tb_neuraldbg/static/index.js.

Used by setup.py (every build from source: wheel, install, editable install)
and by scripts/setup_env.sh (an editable install does not notice TypeScript
edits). Runs ``npm ci`` only when node_modules is missing or older than the
lock file, and ``npm run build`` only when a frontend source is newer than the
bundle, so it is a quick no-op when nothing changed. Standard library only.

    python scripts/build_frontend.py [--force]   # the bundle, when stale (always with --force)
    python scripts/build_frontend.py --deps      # only node_modules (for `npm test`)
"""

import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRONTEND = os.path.join(ROOT, "frontend")
BUNDLE = os.path.join(ROOT, "tb_neuraldbg", "static", "index.js")
# What the bundle is built from: a change in any of these makes it stale.
# Written into node_modules after `npm ci`: the digest of the lock file installed.
LOCK_STAMP = ".nd-lock-sha256"
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


def _lock_digest(lock):
    with open(lock, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def deps_current():
    """Whether node_modules holds what package-lock.json asks for.

    Judged by the lock file's CONTENT, stamped into node_modules when it was
    installed: a fresh checkout or a second worktree gives the lock file a new
    mtime without changing it, and must not reinstall (a reinstall through a
    shared node_modules empties it for everyone). Without a stamp (installed
    by hand), the old rule: node_modules newer than the lock file.
    """
    lock = os.path.join(FRONTEND, "package-lock.json")
    installed = os.path.join(FRONTEND, "node_modules", ".package-lock.json")
    if not os.path.isfile(installed):
        return False
    if not os.path.isfile(lock):
        return True
    stamp = os.path.join(FRONTEND, "node_modules", LOCK_STAMP)
    if os.path.isfile(stamp):
        with open(stamp, encoding="ascii") as f:
            return f.read().strip() == _lock_digest(lock)
    return os.path.getmtime(lock) <= os.path.getmtime(installed)


def install_deps(npm=None):
    """``npm ci`` when node_modules does not hold what the lock file asks for."""
    if deps_current():
        return
    _npm(npm or _require_npm(), "ci", "--no-audit", "--no-fund")
    lock = os.path.join(FRONTEND, "package-lock.json")
    if os.path.isfile(lock) and os.path.isdir(os.path.join(FRONTEND, "node_modules")):
        with open(os.path.join(FRONTEND, "node_modules", LOCK_STAMP), "w", encoding="ascii") as f:
            f.write(_lock_digest(lock) + "\n")


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
