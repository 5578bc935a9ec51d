"""Scale benchmark of the plugin: 1,000 layers x 20,000 logged steps.

Writes a synthetic logdir (tests/synthetic.py; kept and reused between runs),
starts a real ``tensorboard`` on it (Rust data server by default), waits until
every step is loaded, then times the full-range heatmap at 2,000 columns, cold
(first read through the data provider) and warm (cached matrices), in both
answer formats, and prints TensorBoard's resident memory (the Python process
plus its data server). Target: a full-range heatmap in < 1 s, cold (its first request).

    python benchmarks/plugin_scale.py [--logdir DIR] [--layers 1000] [--steps 20000]

Timings are wall-clock over HTTP on 127.0.0.1 with ``Accept-Encoding: gzip``
(as a browser sends), including decompression and JSON parsing in the client.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))

from tests.plugin_server import serve  # noqa: E402
from tests.synthetic import Plant, SyntheticWriter, event, healthy_row, make_layers  # noqa: E402

from tb_neuraldbg import metadata  # noqa: E402
from tb_neuraldbg.format.crc import use_fast_crc  # noqa: E402

BASE = "/data/plugin/neuraldbg"
RUN = "scale"


def write_logdir(logdir: str, num_modules: int, num_steps: int, blocks: bool = True) -> dict:
    """Write the synthetic run (a lone failing cell planted mid-run), with
    block summaries as DebugWriter writes them unless ``blocks`` is False."""
    fast = use_fast_crc()  # TensorBoard's writer checksums in pure Python otherwise
    layers = make_layers(num_modules)
    plant_step, plant_layer = num_steps // 2 + 7, f"fc{num_modules // 3}"
    plant = Plant(plant_step, plant_layer, "exploding", {"grad_norm": 4.2e6})
    t0 = time.perf_counter()
    with SyntheticWriter(logdir, RUN, layers, keep_truth=False, seed=0, blocks=blocks) as w:
        rng = np.random.default_rng(0)
        base = None
        for step in range(num_steps):
            if step % 64 == 0:
                # Fresh random rows every 64 steps, cheap jitter in between:
                # realistic values without paying for 20,000 random matrices.
                base = healthy_row(layers, step, rng)
            row = base * np.float32(1.0 + 0.01 * (step % 64))
            evs = [event(plant_step, plant_layer, "exploding_gradient", value=4.2e6)] \
                if step == plant_step else ()
            w.step(step, row, plants=[plant], events=evs)
            if step % 2000 == 0:
                print(f"  wrote {step}/{num_steps} steps, {time.perf_counter() - t0:.0f} s",
                      flush=True)
    took = time.perf_counter() - t0
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logdir) for f in fs
    )
    info = {"layers": len(layers), "steps": num_steps, "plant": [plant_step, plant_layer],
            "bytes": size, "write_s": took, "fast_crc": fast, "blocks": blocks}
    with open(os.path.join(logdir, "scale.json"), "w") as f:
        json.dump(info, f)
    return info


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _timed_json(tb, path: str):
    """(seconds, JSON bytes, parsed JSON) of one GET, as a browser
    asks (gzip accepted), decompression and parsing included."""
    t0 = time.perf_counter()
    status, _, body = tb.fetch(path)
    assert status == 200, (path, status, body[:300])
    data = json.loads(body)
    return time.perf_counter() - t0, len(body), data


def _timed_repeats(tb, path: str, repeat: int):
    """(seconds of the first GET and of ``repeat`` more, JSON bytes and
    parsed JSON of the last)."""
    times = []
    for _ in range(1 + repeat):
        dt, wire, data = _timed_json(tb, path)
        times.append(dt)
    return times, wire, data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logdir", default="/tmp/neuraldbg_scale")
    p.add_argument("--layers", type=int, default=1000, help="rows, pseudo-layers included")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--cols", type=int, default=2000)
    p.add_argument("--load_fast", default="true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--write_only", action="store_true", help="write the logdir and stop")
    p.add_argument("--no_blocks", action="store_true",
                   help="write the run without block summaries (an older writer's logdir)")
    args = p.parse_args(argv)

    info_path = os.path.join(args.logdir, "scale.json")
    info = None
    if os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        if (info["layers"], info["steps"], info.get("blocks", False)) != \
                (args.layers, args.steps, not args.no_blocks):
            raise SystemExit(f"{args.logdir} holds another size; pick another --logdir")
        print(f"reusing {args.logdir}")
    else:
        print(f"writing {args.layers} layers x {args.steps} steps to {args.logdir} ...")
        info = write_logdir(args.logdir, args.layers - 3, args.steps, not args.no_blocks)
    print(f"logdir: {info['bytes'] / 2**20:.0f} MiB, written in {info['write_s']:.0f} s "
          f"(fast crc: {info['fast_crc']})")
    if args.write_only:
        return 0

    with serve(args.logdir, load_fast=args.load_fast, reload_interval=5) as tb:
        t0 = time.perf_counter()

        def loaded():
            runs = {r["run"]: r for r in tb.json(f"{BASE}/runs")["runs"]}
            return runs.get(RUN, {}).get("num_steps") == args.steps

        tb.wait_for("every step loaded", loaded, timeout=1800, interval=2)
        print(f"TensorBoard (load_fast={args.load_fast}) loaded every step "
              f"{time.perf_counter() - t0:.0f} s after start")

        plant_step, plant_layer = info["plant"]
        results = []
        for metric in ("grad_norm", "state", "act_dead_frac"):
            for fmt in ("b64", "json"):
                q = (f"{BASE}/heatmap?run={RUN}&metric={metric}&max_cols={args.cols}"
                     f"&format={fmt}")
                times, wire, data = _timed_repeats(tb, q, args.repeat)
                assert data["cols"] == args.cols and data["rows"] == args.layers
                row = data["layers"].index(plant_layer)
                col = next(c for c in range(data["cols"])
                           if data["col_start"][c] <= plant_step <= data["col_end"][c])
                if fmt == "b64":
                    import base64

                    states = np.frombuffer(base64.b64decode(data["states_b64"]), np.uint8)
                else:
                    states = np.array(data["states"], np.uint8)
                assert states[row * data["cols"] + col] == metadata.STATE_CODE["exploding"], \
                    "the planted failing cell was lost in binning"
                results.append((metric, fmt, times[0], min(times[1:]), wire))
                print(f"heatmap {metric:>13} format={fmt:<4} first {times[0]:6.2f} s  "
                      f"then {min(times[1:]):5.2f} s  ({wire / 2**20:.1f} MiB of JSON, "
                      f"binned from {data.get('binned', 'steps')})", flush=True)
        # A zoom to a tenth of the run: its rows (read once), not blocks.
        q = (f"{BASE}/heatmap?run={RUN}&metric=grad_norm&max_cols={args.cols}&format=b64"
             f"&start={args.steps // 3 + 1}&end={args.steps // 3 + args.steps // 10}")
        times, _, data = _timed_repeats(tb, q, args.repeat)
        print(f"heatmap grad_norm zoomed to {args.steps // 10} steps: first {times[0]:6.2f} s  "
              f"then {min(times[1:]):5.2f} s  (binned from {data.get('binned', 'steps')})",
              flush=True)
        q = f"{BASE}/layer?run={RUN}&layer={plant_layer}&metric=grad_norm"
        dt, _, _ = _timed_json(tb, q)
        print(f"layer detail, grad_norm (cached by the heatmap), all steps: {dt:.2f} s")
        q = f"{BASE}/layer?run={RUN}&layer={plant_layer}"
        dt, _, _ = _timed_json(tb, q)
        print(f"layer detail, all {len(metadata.METRICS)} metrics, all steps: {dt:.2f} s")
        kids = _children(tb.proc.pid)
        rss = {"tensorboard": _rss_kib(tb.proc.pid)}
        for k in kids:
            rss[f"child {k}"] = _rss_kib(k)
        total = sum(rss.values())
        print("resident memory: " + ", ".join(f"{k} {v / 2**20:.2f} GiB" for k, v in rss.items())
              + f"; total {total / 2**20:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
