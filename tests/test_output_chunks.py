"""A plain ``wmbt predict`` builds its emitted rows a range of batches at a time
(``semantics.output_chunks``), stores them and prints them frame by frame: the answer is
exactly the one built at once. Randomized streams (NULLs, NaN, strings, timestamps) for every
operator kind, chunks as small as one batch; then the CLI end to end on real Delta tables:
the same ``--json`` text byte for byte and the same stored run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from deltalake import write_deltalake

from jobs import backtest
from jobs.cli import main
from jobs.results import ResultsStore
from semantics import output_chunks
from semantics.output_chunks import document_parts
from semantics.predict import predict
from semantics.report import dumps
from semantics.schedule import ARRIVAL_MS, VERSION, cut
from semantics.spec import BatchBy, load_spec, parse_spec
from tests.test_predict_outputs_memory import QUERIES as HELD

# the held outputs' test's queries (its aggregates read the same columns) and an inner join
QUERIES = [*HELD[:8], {"kind": "join", "type": "inner", "left": "a", "right": "b", "keys": ["k"],
                       "time_range": {"lower": "-20 seconds", "upper": "5 seconds"}}, *HELD[8:]]
IDS = [f"{q['kind']}-{q.get('output_mode', q.get('type', q.get('within_watermark', '')))}"
       for q in QUERIES]


def _rows(n: int, seed: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` events out of order by up to a minute, some an hour late; NULLs, NaN, strings."""
    ts = (1_700_000_000_000_000 + np.arange(n) * 100_000 - rng.integers(0, 60_000_000, n)
          - np.where(rng.random(n) < 0.02, 3_600_000_000, 0))
    f = rng.random(n)
    f[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({
        "id": rng.integers(0, max(n // 3, 1), n), "k": rng.integers(0, 30, n),
        "v": rng.integers(0, 9, n),
        "ni": pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 9, n)),
                       dtype="Int64"),
        "f": f,
        "w": np.array(["a", "b", None, "dd"], dtype=object)[rng.integers(0, 4, n)],
        "ts": pd.to_datetime(ts, unit="us", utc=True).astype("datetime64[us, UTC]"),
    })


def _spec(query: dict, delay: str, batch_rows: int, tables: dict[str, str] | None = None
          ) -> dict:
    sources = ["a", "b"] if query["kind"] == "join" else ["a"]
    return {
        "name": "chunks",
        "sources": {s: {"table": (tables or {}).get(s, s), "event_time": "ts"}
                    for s in sources},
        "query": query if query["kind"] == "join" else {"source": "a", **query},
        "replay": {"batch_by": {"rows": batch_rows}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {s: delay for s in sources}}},
    }


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("query", QUERIES, ids=IDS)
def test_streamed_outputs_are_the_outputs_built_at_once(query: dict, seed: int,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    rng = np.random.default_rng(seed)
    n, batch_rows = int(rng.integers(300, 1500)), int(rng.integers(20, 200))
    spec = parse_spec(_spec(query, f"{int(rng.integers(1, 40))} seconds", batch_rows))
    frames = {}
    for i, s in enumerate(spec.query_sources):
        df = _rows(n, i, rng)
        df.insert(0, "row_id", np.arange(n, dtype=np.int64) * len(spec.query_sources) + i)
        df.insert(1, ARRIVAL_MS, df["row_id"].to_numpy() * 10)
        df.insert(2, VERSION, df["row_id"].to_numpy() // 50)
        frames[s] = df
    sched = cut("chunks", frames, {s: "ts" for s in frames}, BatchBy(rows=batch_rows),
                "backlog")
    chunk = int(rng.integers(1, 300))  # (1: every batch a frame of its own)
    monkeypatch.setattr(output_chunks, "STREAM_CHUNK_ROWS", chunk)
    for path in ("auto", "step"):
        whole = predict(sched, spec, "c", explain=False, count_late=True, path=path)
        got = predict(sched, spec, "c", explain=False, count_late=True, path=path,
                      stream=True)
        assert got.streamed is not None and len(got.outputs) == 0
        assert list(got.outputs.columns) == list(whole.outputs.columns)
        pd.testing.assert_frame_equal(got.batches, whole.batches)
        assert got.info == whole.info
        parts = list(got.streamed.frames())
        assert len(got.streamed) == len(whole.outputs) > 0
        assert all(len(p) <= chunk or p["batch_id"].nunique() == 1 for p in parts)
        assert all(a["batch_id"].max() < b["batch_id"].min()
                   for a, b in zip(parts[:-1], parts[1:], strict=True))
        pd.testing.assert_frame_equal(pd.concat(parts), whole.outputs)
        # the --json text, byte for byte, and again: the frames can be built twice
        doc = dumps({"x": [whole.to_json(records=False)]})
        assert "".join(document_parts({"x": [got.to_json(records=False)]})) == doc
        assert "".join(document_parts({"x": [got.to_json(records=False)]})) == doc
        assert json.dumps(got.to_json(), default=str) == \
            json.dumps(whole.to_json(), default=str)  # (records: NaN == NaN as text)


def _tables(root: Path, spec_doc: dict, n: int, batch_rows: int) -> None:
    """The spec's sources as Delta tables: a commit per ``batch_rows`` rows."""
    rng = np.random.default_rng(7)
    for i, s in enumerate(spec_doc["sources"]):
        df = _rows(n, i, rng)
        for lo in range(0, n, batch_rows):
            write_deltalake(str(root / s), df.iloc[lo:lo + batch_rows], mode="append")


@pytest.mark.parametrize("query", [QUERIES[1], QUERIES[6], QUERIES[9]], ids=[
    IDS[1], IDS[6], IDS[9]])
def test_wmbt_predict_stores_and_prints_the_same_run_streamed(
        query: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = _spec(query, "20 seconds", 100, {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")})
    _tables(tmp_path, doc, 1200, 100)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setattr(output_chunks, "STREAM_CHUNK_ROWS", 37)
    spec = load_spec(path)
    # the route before streaming: built at once, stored, written by dumps
    whole = backtest.run_backtest(spec, actual=False, results=tmp_path / "whole",
                                  explain=False)
    assert whole.candidates[0].predicted is not None
    assert getattr(whole.candidates[0].predicted, "streamed", None) is None
    want = dumps(whole.to_json(records=False)) + "\n"

    def elapsed_free(text: str) -> object:
        got = json.loads(text)
        for c in got["candidates"]:
            c["predicted"]["info"].pop("elapsed_s")
        return got

    built: list[int] = []  # (frames the CLI's route built: it streams)
    frames = output_chunks.OutputChunks.frames
    monkeypatch.setattr(output_chunks.OutputChunks, "frames", lambda self, rows=None: (
        built.append(1) or f for f in frames(self, rows)))
    assert main(["predict", str(path), "--json", "--results", str(tmp_path / "streamed")]) == 0
    assert len(built) > 4  # (stored, then printed: several frames each)
    out = capsys.readouterr().out
    assert elapsed_free(out) == elapsed_free(want)
    # byte for byte but the elapsed time: the same text around it
    cut_at = want.index('"elapsed_s"')
    assert out[:cut_at] == want[:cut_at] and len(json.loads(out)["candidates"][0]["predicted"]
                                                  ["outputs"]) > 37
    stored = {}
    for name in ("whole", "streamed"):
        store = ResultsStore(tmp_path / name)
        row = store.runs().iloc[0]
        run = store.run(row["backtest"], row["candidate"], row["run_id"], "predicted")
        assert run is not None
        stored[name] = run
    pd.testing.assert_frame_equal(stored["streamed"].outputs, stored["whole"].outputs)
    pd.testing.assert_frame_equal(stored["streamed"].batches, stored["whole"].batches)
    for col in ("output_rows", "batches", "time_columns", "run_id"):
        assert stored["streamed"].row[col] == stored["whole"].row[col]
    # only the streamed run is read back in batch order (a run's rows stay as written)
    assert (stored["streamed"].row["batch_ordered"], stored["whole"].row["batch_ordered"]) \
        == (True, False)


def test_a_run_stored_in_many_chunks_reads_back_as_written_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ~300 000 emitted rows in record batches of 2^14: the Delta writer interleaves them
    # (seen here with deltalake 1.6), the reader puts them back in batch order
    from bench.predict import make

    monkeypatch.setattr(output_chunks, "STREAM_CHUNK_ROWS", 1 << 14)
    spec, sched = make("deduplication", 300_000, 5_000)
    got = {}
    for name, stream in (("whole", False), ("streamed", True)):
        p = predict(sched, spec, "c", explain=False, count_late=True, stream=stream)
        store = ResultsStore(tmp_path / name)
        store.write(spec, "c", "r", "predicted", p)
        got[name] = store.outputs(spec.name, "c", "r", "predicted")
    assert len(got["whole"]) > 200_000
    pd.testing.assert_frame_equal(got["streamed"], got["whole"])
