"""A real ``tensorboard`` process for end-to-end tests and benchmarks.

    with serve(logdir, load_fast="true") as tb:
        tb.wait_for("listing", lambda: "neuraldbg" in tb.json("/data/plugins_listing"))
        status, content_type, body = tb.fetch("/data/plugin/neuraldbg/runs")

The process runs the same Python (``sys.executable -m tensorboard.main``), on
127.0.0.1 and a free port, and is terminated (then killed) on exit.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

__all__ = ["Server", "free_port", "serve"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """HTTP helpers bound to one TensorBoard; ``proc`` is its Popen."""

    def __init__(self, url: str, proc: subprocess.Popen):
        self.url = url
        self.proc = proc

    def fetch(self, path: str, *, gzip_ok: bool = True, timeout: float = 600):
        """(status, content type, body bytes) of a GET; gzip is undone."""
        req = urllib.request.Request(self.url + path)
        if gzip_ok:
            req.add_header("Accept-Encoding", "gzip")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                body = r.read()
                if r.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                return r.status, r.headers.get("Content-Type"), body
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read()

    def json(self, path: str):
        """Parsed JSON of a GET that must answer 200 with application/json."""
        status, ctype, body = self.fetch(path)
        assert status == 200, (path, status, body[:300])
        assert ctype == "application/json", (path, ctype)
        return json.loads(body)

    def wait_for(self, what: str, predicate, timeout: float = 90, interval: float = 0.5):
        """Poll ``predicate`` until it returns something truthy (returned);
        connection errors and failed assertions count as "not yet"."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except (OSError, AssertionError, KeyError, ValueError) as e:
                last = e
            if self.proc.poll() is not None:
                raise AssertionError(f"tensorboard exited ({self.proc.returncode}) "
                                     f"while waiting for {what}")
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def serve(logdir, *, load_fast: str = "auto", reload_interval: int = 1, log_path=None,
          extra_args=()):
    """Run ``tensorboard --logdir`` for the duration of the block; output goes
    to ``log_path`` (discarded if None)."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
        "--host", "127.0.0.1", "--port", str(port),
        "--reload_interval", str(reload_interval), f"--load_fast={load_fast}", *extra_args,
    ]
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(log_path, "wb")) if log_path else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield Server(f"http://127.0.0.1:{port}", proc)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
