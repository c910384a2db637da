"""Emitted rows as stored (jobs/results.py, semantics/report.py): one JSON object per row,
timestamps as epoch milliseconds, every kind of null as null, written column by column and
read back as they were."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from deltalake import DeltaTable

from jobs.results import ResultsStore
from semantics.report import RunResult, dumps, frame_to_records, json_rows
from tests.predict_kit import spec_of


def _edge_frame(n: int = 4000, seed: int = 1) -> pd.DataFrame:
    """Every dtype an output column has, with its nulls and awkward values."""
    r = np.random.default_rng(seed)
    pick = lambda values: np.array(values, dtype=object)[r.integers(0, len(values), n)]  # noqa: E731
    return pd.DataFrame({
        "batch_id": np.sort(r.integers(0, 50, n)),
        "f": np.where(r.random(n) < 0.1, np.nan,
                      r.normal(size=n) * 10.0 ** r.integers(-20, 20, n)),
        "edge": pick([0.0, -0.0, np.inf, -np.inf, 1e16, 1e-5, 0.1, 2.0 ** 53]).astype(float),
        "f32": pd.array(np.where(r.random(n) < 0.1, None, r.normal(size=n).astype(np.float32)),
                        dtype="Float32"),
        "i": r.integers(-2 ** 62, 2 ** 62, n),
        "I": pd.array(np.where(r.random(n) < 0.2, None, r.integers(0, 9, n)), dtype="Int64"),
        "b": r.random(n) < 0.5,
        "B": pd.array(np.where(r.random(n) < 0.2, None, r.random(n) < 0.5), dtype="boolean"),
        "s": pick(["plain", 'quo"te', "back\\slash", "ünï", "\n", None, "日本"]),
        "t": pd.to_datetime(np.where(r.random(n) < 0.2, None, r.integers(0, 2 ** 40, n)),
                            unit="us", utc=True),
        "ntz": pd.to_datetime(r.integers(0, 2 ** 40, n), unit="us"),
        "arrow": pd.array(pick(["x", None, "y"]), dtype="string[pyarrow]"),
    })


def test_json_rows_are_json_dumps_of_the_records_byte_for_byte() -> None:
    # the column-wise writer gives exactly the text of json.dumps per record
    df = _edge_frame()
    cols = [c for c in df.columns if c != "batch_id"]
    want = [json.dumps({k: v for k, v in rec.items() if k != "batch_id"}, default=str)
            for rec in frame_to_records(df)]
    assert json_rows(df, cols).tolist() == want


def test_json_rows_in_several_arrow_chunks_are_the_same_text(monkeypatch) -> None:
    # json_texts builds the rows in chunks of JSON_CHUNK rows (32-bit string offsets)
    import semantics.report as report

    df = _edge_frame(2500)
    want = json_rows(df, list(df.columns)).tolist()
    monkeypatch.setattr(report, "JSON_CHUNK", 700)
    texts = report.json_texts(df, list(df.columns))
    assert texts.num_chunks == 4 and json_rows(df, list(df.columns)).tolist() == want
    assert json_rows(df.iloc[:0], list(df.columns)).tolist() == []
    assert json_rows(df.iloc[:3], []).tolist() == ["{}", "{}", "{}"]


def test_a_document_with_frames_is_the_json_of_its_records_byte_for_byte() -> None:
    # ``wmbt ... --json`` writes the frames of its document as text built column by column:
    # the same text as json.dumps of the document with every frame as its records
    df, empty = _edge_frame(500), pd.DataFrame({"batch_id": pd.Series([], dtype="int64")})
    run = RunResult("c", df.iloc[:7], df, {"elapsed_s": 0.25, "note": "a \x00 b"})
    doc = {"backtest": "x", "candidates": [{"predicted": run.to_json(False), "e": empty},
                                           {"actual": run.to_json(False), "t": (1, None)}]}
    want = {"backtest": "x", "candidates": [{"predicted": run.to_json(), "e": []},
                                            {"actual": run.to_json(), "t": [1, None]}]}
    assert dumps(doc) == json.dumps(want, default=str)
    assert json.loads(dumps(doc))["candidates"][0]["predicted"]["outputs"][3]["s"] in (
        "plain", 'quo"te', "back\\slash", "ünï", "\n", None, "日本")


def test_null_timestamps_are_null_not_the_integer_nat_is_stored_as() -> None:
    # an outer join's null-padded side has NaT timestamps: they were written as
    # -9223372036854776 (NaT's integer, floor-divided to ms)
    df = pd.DataFrame({"t": pd.to_datetime([1500, None], unit="ms", utc=True)})
    assert frame_to_records(df) == [{"t": 1500}, {"t": None}]
    assert json_rows(df, ["t"]).tolist() == ['{"t": 1500}', '{"t": null}']


def test_stored_rows_read_back_as_written(tmp_path: Path) -> None:
    df = _edge_frame(300)
    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    store = ResultsStore(tmp_path)
    batches = pd.DataFrame({"batch_id": [0], "input_rows_events": [len(df)]})
    store.write(spec, "c", "r1", "predicted", RunResult("c", batches, df))
    back = store.outputs(spec.name, "c", "r1", "predicted")
    assert back["batch_id"].tolist() == df["batch_id"].tolist()
    recs = frame_to_records(df)
    for c in df.columns[1:]:  # values as JSON gives them back (timestamps in ms, nulls None)
        got = [None if pd.isna(v) else v for v in back[c].tolist()]
        want = [r[c] if not (isinstance(r[c], float) and np.isnan(r[c])) else None
                for r in recs]
        assert got == want, c
    # the ids handed over dictionary-encoded are stored as the table's plain strings
    stored = DeltaTable(str(tmp_path / "outputs")).schema().to_arrow()
    assert stored.field("backtest").type in (pa.string(), pa.large_string(), pa.string_view())
    assert DeltaTable(str(tmp_path / "outputs")).to_pyarrow_table().column(
        "candidate").to_pylist() == ["c"] * len(df)


def test_emitted_rows_compare_as_multisets_with_their_batch() -> None:
    # compare.row_counts: one key per row (batch first, floats to 12 significant digits, a
    # NULL alike within a column), counted on each side; sorted by key
    from semantics.compare import compare_outputs, row_counts

    def floats(x: list[float], null: list[bool]) -> pd.arrays.FloatingArray:
        return pd.arrays.FloatingArray(np.array(x), np.array(null))

    p = pd.DataFrame({"batch_id": [1, 1, 0, 2], "k": ["a|b", "a|b", None, "c"],
                      "x": floats([0.1 + 0.2, 0.3, 0.0, 1.0], [False, False, True, False]),
                      "t": pd.to_datetime([1, 1, None, 2], unit="ms", utc=True)})
    a = p.iloc[[0, 2, 3, 3]].assign(  # 0.1 + 0.2 == 0.3 here
        x=floats([0.3, 0.0, 1.0, 1.0], [False, True, False, False]))
    got = row_counts(p, a)
    assert got.to_dict("list") == {
        "row": ["0|None|None|<NA>", "1|a|b|0.3|1000", "2|c|1|2000"],
        "batch_id": [0, 1, 2],
        "predicted_count": [1, 2, 1],
        "actual_count": [1, 1, 2],
    }
    diffs = compare_outputs(p, a)
    assert [(d.batch_id, d.predicted, d.actual) for d in diffs] == [(1, "2×", "1×"),
                                                                   (2, "1×", "2×")]
    # a NaN is a value (Spark keeps it apart from NULL): NaN == NaN, NaN != NULL
    nan, null = (pd.DataFrame({"x": floats([np.nan], [m])}) for m in (False, True))
    assert compare_outputs(nan, nan) == [] and compare_outputs(null, null) == []
    assert compare_outputs(pd.DataFrame({"x": [np.nan]}), nan) == []  # (numpy: no NULL)
    assert [d.column for d in compare_outputs(nan, null)] == ["output row None", "output row nan"]


def test_row_keys_are_the_canonical_values_as_text() -> None:
    # row_keys builds each column's text itself: it must be canonical()'s values as text
    # (floats to 12 significant digits), for every dtype, with nulls, bytes and odd objects
    import datetime
    import decimal

    from semantics.compare import FLOAT_DIGITS, canonical, row_keys

    df = _edge_frame(4000)  # (past 1000 rows, repeated integers are formatted once)
    df["obj"] = np.array([1, "x", None, 2.5, b"by", decimal.Decimal("1.10"),
                          datetime.date(2020, 1, 2), np.nan] * 500, dtype=object)
    df["ns"] = pd.to_datetime(np.arange(4000) * 1001 - 10 ** 18, unit="ns")
    df["cat"] = pd.Categorical(["a", None, "b", "a"] * 1000)
    c = canonical(df)
    texts = [[None if v is pd.NA else f"{v:.{FLOAT_DIGITS}g}" for v in c[col]]  # (NaN: nan)
             if pd.api.types.is_float_dtype(c[col]) else c[col] for col in df.columns]
    want = pd.DataFrame(dict(zip(df.columns, texts, strict=True))).astype(str)
    assert row_keys(df, list(df.columns)).tolist() == want.agg("|".join, axis=1).tolist()


def test_stored_rows_keep_their_order_when_built_in_chunks(tmp_path: Path, monkeypatch) -> None:
    # the row texts are built in arrow chunks; the Delta writer reorders the rows of a table of
    # several record batches, so the store writes them as one array
    import semantics.report as report

    monkeypatch.setattr(report, "JSON_CHUNK", 300)
    df = _edge_frame(3000).assign(i=np.arange(3000))
    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    store = ResultsStore(tmp_path)
    batches = pd.DataFrame({"batch_id": [0], "input_rows_events": [len(df)]})
    for _ in range(2):  # a new table, then a rewrite of the same key
        store.write(spec, "c", "r1", "predicted", RunResult("c", batches, df))
        back = store.outputs(spec.name, "c", "r1", "predicted")
        assert back["i"].tolist() == list(range(3000))


def test_stored_rows_parse_back_as_json_loads_makes_them(monkeypatch) -> None:
    # ResultsStore.outputs parses the rows with arrow's JSON reader: the same frame (columns,
    # dtypes, values) as pd.DataFrame of json.loads per row, but a float column holding a null
    # as a nullable Float64 (whose data keeps a NaN apart from the null); json.loads where
    # arrow cannot
    import pyarrow as pa

    import jobs.results as results
    from semantics.report import nan_kept

    df = _edge_frame(3000)
    cases = {"arrow": df.drop(columns="edge"),  # (no Infinity: arrow's reader takes it all)
             "fallback": df, "no columns": df[[]]}
    for name, frame in cases.items():
        texts = json_rows(frame, list(frame.columns)).tolist()
        want = pd.DataFrame([json.loads(t) for t in texts])
        for c in want.columns:  # (every NaN here was a null: json_rows of a numpy NaN)
            if pd.api.types.is_float_dtype(frame[c]) and want[c].hasnans:
                want[c] = want[c].astype("Float64")
        if name == "arrow":  # it must not fall back
            monkeypatch.setattr(results.json, "loads", lambda _t: 1 / 0)
        got = results.parsed_rows(pa.chunked_array([pa.array(texts[:1000]),
                                                    pa.array(texts[1000:])]))
        monkeypatch.undo()
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert list(got.dtypes) == list(want.dtypes), name
    # an emitted NaN (written NaN: nan_kept) comes back a NaN, next to a null
    frame = df[["f"]].assign(g=df["f32"].astype("Float64"))
    texts = json_rows(nan_kept(frame), ["f", "g"]).tolist()
    got = results.parsed_rows(pa.chunked_array([pa.array(texts)]))
    assert np.isnan(got["f"].to_numpy()).tolist() == frame["f"].isna().tolist()
    assert got["g"].isna().tolist() == frame["g"].isna().tolist()


def test_a_rerun_replaces_the_slots_run_whatever_its_run_id(tmp_path: Path) -> None:
    # the store keeps the newest run of each (backtest, candidate, side): a rerun after the spec
    # or data changed (a new run id) replaces the old rows instead of adding beside them
    from deltalake import DeltaTable

    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    store = ResultsStore(tmp_path)

    def run(n: int) -> RunResult:
        return RunResult("c", pd.DataFrame({"batch_id": range(n), "input_rows_events": 1}),
                         pd.DataFrame({"batch_id": range(n), "i": range(n)}))

    store.write(spec, "c", "old", "predicted", run(3))
    store.write(spec, "c", "old", "actual", run(3))
    store.write(spec, "c", "new", "predicted", run(5))
    store.write(spec, "c", "new", "predicted", run(5))  # (same run id: idempotent)
    runs = store.runs("t", "c")
    assert sorted(zip(runs["side"], runs["run_id"], strict=True)) == [("actual", "old"),
                                                                      ("predicted", "new")]
    assert store.batches("t", "c", side="predicted")["batch_id"].tolist() == list(range(5))
    assert len(store.outputs("t", "c", "new", "predicted")) == 5
    assert store.outputs("t", "c", "old", "predicted").empty
    for table, n in (("runs", 2), ("batch_reports", 8), ("outputs", 8)):
        raw = DeltaTable(str(tmp_path / table)).to_pandas()
        assert len(raw) == n and raw["write_id"].nunique() == 2, table


def test_tables_written_before_write_ids_read_and_are_replaced(tmp_path: Path) -> None:
    # a results folder of the store before write ids: its runs read as before, and the next
    # write of a slot adds the column and replaces them
    from deltalake import DeltaTable, write_deltalake

    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    new, old = tmp_path / "new", tmp_path / "old"
    frame = pd.DataFrame({"batch_id": [0, 0, 1], "i": [1, 2, 3]})
    result = RunResult("c", pd.DataFrame({"batch_id": [0, 1], "input_rows_events": 2}), frame)
    ResultsStore(new).write(spec, "c", "r1", "predicted", result)
    ResultsStore(new).write(spec, "d", "r1", "predicted", result)
    for table in ("runs", "batch_reports", "outputs"):
        raw = DeltaTable(str(new / table)).to_pyarrow_table().drop_columns(["write_id"])
        write_deltalake(str(old / table), raw)
    store = ResultsStore(old)
    assert sorted(store.runs("t")["candidate"]) == ["c", "d"]
    assert store.batches("t", "c")["batch_id"].tolist() == [0, 1]
    assert store.outputs("t", "c", "r1", "predicted")["i"].tolist() == [1, 2, 3]
    store.write(spec, "c", "r2", "predicted", RunResult("c", result.batches, frame.iloc[:1]))
    assert store.outputs("t", "c", "r2", "predicted")["i"].tolist() == [1]
    assert store.outputs("t", "d", "r1", "predicted")["i"].tolist() == [1, 2, 3]
    raw = DeltaTable(str(old / "outputs")).to_pandas()
    assert sorted(zip(raw["candidate"], raw["run_id"], strict=True)) == [
        ("c", "r2"), ("d", "r1"), ("d", "r1"), ("d", "r1")]
