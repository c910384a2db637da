"""``s3://`` sources: a Delta table on a local S3-compatible server (moto's ``moto_server``, a
real HTTP server on 127.0.0.1 in its own process) reads, predicts and replays as the same table
on disk; a missing credential, an unreachable endpoint, a missing bucket or table is a one-line
error (exit 2) naming the source and what was expected.

The server runs in a child process: in-process (``ThreadedMotoServer``) it would wait for the GIL
that a deltalake call holds while it waits for the server's answer. Every command runs with the
credentials in its environment only, as a user's would; the specs name the endpoint.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pandas as pd
import pytest

from semantics.history import plan
from semantics.predict import predict
from semantics.spec import load_spec
from tests.deltas import write_commits
from tests.test_orchestration import COMMITS, spec_text

BUCKET = "lake"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "wmbt-test", "AWS_SECRET_ACCESS_KEY": "wmbt-test-secret"}
WMBT = str(Path(sys.executable).with_name("wmbt"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """``moto_server`` on a free 127.0.0.1 port with an empty bucket ``lake``."""
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H",
                             "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "moto_server down"
                time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}"
        _client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def _client(endpoint: str):  # boto3's client type is generated at run time
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def upload(endpoint: str, local: Path, prefix: str) -> str:
    """Copy a local Delta table's files byte for byte under ``s3://lake/<prefix>``: the same
    log (commit times included) and data files, so both read as the same table."""
    client = _client(endpoint)
    for f in sorted(local.rglob("*")):
        if f.is_file():
            client.upload_file(str(f), BUCKET, f"{prefix}/{f.relative_to(local).as_posix()}")
    return f"s3://{BUCKET}/{prefix}"


def write_spec(root: Path, table: str, endpoint: str | None, name: str = "s3_clicks") -> Path:
    """The tiny backtest of ``tests.test_orchestration`` reading ``table``."""
    text = spec_text(name).replace("{table: ../data/clicks, event_time: ts}",
                                   f"{{table: '{table}', event_time: ts}}")
    if endpoint:
        text = text.replace(
            "event_time: ts}", "event_time: ts,\n"
            f"           storage_options: {{AWS_ENDPOINT_URL: '{endpoint}', "
            "AWS_REGION: us-east-1, AWS_ALLOW_HTTP: true}}", 1)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def tables(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Specs of the same table on disk and in the bucket: (local spec, s3 spec)."""
    root = tmp_path_factory.mktemp("s3")
    local = write_commits(root / "data" / "clicks", COMMITS)
    uri = upload(s3_endpoint, local, "tables/clicks")
    return (write_spec(root / "local", str(local), None),
            write_spec(root / "s3", uri, s3_endpoint))


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)


def test_s3_source_predicts_as_the_same_table_on_disk(tables, credentials):
    local_spec, s3_spec = (load_spec(p) for p in tables)
    for cand in ("tight", "loose"):
        local_plan, s3_plan = plan(local_spec, cand), plan(s3_spec, cand)
        pd.testing.assert_frame_equal(s3_plan.rows["clicks"], local_plan.rows["clicks"])
        local, remote = predict(local_plan, local_spec, cand), predict(s3_plan, s3_spec, cand)
        pd.testing.assert_frame_equal(remote.batches, local.batches)
        pd.testing.assert_frame_equal(remote.outputs, local.outputs)
    assert int(local.batches["dropped_by_watermark"].sum()) == 0  # loose
    assert len(s3_plan.rows["clicks"]) == sum(len(c) for c in COMMITS)


def test_cli_predicts_an_s3_source(tables, credentials):
    local_spec, s3_spec = tables
    out = {}
    for side, spec in (("local", local_spec), ("s3", s3_spec)):
        proc = subprocess.run([WMBT, "predict", str(spec), "--json"], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out[side] = json.loads(proc.stdout)
    local_c, s3_c = out["local"]["candidates"], out["s3"]["candidates"]
    for part in ("batches", "outputs"):  # (the rest: timings)
        assert [c["predicted"][part] for c in s3_c] == [c["predicted"][part] for c in local_c]
    assert any(b["dropped_by_watermark"] for c in s3_c  # tight drops one
               for b in c["predicted"]["batches"])


def test_s3_errors_name_the_source_and_what_is_expected(s3_endpoint, tables, tmp_path):
    closed = free_port()  # nothing listens there
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with_creds = {**bare, **CREDENTIALS}
    cases = [
        # (spec, environment, expected words)
        (tables[1], bare, "S3 credentials in the environment (AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY"),
        (write_spec(tmp_path / "a", f"s3://{BUCKET}/tables/clicks", f"http://127.0.0.1:{closed}"),
         with_creds, f"a reachable Delta table (endpoint http://127.0.0.1:{closed}:"),
        (write_spec(tmp_path / "b", f"s3://{BUCKET}/tables/none", s3_endpoint), with_creds,
         f"a Delta table at s3://{BUCKET}/tables/none (no _delta_log found)"),
        (write_spec(tmp_path / "c", "s3://no-such-bucket/clicks", s3_endpoint), with_creds,
         "NoSuchBucket"),
    ]
    procs = [(subprocess.Popen([WMBT, "predict", str(spec)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env), spec, words)
             for spec, env, words in cases]
    for proc, spec, words in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, (spec, out, err)
        assert "Traceback" not in err, err
        assert "sources.clicks.table" in err and words in err, err
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.spark
def test_replay_of_an_s3_source_does_what_the_table_on_disk_predicts(spark, tables, credentials,
                                                                     tmp_path):
    from jobs.replay import replay

    local_spec, s3_spec = (load_spec(p) for p in tables)
    local = predict(plan(local_spec, "tight"), local_spec, "tight")
    remote = replay(s3_spec, "tight", plan(s3_spec, "tight"), tmp_path / "s3", spark)
    cols = ["batch_id", "tick", "input_rows", "watermark_ms", "dropped_by_watermark",
            "state_rows", "output_rows"]
    pd.testing.assert_frame_equal(remote.batches[cols].astype("int64"),
                                  local.batches[cols].astype("int64"))
    assert int(remote.batches["dropped_by_watermark"].sum()) == 1
