"""``wmbt``'s exit codes (jobs/cli.py): every way a command ends is an exit code and at most a
line on stderr, never a Python traceback unless asked for (``--debug``, ``WMBT_DEBUG=1``).

The CLI is run as a user runs it: ``.venv/bin/wmbt`` in a process (signals are real signals
sent to it), or ``jobs.cli.main`` with its output captured.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.cli import build_parser, main
from tests.deltas import write_commits

ROOT = Path(__file__).resolve().parents[1]
WMBT = ROOT / ".venv" / "bin" / "wmbt"
# Ctrl-C's default action, whatever the test runner's was (a process started with SIGINT
# ignored keeps ignoring it: a shell's background job)
WITH_SIGINT = [sys.executable, "-c", "import os, signal, sys; "
               "signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` run here writes (if at all) under the test's folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WMBT_RESULTS", str(tmp_path / "results"))


def small_spec(folder: Path) -> Path:
    """A windowed count over a Delta table of 5 rows (ids 0 .. 4) in 3 commits."""
    write_commits(folder / "clicks", [
        [{"ad": 1, "ts": 60}], [{"ad": 1, "ts": 10}, {"ad": 1, "ts": 12}, {"ad": 2, "ts": 20}],
        [{"ad": 2, "ts": 130}],
    ])
    spec = folder / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "errs", "sources": {"clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "10 seconds"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"clicks": "1 minute"}}},
    }))
    return spec


def generated_spec(folder: Path, rows: int, keys: int) -> Path:
    """A windowed count over ``rows`` generated rows in 4 commits (an hour each)."""
    rng = np.random.default_rng(5)
    start = pd.Timestamp("2024-01-01", tz="UTC")
    for c in range(4):
        n = rows // 4
        ts = start + pd.to_timedelta(c * 3600 + rng.uniform(0, 3600, n), unit="s")
        write_deltalake(str(folder / "clicks"), pd.DataFrame({
            "ad": rng.integers(0, keys, n), "ts": ts.astype("datetime64[us, UTC]")}),
            mode="append")
    spec = folder / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "gen", "sources": {"clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "1 minute"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {"clicks": "10 minutes"}}},
    }))
    return spec


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WMBT_DEBUG"}
    return {**env, "PYTHONPATH": str(ROOT), "WMBT_RESULTS": str(tmp_path / "results"), **extra}


def wmbt(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(WMBT), *args], cwd=tmp_path, env=env_for(tmp_path, **env),
                          capture_output=True, text=True, timeout=300)


# --- --explain ------------------------------------------------------------------------------

def test_explain_prints_the_fate_of_a_row(tmp_path: Path) -> None:
    small_spec(tmp_path)
    done = wmbt(tmp_path, "predict", "spec.yaml", "--explain", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("[c] row 1 of clicks (commit version 1, ")
    assert "accepted; counted in window [1970-01-01 00:00:10, 1970-01-01 00:00:20) of ad=1" \
        in done.stdout
    assert "Traceback" not in done.stderr


def test_explain_of_a_row_that_does_not_exist_says_which_do(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    for extra in ([], ["--json"]):
        done = wmbt(tmp_path, "predict", "spec.yaml", "--explain", "5", *extra)
        assert done.returncode == 2
        assert done.stdout == ""  # (with --json too: no document, not half of one)
        assert done.stderr.splitlines()[-1] == (
            f"wmbt: error: {spec}: --explain: a row id from 0 to 4 (the 5 input rows of "
            "clicks), got 5")
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "results").exists()  # refused before anything is stored


def test_demo_in_a_folder_it_cannot_create(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    done = wmbt(tmp_path, "demo", "--dir", "a_file/demo", "--json")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("wmbt: error: a_file/demo: --dir: a folder the demo can create "
                           "(Not a directory)\n")


# --- usage errors (argparse: a short usage message, exit 2, nothing run) ----------------------

@pytest.mark.parametrize(("args", "says"), [
    (["predict", "spec.yaml", "--late", "-3"],
     "argument --late: expected a number of rows (0 or more), got '-3'"),
    (["predict", "spec.yaml", "--explain", "abc"],
     "argument --explain: expected a row id (0 or more), got 'abc'"),
    (["predict", "spec.yaml", "--explain", "-1"],
     "argument --explain: expected a row id (0 or more), got '-1'"),
    (["predcit", "spec.yaml"], "argument command: invalid choice: 'predcit'"),
    (["predict"], "the following arguments are required: spec"),
    ([], "the following arguments are required: command"),
    (["predict", "spec.yaml", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_misuse_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 args: list[str], says: str) -> None:
    small_spec(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: wmbt")
    last = err.splitlines()[-1]  # `wmbt: error: ...` or `wmbt predict: error: ...`
    assert last.startswith("wmbt") and ": error: " + says in last
    assert not (tmp_path / "results").exists()


def test_a_sweep_of_nothing_says_what_it_can_vary(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Without --delays, --window-sizes or --ranges a sweep runs the spec's ``sweep:``; a spec
    without one is told what a sweep varies (exit 2, nothing written)."""
    small_spec(tmp_path)
    assert main(["sweep", "spec.yaml"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"wmbt: error: {tmp_path / 'spec.yaml'}: --delays: one of "
                                 "--delays, --window-sizes and --ranges (what the sweep "
                                 "varies; without any, the spec's sweep:), got none\n")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", [["predict", "s"], ["replay", "s"], ["backtest", "s"],
                                     ["sweep", "s", "--delays", "x"], ["demo"]])
def test_every_subcommand_takes_debug(command: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args([*command, "--debug"]).debug
    assert parser.parse_args(["--debug", *command]).debug
    assert not parser.parse_args(command).debug


# --- internal errors: exit 3, one line; the traceback on request ------------------------------

# A Rust panic in deltalake reaches Python as pyo3_runtime.PanicException, a BaseException. No
# input is known to make deltalake 1.6 panic; the test raises one where its Rust code runs.
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


def rust_fails(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def version(self: DeltaTable) -> int:
        raise exc

    monkeypatch.setattr(DeltaTable, "version", version)


@pytest.mark.parametrize("exc", [
    PanicException("called `Option::unwrap()` on a `None` value"),
    RuntimeError("called `Option::unwrap()` on a `None` value\n  0: <unknown>\n  1: <unknown>"),
])
@pytest.mark.parametrize("command", [["predict"], ["sweep", "--delays", "0 seconds..1 minute/3"]])
def test_an_unexpected_error_is_one_line_and_exit_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        exc: BaseException, command: list[str]) -> None:
    spec = small_spec(tmp_path)
    monkeypatch.delenv("WMBT_DEBUG", raising=False)
    rust_fails(monkeypatch, exc)
    assert main([command[0], str(spec), *command[1:], "--json"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"wmbt: internal error: {type(exc).__name__}: called `Option::unwrap()` on a "
                   "`None` value (run with --debug for the traceback)\n")


@pytest.mark.parametrize(("flags", "env"), [(["--debug"], None), ([], "1")])
def test_debug_prints_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                    env: str | None) -> None:
    spec = small_spec(tmp_path)
    if env is None:
        monkeypatch.delenv("WMBT_DEBUG", raising=False)
    else:
        monkeypatch.setenv("WMBT_DEBUG", env)
    rust_fails(monkeypatch, PanicException("panicked at src/lib.rs:1:1"))
    assert main(["predict", str(spec), *flags]) == 3
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert ", in version\n" in err  # (where it was raised)
    assert err.endswith("\nwmbt: internal error: PanicException: panicked at src/lib.rs:1:1\n")


def test_system_exit_is_not_swallowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rust_fails(monkeypatch, SystemExit(7))
    with pytest.raises(SystemExit) as exc:
        main(["predict", str(small_spec(tmp_path))])
    assert exc.value.code == 7


# --- interruption: real signals to a real process -----------------------------------------------

def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux)."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(p) for p in (task / "children").read_text().split()]
    return kids


def gone(pid: int, within: float = 10.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True  # (ended, not yet collected by its parent)
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def sweep_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sessions in complete mode: a sweep of them predicts delay after delay in worker
    processes (the one-pass sweep covers windows, dedup and sessions in append mode, and would
    be done before a signal came)."""
    spec = generated_spec(tmp_path_factory.mktemp("sweep"), rows=200_000, keys=1000)
    doc = json.loads(spec.read_text())
    doc["query"] = {"kind": "session", "source": "clicks", "keys": ["ad"], "gap": "1 minute",
                    "output_mode": "complete"}
    spec.write_text(json.dumps(doc))
    return spec


@pytest.mark.parametrize(("sig", "to_group", "code"), [
    (signal.SIGINT, True, 130),  # Ctrl-C: the terminal signals the whole process group
    (signal.SIGINT, False, 130),
    (signal.SIGTERM, False, 143),
])
def test_an_interrupted_sweep_ends_with_one_line(tmp_path: Path, sweep_spec: Path,
                                                 sig: signal.Signals, to_group: bool,
                                                 code: int) -> None:
    env = env_for(tmp_path, WMBT_THREADS="2")  # (two worker processes on any machine)
    proc = subprocess.Popen([*WITH_SIGINT, str(WMBT), "sweep", str(sweep_spec), "--delays",
                             "0 seconds..1 hour/2000"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    workers: list[int] = []
    try:
        end = time.monotonic() + 120
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.1)  # until the sweep's workers run
            workers = children(proc.pid)
        assert len(workers) >= 2, proc.poll()
        time.sleep(0.5)
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, err, out) == (code, "wmbt: interrupted\n", "")
        assert all(gone(w) for w in workers)  # none left running without its parent
    finally:
        for pid in [proc.pid, *workers]:
            try:
                os.kill(pid, signal.SIGKILL)  # (left by a failure above)
            except ProcessLookupError:
                pass


def pipe_full(proc: subprocess.Popen[bytes], within: float = 120.0) -> bool:
    """Whether ``proc`` filled its stdout pipe (it is then blocked writing to it)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    end = time.monotonic() + within
    while time.monotonic() < end and proc.poll() is None:
        held = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, held)
        if held[0] >= size:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_json_document_is_whole_when_interrupted_while_written(tmp_path: Path,
                                                               sig: signal.Signals,
                                                               code: int) -> None:
    # a document larger than the pipe: the reader is slow, the process waits in the write
    generated_spec(tmp_path, rows=4000, keys=4000)
    proc = subprocess.Popen([*WITH_SIGINT, str(WMBT), "predict", "spec.yaml", "--json"],
                            cwd=tmp_path, env=env_for(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert pipe_full(proc), proc.poll()
        time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    doc = json.loads(out)  # whole: the signal took effect once it was out
    assert doc["backtest"] == "gen" and len(doc["candidates"][0]["predicted"]["outputs"]) > 1000
    assert (proc.returncode, err) == (code, b"wmbt: interrupted\n")


def test_a_reader_gone_ends_it_quietly(tmp_path: Path) -> None:
    small_spec(tmp_path)
    proc = subprocess.Popen([str(WMBT), "predict", "spec.yaml"], cwd=tmp_path,
                            env=env_for(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # `wmbt predict spec.yaml | head -0`
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.wait(timeout=300) == 141
    assert "Error" not in err and "Traceback" not in err, err


@pytest.mark.spark
@pytest.mark.parametrize(("sig", "to_group", "code"), [(signal.SIGINT, True, 130),
                                                       (signal.SIGTERM, False, 143)])
def test_an_interrupted_spark_replay_ends_with_one_line(tmp_path: Path, sig: signal.Signals,
                                                        to_group: bool, code: int) -> None:
    # pyspark's own SIGINT handler (cancelAllJobs, re-entering py4j) can end the command with
    # a Py4JError instead of a KeyboardInterrupt: still an interruption; and py4j logs what
    # interrupted its calls, with tracebacks, which are left out
    rng = np.random.default_rng(3)
    for c in range(100):  # a batch a commit: a replay of minutes, whatever the machine
        ts = pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(
            c * 60 + rng.uniform(0, 60, 20), unit="s")
        write_deltalake(str(tmp_path / "clicks"), pd.DataFrame({
            "ad": rng.integers(0, 5, 20), "ts": ts.astype("datetime64[us, UTC]")}), mode="append")
    (tmp_path / "spec.yaml").write_text(json.dumps({
        "name": "long", "sources": {"clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "1 minute"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {"clicks": "2 minutes"}}},
    }))
    proc = subprocess.Popen([*WITH_SIGINT, str(WMBT), "replay", "spec.yaml"], cwd=tmp_path,
                            env=env_for(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    jvm: list[int] = []
    try:
        for line in proc.stderr:  # until the session is up and the replay starts
            if "replaying 100 data ticks in Spark" in line:
                break
        time.sleep(3)
        jvm = children(proc.pid)
        assert proc.poll() is None and jvm
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == code, err
        assert err.splitlines()[-1] == "wmbt: interrupted" and "internal error" not in err
        assert "Traceback" not in err, err
        assert out == ""
        assert all(gone(pid, 60) for pid in jvm)  # no Spark left running
    finally:
        for pid in [proc.pid, *jvm]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
