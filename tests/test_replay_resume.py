"""An interrupted replay resumes and reports exactly what an uninterrupted one does.

Real ``wmbt replay`` processes (the tree's code through PYTHONPATH) interrupted with Ctrl-C
(SIGINT to the process group, as a terminal sends it) and killed with SIGKILL while Spark runs
a schedule of 200 batches; the run that finishes must say it resumes and store, and print with
``--json``, the report and outputs of an uninterrupted run. The in-process cases check when a
replay starts afresh instead (``jobs.resume``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from jobs import resume
from jobs.replay import replay
from jobs.results import ResultsStore
from semantics.errors import WmbtError
from semantics.history import plan
from semantics.spec import parse_spec
from tests.deltas import write_commits
from tests.replay_support import make_spec

ROOT = Path(__file__).resolve().parents[1]
WMBT = ROOT / ".venv" / "bin" / "wmbt"
ROWS = 100  # one batch each (batch_by rows: 1), plus a trailing no-data batch


def write_case(root: Path, rows: int = ROWS, delay: str = "20 seconds") -> Path:
    """A Delta table of ``rows`` rows (some late) and a spec replaying one row a batch."""
    rnd = random.Random(7)
    write_commits(root / "e", [[{"k": i % 3, "v": i, "ts": 10 * i + rnd.choice([0, 0, -15, -40])}
                                for i in range(rows)]])
    spec = root / "spec.yaml"
    spec.write_text(f"""name: resume
sources:
  e: {{table: e, event_time: ts}}
query:
  kind: aggregation
  source: e
  keys: [k]
  window: {{duration: 30 seconds}}
  aggregates: {{n: "count(*)", s: "sum(v)"}}
replay:
  batch_by: {{rows: 1}}
  pace: backlog
candidates:
  c: {{watermark: {{e: {delay}}}}}
""")
    return spec


def wmbt(spec: Path, results: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([str(WMBT), "replay", str(spec), "--json", "--results", str(results)],
                            cwd=spec.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def commits(results: Path) -> int:
    d = results / "_work" / "resume" / "c" / "c" / "checkpoint" / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def interrupt_after(proc: subprocess.Popen, results: Path, batches: int, sig: int
                    ) -> tuple[int, str]:
    """Send ``sig`` once ``batches`` batches are committed; wait until the process and its JVM
    are gone. Returns the exit code and stderr."""
    deadline = time.monotonic() + 600
    while commits(results) < batches:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    jvms = children(proc.pid)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # (as a terminal's Ctrl-C: the JVM ignores it)
    else:
        os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    for pid in jvms:  # the JVM exits when its driver's pipe closes
        for _ in range(300):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    return proc.returncode, err


def finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out), err


def stored(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    store = ResultsStore(results)
    batches = store.batches("resume", "c", side="actual").reset_index(drop=True)
    run_id = batches["run_id"].iloc[0]
    return batches, store.outputs("resume", "c", run_id, "actual")


def comparable(doc: dict) -> dict:
    """The JSON document without what differs between any two runs (times, paths)."""
    actual = doc["candidates"][0]["actual"]
    info = {k: v for k, v in actual["info"].items()
            if k not in ("elapsed_s", "checkpoint", "outputs_dir", "progress")}
    return {"batches": actual["batches"], "outputs": actual["outputs"], "info": info}


def python_traceback_only(err: str) -> list[str]:
    """stderr without Python's KeyboardInterrupt traceback, which the CLI prints until its
    handler maps the interrupt to one line; the traceback must hold no py4j frame."""
    lines = err.splitlines()
    if "Traceback (most recent call last):" not in lines:
        return lines
    i = lines.index("Traceback (most recent call last):")
    block = lines[i:]
    assert block[-1] == "KeyboardInterrupt", err
    assert not any("py4j" in ln for ln in block), err
    return lines[:i]


@pytest.mark.spark
def test_killed_replay_resumes_to_the_uninterrupted_report(tmp_path):
    spec = write_case(tmp_path)
    reference, _ = finish(wmbt(spec, tmp_path / "r0"))
    assert len(reference["candidates"][0]["actual"]["batches"]) > ROWS

    # Ctrl-C: the query stops cleanly, no py4j or Java trace, the work folder stays resumable
    results = tmp_path / "r1"
    code, err = interrupt_after(wmbt(spec, results), results, 20, signal.SIGINT)
    assert code != 0
    assert commits(results) < ROWS
    cli_maps_it = "KeyboardInterrupt" in (ROOT / "jobs" / "cli.py").read_text()
    rest = err.splitlines() if cli_maps_it else python_traceback_only(err)
    noise = [ln for ln in rest if not ln.startswith("wmbt: ") and ln.strip()
             and not ln.startswith(("WARNING: Using incubator modules", "Setting default log",
                                    "To adjust logging level"))]
    assert noise == [], err
    assert "Traceback" not in "\n".join(rest) and "py4j" not in err and "at org." not in err
    assert not (results / "runs").exists()  # nothing stored from an incomplete replay

    # SIGKILL later on, then a run to the end
    proc = wmbt(spec, results)
    code, err = interrupt_after(proc, results, 60, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert "wmbt: c: resuming the interrupted replay" in err, err
    doc, err = finish(wmbt(spec, results))
    assert "wmbt: c: resuming the interrupted replay" in err, err
    assert "starting afresh" not in err

    assert comparable(doc) == comparable(reference)
    for got, want in zip(stored(results), stored(tmp_path / "r0"), strict=True):
        pd.testing.assert_frame_equal(got, want)


@pytest.mark.spark
def test_resume_or_start_afresh(spark, tmp_path):
    # A work folder as a kill after the last commit leaves it (manifest "running"): the same
    # replay resumes (batch 4 runs again) and reports the same, state_bytes included; a
    # changed spec, several watermarked inputs or --fresh start afresh, saying why.
    commits_ = [("e", [{"k": 1, "ts": t}]) for t in (1, 12, 3, 25, 40)]
    query = {"kind": "aggregation", "source": "e", "keys": ["k"],
             "window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}}
    spec = make_spec(tmp_path / "src", commits_, query, {"e": "5 seconds"})
    cdir = tmp_path / "work" / "c"
    said: list[str] = []

    def run(s, **kw):
        return replay(s, "c", plan(s, "c"), tmp_path / "work", spark, notify=said.append, **kw)

    def interrupted() -> None:
        doc = json.loads((cdir / resume.MANIFEST).read_text())
        resume.write_manifest(cdir, resume.Fingerprint(**doc["fingerprint"]), "running")

    first = run(spec)
    assert said == [] and first.batches["batch_id"].tolist() == [0, 1, 2, 3, 4, 5]
    again = run(spec)  # a complete replay is simply run again
    assert said == []
    interrupted()
    resumed = run(spec)
    assert said == ["resuming the interrupted replay from its checkpoint (batch 4 runs again)"]
    pd.testing.assert_frame_equal(resumed.batches, first.batches)
    pd.testing.assert_frame_equal(resumed.outputs, first.outputs)
    pd.testing.assert_frame_equal(again.outputs, first.outputs)

    interrupted()
    said.clear()
    doc = spec.model_dump(mode="json")
    doc["candidates"]["c"]["watermark"] = {"e": "1 second"}
    tighter = parse_spec(doc)
    changed = run(tighter)
    assert said == ["starting afresh: the spec changed since the interrupted replay"]
    assert changed.batches["batch_id"].tolist()[0] == 0

    interrupted()
    said.clear()
    run(tighter, fresh=True)
    assert said == ["starting afresh: a fresh start was asked for (--fresh)"]

    # several watermarked inputs: Spark's restart could move the watermark differently
    interrupted()
    fp = resume.Fingerprint(**json.loads((cdir / resume.MANIFEST).read_text())["fingerprint"])
    start = resume.prepare(cdir, fp, exact=False)
    assert start.rerun is None and "several watermarked inputs" in (start.reason or "")
    assert not (cdir / "checkpoint").exists()


@pytest.mark.spark
def test_ctrl_c_in_a_live_replay_then_resume(spark, tmp_path):
    # pace live (a no-data batch may follow each data batch): a Ctrl-C (SIGINT to this
    # process, from a thread, once 7 batches are committed) stops the query and raises
    # KeyboardInterrupt, the session stays usable, and the next replay resumes: the files not
    # read yet are fed again one by one, so the no-data batches fall as without the stop.
    import threading

    times = (1, 12, 3, 25, 40, 41, 55, 70, 66, 90, 91, 120)
    spec = make_spec(tmp_path / "src", [("e", [{"k": t % 2, "ts": t}]) for t in times],
                     {"kind": "aggregation", "source": "e", "keys": ["k"],
                      "window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}},
                     {"e": "5 seconds"}, pace="live")
    schedule = plan(spec, "c")
    reference = replay(spec, "c", schedule, tmp_path / "ref", spark)
    assert (~reference.batches["has_data"]).sum() >= 3

    cp = tmp_path / "work" / "c" / "checkpoint" / "commits"

    def press_ctrl_c() -> None:
        while len([p for p in cp.glob("*") if p.name.isdigit()]) < 7:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        replay(spec, "c", schedule, tmp_path / "work", spark)
    assert not spark.streams.active
    said: list[str] = []
    resumed = replay(spec, "c", schedule, tmp_path / "work", spark, notify=said.append)
    assert said and said[0].startswith("resuming the interrupted replay"), said
    pd.testing.assert_frame_equal(resumed.batches, reference.batches)
    pd.testing.assert_frame_equal(resumed.outputs, reference.outputs)


def test_a_second_replay_of_the_candidate_is_refused(tmp_path):
    # (no Spark: refused before anything starts, and nothing in the folder changes)
    spec = make_spec(tmp_path / "src", [("e", [{"k": 1, "ts": 1}])],
                     {"kind": "aggregation", "source": "e", "keys": ["k"],
                      "aggregates": {"n": "count(*)"}, "output_mode": "complete"}, {})
    cdir = tmp_path / "work" / "c"
    (cdir / "checkpoint").mkdir(parents=True)
    with resume.exclusive(cdir), pytest.raises(WmbtError, match="another wmbt process"):
        replay(spec, "c", plan(spec, "c"), tmp_path / "work", None)
    assert [p.name for p in cdir.iterdir()] == ["checkpoint"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_reopen_runs_a_committed_batch_again_and_plans_the_rest_anew(tmp_path):
    # (no Spark: the checkpoint layout jobs.checkpoint reads) batches 0-3 committed, batch 4
    # planned, the file source's log one entry further (a file logged, no batch planned yet)
    from jobs import checkpoint

    cp = tmp_path / "cp"
    for d in ("offsets", "commits", "sources/0"):
        (cp / d).mkdir(parents=True)
    for b in range(5):
        (cp / "offsets" / str(b)).write_text(f'v1\n{{"batchWatermarkMs": 0}}\n{{"logOffset": {b}}}')
        if b < 4:
            (cp / "commits" / str(b)).write_text("v1\n{}")
            (cp / "commits" / f".{b}.crc").write_bytes(b"c")
    for off in range(6):
        entry = json.dumps({"path": f"file:///in/tick-{off:06d}.parquet", "timestamp": 0,
                            "batchId": off})
        (cp / "sources" / "0" / str(off)).write_text(f"v1\n{entry}")
    checkpoint.reopen(cp, 2)
    assert checkpoint.committed_batches(cp) == [0, 1]
    assert sorted(p.name for p in (cp / "commits").iterdir()) == [".0.crc", ".1.crc", "0", "1"]
    assert sorted(p.name for p in (cp / "offsets").iterdir()) == ["0", "1", "2"]
    assert sorted(p.name for p in (cp / "sources" / "0").iterdir()) == ["0", "1", "2"]

    # snapshots (background maintenance, at times of its own) and temporary files of a kill
    # are not state bytes
    state = cp / "state" / "0" / "0"
    state.mkdir(parents=True)
    for name, size in (("1.delta", 10), ("2.delta", 20), ("2.snapshot", 30),
                       (".3.delta.0b1c.tmp", 40), ("_metadata", 5)):
        (state / name).write_bytes(b"x" * size)
    assert checkpoint.state_bytes_by_batch(cp, [0, 1]) == {0: 15, 1: 35}
