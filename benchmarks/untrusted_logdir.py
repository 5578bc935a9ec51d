"""Reading a logdir that holds other tools' data: what the reader pays for it.

    python benchmarks/untrusted_logdir.py [--mb 200]

Writes one neuraldbg run (2,000 steps of 10 layers) and then, beside it,
``--mb`` MB of another tool's plain scalars: (a) in an event file of their
own in the run's directory, (b) interleaved with the run's records in the
same file (what a user's own ``add_scalar`` calls do). Prints the time
``read_logdir`` takes for each, and the ratio to the run alone. Only records
holding a neuraldbg tag are parsed: a file without any is not even walked,
and an interleaved foreign record costs a length check.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402

from tb_neuraldbg.offline.reader import read_logdir  # noqa: E402
from tb_neuraldbg.offline.records import masked_crc  # noqa: E402
from tests.synthetic import make_layers, write_run  # noqa: E402


def _frame(data: bytes) -> bytes:
    import struct

    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def foreign_frames(megabytes: float) -> list[bytes]:
    """Another tool's scalar events, framed, about ``megabytes`` MB in all."""
    out, size, i = [], 0, 0
    while size < megabytes * 1e6:
        ev = event_pb2.Event(step=i // 10, wall_time=1.0 + i, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=f"other/metric{i % 10}", simple_value=float(i))]))
        fr = _frame(ev.SerializeToString())
        out.append(fr)
        size += len(fr)
        i += 1
    return out


def _timed(logdir: str) -> float:
    t0 = time.perf_counter()
    (run,) = read_logdir(logdir)
    assert run.num_steps == 2000
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="ndbg_untrusted_")
    try:
        write_run(root, "run", layers=make_layers(8), num_steps=2000)
        run_dir = os.path.join(root, "run")
        (name,) = os.listdir(run_dir)
        ours = os.path.join(run_dir, name)
        alone = _timed(root)
        frames = foreign_frames(args.mb)
        print(f"{len(frames):,} foreign scalar records, {sum(map(len, frames)) / 1e6:.0f} MB")
        other = os.path.join(run_dir, "events.out.tfevents.0.other")
        with open(other, "wb") as f:
            f.writelines(frames)
        separate = _timed(root)
        os.remove(other)
        with open(ours, "rb") as f:
            data = f.read()
        with open(ours, "wb") as f:  # the run's records spread through the foreign ones
            step = max(1, len(frames) // 100)
            import struct

            pos, chunks = 0, []
            for k in range(0, len(frames), step):
                chunks.append(b"".join(frames[k:k + step]))
            records = []
            while pos < len(data):
                (n,) = struct.unpack_from("<Q", data, pos)
                records.append(data[pos:pos + 16 + n])
                pos += 16 + n
            per = max(1, len(records) // len(chunks))
            for k, chunk in enumerate(chunks):
                f.write(b"".join(records[k * per:(k + 1) * per]))
                f.write(chunk)
            f.write(b"".join(records[len(chunks) * per:]))
        mixed = _timed(root)
        print(f"run alone: {alone:.2f} s")
        print(f"beside {args.mb:.0f} MB in a file of their own: {separate:.2f} s "
              f"({separate / alone:.1f}x)")
        print(f"interleaved in the run's own file: {mixed:.2f} s ({mixed / alone:.1f}x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
