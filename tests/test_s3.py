"""s3:// logdirs end to end against a local S3 server (moto's server mode on
127.0.0.1, started and stopped here, fake credentials set for these tests
only): the writer and its saved batch, the reader, `neuraldbg report` and
`export`, the plugin's routes (the tab's data path), and one-line messages
for a bucket root and a missing bucket."""

import io
import json
import os
import socket

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, cli, metadata
from tb_neuraldbg.offline.reader import read_logdir

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")
torch.set_num_threads(1)

pytestmark = pytest.mark.slow  # a local S3 server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    port = _free_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "S3_ENDPOINT": f"http://127.0.0.1:{port}",  # TensorBoard's S3 layer reads these
        "S3_USE_HTTPS": "0",
        "S3_VERIFY_SSL": "0",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # TensorBoard's S3 file system reads S3_ENDPOINT when it is built (at
    # import, before this fixture): register one that sees it, and put the
    # original back afterwards.
    from tensorboard.compat.tensorflow_stub.io import gfile

    original_fs = gfile.get_filesystem("s3://x/y")
    gfile.register_filesystem("s3", gfile.S3FileSystem())
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    client = boto3.client("s3", endpoint_url=env["S3_ENDPOINT"])
    client.create_bucket(Bucket="bkt")
    try:
        yield client
    finally:
        server.stop()
        gfile.register_filesystem("s3", original_fs)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def logdir(s3):
    """Two runs on S3: a healthy one and one with a NaN batch at step 20."""
    for run, bad in (("healthy", None), ("bad", 20)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(0)
        with DebugWriter(f"s3://bkt/runs/{run}") as w:
            w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss())
            w.add_scalar("user/x", 1.0, 0)
            for step in range(30):
                x = torch.randn(16, 4, generator=g)
                if step == bad:
                    x[0, 0] = float("nan")
                y = (x[:, 0] > 0).long()
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
    return "s3://bkt/runs"


def test_the_writer_saves_the_bad_batch_beside_its_event_file(s3, logdir):
    keys = [o["Key"] for o in s3.list_objects(Bucket="bkt", Prefix="runs/bad/")["Contents"]]
    assert "runs/bad/neuraldbg_batch_step20.npz" in keys
    body = s3.get_object(Bucket="bkt", Key="runs/bad/neuraldbg_batch_step20.npz")["Body"].read()
    x = np.load(io.BytesIO(body))["arg0"]
    assert np.isnan(x[0, 0]) and x.shape == (16, 4)
    assert not [k for k in keys if k.startswith("runs/healthy/") and k.endswith(".npz")]


def test_reader_and_report_on_s3(logdir, capsys):
    runs = {r.name: r for r in read_logdir(logdir)}
    assert set(runs) == {"bad", "healthy"}
    assert runs["healthy"].diagnosis["status"] == "healthy"
    assert runs["bad"].diagnosis["root_cause"]["layer"] == metadata.PSEUDO_INPUT
    assert {e["batch_file"] for e in runs["bad"].events if "batch_file" in e} == {"neuraldbg_batch_step20.npz"}
    assert cli.main(["report", logdir, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["run"]: r["status"] for r in report["runs"]} == {"bad": "failing", "healthy": "healthy"}


def test_export_from_s3(logdir, tmp_path):
    out = tmp_path / "r.html"
    assert cli.main(["export", logdir, "-o", str(out)]) == 0
    assert "&lt;input&gt;" in out.read_text() or "<input>" in out.read_text()


def test_the_tabs_routes_serve_an_s3_logdir(logdir):
    from tests.test_plugin_wsgi import App

    app = App(logdir)
    base = f"/data/plugin/{metadata.PLUGIN_NAME}"
    runs = app.json(f"{base}/runs")
    names = sorted(r["run"] if isinstance(r, dict) else r for r in (runs["runs"] if isinstance(runs, dict) else runs))
    assert names == ["bad", "healthy"]
    heat = app.json(f"{base}/heatmap?run=bad&metric=grad_norm")
    assert heat["cols"] == 30


@pytest.mark.parametrize("root", ["s3://bkt", "s3://bkt/"])
def test_a_bucket_root_is_one_line(s3, root, capsys):
    assert cli.main(["report", root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "root of bucket 'bkt'" in err[0] and "s3://bkt/runs" in err[0]


def test_a_missing_bucket_is_one_line(s3, capsys):
    assert cli.main(["report", "s3://no-such-bucket/runs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NoSuchBucket" in err[0], err
