#!/usr/bin/env bash
# The writer's CUDA path, checked on a fresh CUDA machine that has torch (and
# tensorboard, numpy, pytest: nothing is installed; the script says what is
# missing). Planned for about 7 minutes on one H200; every part has its own time limit.
#
#   1. the writer's tests on cuda: tests/test_writer.py and
#      tests/test_instrument.py with TB_NEURALDBG_TEST_DEVICE=cuda;
#   2. host synchronisations during instrumented steps, counted with
#      torch.cuda.set_sync_debug_mode (benchmarks/gpu_syncs.py): none with
#      nonfinite="every_step" (mode "error" must raise nothing); with the
#      default nonfinite="replay" one per step, the planned read of the step's
#      non-finite check, and none of its own with a GradScaler (the scaler's
#      found-inf read decides); a planted NaN is replayed once;
#   3. benchmarks/overhead.py on a GPT-2-medium-sized model (355M parameters,
#      seq 1024, batch 8, bf16 autocast): the ratio to the bare loop (target
#      1.02x), with the A/A control and clip_grad_norm_, in blocks and with the
#      modes alternated step by step, and the peak memory;
#      hooks_kept is the writer with its module hooks on at cheap steps too
#      (what cheap steps without them save where the GPU waits for Python);
#   4. benchmarks/overhead.py on small models, whose steps on a GPU are bound
#      by Python and kernel launches (tiny: 101 modules of microsecond ops;
#      the benchmark MLP): the writer's fixed cost a step, its worker's Python
#      sharing the GIL with the training thread's (about 1.3x on the CPU's
#      tiny model, docs/cost-history.md);
#   5. watch(analysis="process") on the small models: the worker in a child
#      process against the worker's thread (on the CPU, tiny 1.28-1.34x ->
#      1.22x), where a step waits for Python.
#
# Usage, from anywhere: bash benchmarks/gpu_check.sh [OUT_DIR]   (default /tmp/gpu_check)
# Exit status: 0 when every part passed, 1 otherwise, 2 when the machine lacks something.

set -u -o pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${1:-/tmp/gpu_check}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS: the bitwise tests compare two runs
failed=()
part() { echo; echo "== $1 ($(date +%T))"; }

part "0. the machine"
$PY - <<'EOF' || exit 2
import importlib.util, sys
missing = [m for m in ("torch", "numpy", "tensorboard", "google.protobuf", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing Python packages: {missing} (this script installs nothing: bring them as wheels)")
import torch
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), {torch.cuda.get_device_name(0)}, Python {sys.version.split()[0]}")
EOF

part "1. the writer's tests on cuda"
TB_NEURALDBG_TEST_DEVICE=cuda timeout 300 $PY -m pytest tests/test_writer.py tests/test_instrument.py \
    -q -p no:cacheprovider -rf 2>&1 | tee "$OUT_DIR/tests_cuda.txt" | tail -30 || failed+=("tests on cuda")

part "2. host synchronisations during instrumented steps"
timeout 180 $PY benchmarks/gpu_syncs.py --device cuda 2>&1 | tee "$OUT_DIR/syncs.txt" || failed+=("host synchronisations")

part "3. overhead on a 355M-parameter GPT, bf16 autocast (target 1.02x)"
timeout 360 $PY benchmarks/overhead.py --device cuda --amp bf16 --models gpt --blocks 8 --steps 5 \
    --modes bare,bare2,clip,watched,watched_hand,hooks_kept --alternate 20 2>&1 | tee "$OUT_DIR/overhead_gpt.txt" || failed+=("GPT overhead")

part "4. overhead on small models, bound by Python and launches"
timeout 150 $PY benchmarks/overhead.py --device cuda --models tiny,mlp --blocks 6 --steps 20 \
    --modes bare,bare2,clip,watched --alternate 20 --own 20 2>&1 | tee "$OUT_DIR/overhead_small.txt" \
    || failed+=("small-model overhead")

part "5. the worker in a child process, on the small models"
timeout 150 $PY benchmarks/overhead.py --device cuda --models tiny,micro --blocks 8 --steps 64 \
    --modes bare,bare2,watched,process 2>&1 | tee "$OUT_DIR/overhead_process.txt" \
    || failed+=("worker in a child process")

echo
if [ ${#failed[@]} -eq 0 ]; then
    echo "gpu_check: every part passed; outputs in $OUT_DIR"
else
    echo "gpu_check: FAILED: ${failed[*]}; outputs in $OUT_DIR"
    exit 1
fi
