"""A results folder that cannot take the results is refused before any work, as one line naming
the folder and what it should be (exit 2), and nothing in it changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.cli import main
from tests.test_backtest import agg_spec

ROOT = Path(__file__).resolve().parents[1]


def spec_file(tmp: Path) -> Path:
    spec = agg_spec(tmp)
    path = Path(spec.path)
    path.write_text(spec.model_dump_json(exclude={"path"}))
    return path


def refused(capsys: pytest.CaptureFixture[str], args: list[str], where: Path, said: str) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"wmbt: error: {where}: {said}\n", err  # one line, before any prediction


def test_a_file_for_the_results_folder_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    spec = spec_file(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    said = ("expected a folder for the results (Delta tables batch_reports, outputs, runs), "
            "found a file")
    refused(capsys, ["predict", str(spec), "--results", str(afile)], afile, said)
    monkeypatch.setenv("WMBT_RESULTS", str(afile))
    refused(capsys, ["predict", str(spec)], afile, said)
    refused(capsys, ["sweep", str(spec), "--delays", "1 second..3 seconds/3"], afile, said)
    refused(capsys, ["predict", str(spec), "--results", str(afile / "sub")], afile / "sub",
            "expected a folder for the results that can be created (Not a directory)")
    assert afile.read_text() == "x"


def test_something_else_where_a_table_belongs_is_refused(tmp_path: Path, capsys) -> None:
    spec = spec_file(tmp_path)
    res = tmp_path / "res"
    (res / "runs").mkdir(parents=True)
    (res / "runs" / "notes.txt").write_text("mine")
    refused(capsys, ["predict", str(spec), "--results", str(res)], res / "runs",
            "expected a Delta table (a folder with _delta_log) or nothing, found other files")
    assert sorted(p.name for p in res.iterdir()) == ["runs"]  # no other table made
    shutil.rmtree(res / "runs")
    (res / "outputs").write_text("mine")
    refused(capsys, ["predict", str(spec), "--results", str(res)], res / "outputs",
            "expected a Delta table (a folder), found a file")
    assert sorted(p.name for p in res.iterdir()) == ["outputs"]
    (res / "outputs").unlink()
    (res / "runs" / "_delta_log").mkdir(parents=True)
    (res / "runs" / "_delta_log" / "00000000000000000000.json").write_text("{broken")
    assert main(["predict", str(spec), "--results", str(res)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"wmbt: error: {res / 'runs'}: reading the Delta table failed: ")
    assert err.count("\n") == 1 and sorted(p.name for p in res.iterdir()) == ["runs"]


def read_only(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run with ``folder`` read-only: a read-only bind mount in a mount namespace of
    its own when root (whom permissions do not stop), else without write permission."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        finally:
            folder.chmod(0o755)
    if not shutil.which("unshare"):
        pytest.skip("root without unshare: no way to make a folder read-only")
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && '
              'exec "$@"')
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), *argv],
                          env=env, capture_output=True, text=True, timeout=300)


def test_a_read_only_results_folder_is_refused(tmp_path: Path) -> None:
    spec = spec_file(tmp_path)
    wmbt = [sys.executable, "-m", "jobs.cli", "predict", str(spec), "--results"]
    empty = tmp_path / "empty"
    empty.mkdir()
    done = read_only(empty, [*wmbt, str(empty)])
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"wmbt: error: {empty}: expected a writable folder "
                                        f"(Read-only file system)"] or os.geteuid() != 0
    assert list(empty.iterdir()) == []
    full = tmp_path / "full"
    assert main(["predict", str(spec), "--results", str(full)]) == 0
    files = lambda: {p: p.read_bytes() for p in full.rglob("*") if p.is_file()}  # noqa: E731
    before = files()
    for folder in (full, full / "outputs", full / "runs" / "_delta_log"):
        done = read_only(folder, [*wmbt, str(full)])
        assert done.returncode == 2, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"wmbt: error: {folder}: expected a "
                                                       f"writable folder"), done.stderr
    assert files() == before  # (the probes' files come and go in the writable folders)
    runs = json.loads(subprocess.run(
        [sys.executable, "-c", "import sys; from jobs.results import ResultsStore; "
         "print(ResultsStore(sys.argv[1]).runs().to_json(orient='records'))", str(full)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        check=True).stdout)
    assert [(r["candidate"], r["side"]) for r in runs] == [("c", "predicted")]
