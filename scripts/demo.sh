#!/usr/bin/env bash
# The main job, all set-up included: .venv, torch, the package (frontend
# built), then `neuraldbg demo`: trains the failure scenarios, prints the
# report and serves TensorBoard with the heatmap (Ctrl-C stops it).
# Arguments go to `neuraldbg demo` (e.g. --no-serve, --logdir DIR).
set -euo pipefail
# shellcheck source=scripts/setup_env.sh
source "$(dirname "$0")/setup_env.sh" demo
exec neuraldbg demo "$@"
