#!/usr/bin/env bash
# The writer's CUDA path, checked on a fresh CUDA machine that has torch (and
# tensorboard, numpy, pytest: nothing is installed; the script says what is
# missing). About 5 minutes on one H200; every part has its own time limit.
#
#   1. the writer's tests on cuda: tests/test_writer.py and
#      tests/test_instrument.py with TB_NEURALDBG_TEST_DEVICE=cuda;
#   2. host synchronisations during instrumented steps, counted with
#      torch.cuda.set_sync_debug_mode: none with nonfinite="every_step" (mode
#      "error" must raise nothing); with the default nonfinite="replay" one per
#      step, the planned read of the step's non-finite check, and none of its
#      own with a GradScaler (the scaler's found-inf read decides); a planted
#      NaN is replayed and found where it was born;
#   3. benchmarks/overhead.py on a GPT-2-medium-sized model (355M parameters,
#      seq 1024, batch 8, bf16 autocast): the ratio to the bare loop (target
#      1.02x), with the A/A control and clip_grad_norm_, and the peak memory;
#      hooks_kept is the writer with its module hooks on at cheap steps too
#      (what cheap steps without them save where the GPU waits for Python).
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
timeout 180 $PY - <<'EOF' 2>&1 | tee "$OUT_DIR/syncs.txt" || failed+=("host synchronisations")
import sys, tempfile, warnings

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

dev = torch.device("cuda")
STEPS = 25  # steps 12..36: cheap ones and two full-statistics steps (20, 30)
x = torch.randn(64, 256, device=dev)
y = torch.randint(0, 10, (64,), device=dev)


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.GELU(),
                         nn.LayerNorm(512), nn.Linear(512, 10)).to(dev)


def run(mode, scaler, debug, poison_at=None):
    """(sync warnings during the timed steps, the instrument or None)"""
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    sc = torch.amp.GradScaler("cuda") if scaler else None
    writer = inst = None
    if mode:
        writer = DebugWriter(tempfile.mkdtemp())
        inst = writer.watch(model, optimizer=opt, criterion=crit, scaler=sc, nonfinite=mode).instrument

    def step(i):
        opt.zero_grad(set_to_none=True)
        xb = x
        if i == poison_at:
            xb = x.clone()
            xb[3, 5] = float("nan")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(xb)
        loss = crit(out.float(), y)
        if sc is not None:
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
        else:
            loss.backward()
            opt.step()

    for i in range(12):  # the writer's first steps (all full), allocations, pinned buffers
        step(i)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode(debug)
        try:
            for i in range(12, 12 + STEPS):
                step(i)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    if writer is not None:
        writer.close()
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    # a sync refused in the writer's thread would show as a warning of the writer
    mine = [str(w.message) for w in caught if "tb_neuraldbg" in str(w.message)]
    if mine:
        print("  writer warnings:", mine[:3])
    return syncs, inst


ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"  {'ok  ' if cond else 'FAIL'} {what}{': ' + detail if detail else ''}")


def where(syncs):
    return sorted({f"{w.filename}:{w.lineno}" for w in syncs})


for scaler in (False, True):
    bare, _ = run(None, scaler, "warn")
    print(f"with{'' if scaler else 'out'} a GradScaler: the bare loop syncs {len(bare)} times in {STEPS} steps {where(bare)}")
    try:
        every, _ = run("every_step", scaler, "error" if not scaler else "warn")
        check('nonfinite="every_step": no sync of its own' + (' (sync_debug_mode "error")' if not scaler else ""),
              len(every) == len(bare), f"{len(every)} syncs {where(every)}")
    except RuntimeError as e:
        check('nonfinite="every_step" under sync_debug_mode "error"', False, str(e).splitlines()[0])
    replay, inst = run("replay", scaler, "warn")
    planned = 0 if scaler else STEPS
    check(f'nonfinite="replay": {"none of its own (the scaler decides)" if scaler else "one planned sync a step"}',
          len(replay) - len(bare) == planned, f"{len(replay)} syncs against {len(bare)} bare {where(replay)}")
    check("no replay without a non-finite value", inst.replays == 0, f"{inst.replays} replays")

# A planted NaN in the batch at step 20: the scaler skips the step, and it is
# replayed (at scaler.update(), its pre-hook having not run) once.
syncs, inst = run("replay", True, "warn", poison_at=20)
check("a NaN batch under a GradScaler is replayed, once", inst.replays == 1 and inst.mode == "replay",
      f"{inst.replays} replays, mode {inst.mode}")
sys.exit(0 if ok else 1)
EOF

part "3. overhead on a 355M-parameter GPT, bf16 autocast (target 1.02x)"
timeout 360 $PY benchmarks/overhead.py --device cuda --amp bf16 --models gpt --blocks 8 --steps 5 \
    --modes bare,bare2,clip,watched,watched_hand,hooks_kept 2>&1 | tee "$OUT_DIR/overhead_gpt.txt" || failed+=("GPT overhead")

echo
if [ ${#failed[@]} -eq 0 ]; then
    echo "gpu_check: every part passed; outputs in $OUT_DIR"
else
    echo "gpu_check: FAILED: ${failed[*]}; outputs in $OUT_DIR"
    exit 1
fi
