#!/usr/bin/env bash
# Every test, all set-up included: .venv, torch, the package with its pinned
# test extras, chromium for the browser test (installed with apt-get when
# run as root), the frontend unit tests, then pytest over tests/ (Python,
# plugin, end-to-end and browser tests). Ends with pytest's summary line.
# Arguments go to pytest (e.g. -k report, -x); `bash scripts/test.sh -m "not slow"`
# runs the fast tier (no interpreters or servers spawned, no browser, no
# scenario corpus, no benchmarks: pytest.ini's `slow` marker).
set -euo pipefail
# shellcheck source=scripts/setup_env.sh
source "$(dirname "$0")/setup_env.sh" test

if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    say "apt-get install chromium (for the browser test)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
  else
    say "chromium is missing and this is not root: the browser test will skip or fail"
  fi
fi

say "frontend unit tests (npm test)"
python scripts/build_frontend.py --deps   # node_modules, if missing or out of date
npm_rc=0
(cd frontend && npm test) || npm_rc=$?
if [ "$npm_rc" != 0 ]; then
  echo "error: the frontend unit tests failed (npm test exit $npm_rc); running pytest anyway" >&2
fi

say "pytest"
pytest_rc=0
python -m pytest tests/ "$@" || pytest_rc=$?
if [ "$pytest_rc" = 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
# The last line printed is pytest's summary; a frontend failure still fails the run.
[ "$npm_rc" = 0 ] || exit "$npm_rc"
exit "$pytest_rc"
