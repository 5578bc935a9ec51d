# Sourced by scripts/demo.sh and scripts/test.sh: makes ./.venv ready to use.
#
# Needs Python 3.11 (or another >= 3.9 as $PYTHON), node and npm. Idempotent:
# a second run only checks, rebuilds the frontend bundle when a TypeScript
# source changed, and reinstalls the package when setup.py changed.
# Usage: source scripts/setup_env.sh demo|test   ("test" adds the test extras;
# the argument is required: a sourced script without one would see the
# caller's arguments instead).

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
  demo) EXTRAS="" ;;
  test) EXTRAS="test" ;;
  *) echo "usage: source scripts/setup_env.sh demo|test" >&2; exit 2 ;;
esac

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3 || true)}"
[ -n "$PYTHON" ] || die "Python 3.11 not found (set PYTHON=/path/to/python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
  || die "$PYTHON is older than Python 3.9"
command -v node >/dev/null && command -v npm >/dev/null \
  || die "node and npm are needed to build the TensorBoard tab (e.g. apt-get install nodejs npm)"

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
if ! python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "'"${TORCH_SPEC#torch==}"'")' 2>/dev/null; then
  say "pip install $TORCH_SPEC"
  pip install -q "$TORCH_SPEC"
fi

# The package itself, editable; its build runs `npm ci && npm run build` in
# frontend/. Redone only when setup.py changed or the extras are missing.
STAMP=".venv/.tb_neuraldbg-install"   # "<hash of setup.py> <extras>"
want_hash="$(sha256sum setup.py | cut -c1-16)"
have_hash="" have_extras=""
[ -f "$STAMP" ] && read -r have_hash have_extras < "$STAMP" || true
if [ "$have_hash" != "$want_hash" ] || [ "${EXTRAS:-$have_extras}" != "$have_extras" ] \
   || ! python -c 'import tb_neuraldbg._demo' 2>/dev/null; then
  say "pip install -e .${EXTRAS:+[$EXTRAS]} (builds the frontend bundle)"
  # torch named again: the extras (lightning, transformers, accelerate)
  # accept it, and pip must not trade it for another build.
  pip install -q -e ".${EXTRAS:+[$EXTRAS]}" "$TORCH_SPEC"
  echo "$want_hash $EXTRAS" > "$STAMP"
fi
# An editable install does not notice TypeScript edits: rebuild a stale bundle
# (a quick no-op when tb_neuraldbg/static/index.js is newer than frontend/).
python scripts/build_frontend.py
