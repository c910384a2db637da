"""Replay planning: Delta history -> arrival order -> ticks (SPEC.md §2), and bad-data errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deltalake import write_deltalake
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from semantics.errors import DataError, SpecError
from semantics.history import plan
from semantics.schedule import ADD_INDEX, ARRIVAL_MS, VERSION
from semantics.spec import parse_spec
from tests.deltas import ts, write_commits


def spec_for(tmp_path: Path, batch_by: dict, pace: str = "backlog", **source: object):
    return parse_spec({
        "name": "t",
        "sources": {"clicks": {"table": str(tmp_path / "clicks"), "event_time": "ts", **source}},
        "query": {"kind": "deduplication", "source": "clicks", "keys": ["id"]},
        "replay": {"batch_by": batch_by, "pace": pace},
        "candidates": {"c": {"watermark": {"clicks": "10 seconds"}}},
    }, str(tmp_path / "spec.yaml"))


@pytest.fixture
def three_commits(tmp_path: Path) -> Path:
    return write_commits(tmp_path / "clicks", [
        [{"id": 1, "ts": 15, "country": "NL"}],
        [{"id": 2, "ts": 3, "country": "DE"}, {"id": 3, "ts": 4, "country": "NL"}],
        [{"id": 4, "ts": 30, "country": "NL"}],
    ])


def ticks_of(schedule, source="clicks") -> list[list[int]]:
    df = schedule.rows[source]
    return [df.loc[df.tick == t.index, "id"].tolist() for t in schedule.ticks]


def test_backlog_one_commit_per_tick_then_one_idle_tick(tmp_path, three_commits) -> None:
    s = plan(spec_for(tmp_path, {"commits": 1}))
    assert [t.idle for t in s.ticks] == [False, False, False, True]
    assert ticks_of(s) == [[1], [2, 3], [4], []]
    assert s.rows["clicks"]["row_id"].tolist() == [0, 1, 2, 3]
    assert s.rows["clicks"][VERSION].tolist() == [0, 1, 1, 2]
    assert str(s.rows["clicks"]["ts"].dtype) == "datetime64[us, UTC]"


def test_live_pace_puts_an_idle_tick_after_every_data_tick(tmp_path, three_commits) -> None:
    s = plan(spec_for(tmp_path, {"commits": 1}, "live"))
    assert [t.idle for t in s.ticks] == [False, True, False, True, False, True]
    assert ticks_of(s) == [[1], [], [2, 3], [], [4], []]


def test_commits_n_and_rows_n(tmp_path, three_commits) -> None:
    assert ticks_of(plan(spec_for(tmp_path, {"commits": 2}))) == [[1, 2, 3], [4], []]
    # rows: n cuts across commit boundaries
    assert ticks_of(plan(spec_for(tmp_path, {"rows": 2}))) == [[1, 2], [3, 4], []]
    assert ticks_of(plan(spec_for(tmp_path, {"rows": 3}))) == [[1, 2, 3], [4], []]


def test_files_n_cuts_by_data_files_as_max_files_per_trigger(tmp_path: Path) -> None:
    # rule (Delta's maxFilesPerTrigger): a batch admits the next n data files in the log's
    # order (version, then the commit's add actions), so it may end inside a commit. Two
    # commits of three files each (one per partition value)
    import json

    for c in range(2):
        write_deltalake(str(tmp_path / "clicks"), pd.DataFrame({
            "id": [10 * c + i for i in range(6)], "part": ["a", "b", "c"] * 2,
            "ts": [ts(10 * c + i) for i in range(6)]}), partition_by=["part"], mode="append")
    log = sorted((tmp_path / "clicks" / "_delta_log").glob("*.json"))
    adds = [json.loads(line)["add"] for f in log for line in f.read_text().splitlines()
            if '"add"' in line]
    ids_of_file = [sorted(10 * (i // 3) + j for j in range(6)
                          if ["a", "b", "c"][j % 3] == a["partitionValues"]["part"])
                   for i, a in enumerate(adds)]
    assert len(ids_of_file) == 6
    s = plan(spec_for(tmp_path, {"files": 2}))
    want = [sorted(ids_of_file[0] + ids_of_file[1]), sorted(ids_of_file[2] + ids_of_file[3]),
            sorted(ids_of_file[4] + ids_of_file[5]), []]
    assert [sorted(t) for t in ticks_of(s)] == want
    assert s.rows["clicks"][ADD_INDEX].tolist() == sorted(s.rows["clicks"][ADD_INDEX])
    s = plan(spec_for(tmp_path, {"files": 4}))  # the second batch starts inside commit 1
    assert [sorted(t) for t in ticks_of(s)] == [
        sorted(sum(ids_of_file[:4], [])), sorted(sum(ids_of_file[4:], [])), []]
    # three files per commit: files 3 and commits 1 cut alike
    assert ticks_of(plan(spec_for(tmp_path, {"files": 3}))) == \
        ticks_of(plan(spec_for(tmp_path, {"commits": 1})))
    assert ADD_INDEX not in s.data_columns["clicks"]


def test_bytes_cut_as_max_bytes_per_trigger(tmp_path: Path) -> None:
    # rule (Delta's maxBytesPerTrigger, a soft limit): a batch admits the next file while it
    # has read fewer bytes than the limit, so the file that reaches it is the batch's last;
    # with files as well, both limits hold. Six files of one commit each, sizes from the log
    import json

    for c in range(6):
        write_deltalake(str(tmp_path / "clicks"), pd.DataFrame({
            "id": [100 * c + j for j in range(1 + 40 * (c % 2))],
            "ts": [ts(c)] * (1 + 40 * (c % 2))}), mode="append")
    sizes = [json.loads(x)["add"]["size"]
             for f in sorted((tmp_path / "clicks" / "_delta_log").glob("*.json"))
             for x in f.read_text().splitlines() if '"add"' in x]
    limit = sizes[0] + sizes[1]  # the first two files reach it exactly

    def batches(**by) -> list[list[int]]:
        got = ticks_of(plan(spec_for(tmp_path, by)))
        return [sorted({i // 100 for i in t}) for t in got if t]  # commits of each tick

    assert batches(bytes=limit)[0] == [0, 1]  # the second file reaches the limit: the last
    assert batches(bytes=limit + 1)[0] == [0, 1, 2]  # one byte short: the third is taken too
    assert batches(bytes=1) == [[c] for c in range(6)]  # at least one file a batch
    assert batches(bytes=limit + 1, files=2) == [[0, 1], [2, 3], [4, 5]]  # files bind first
    assert batches(bytes="1g") == [list(range(6))]


@pytest.mark.parametrize("by,error", [
    ({"bytes": "10 MB"}, None), ({"bytes": "512m", "files": 10}, None),
    ({"bytes": "1.5g"}, "a size such as '512m'"), ({"bytes": "10 parsecs"}, "units b, k"),
    ({"bytes": 0}, "a positive size"), ({"bytes": "1g", "rows": 5}, "exactly one of"),
])
def test_byte_sizes_are_read_as_spark_reads_them(tmp_path, three_commits, by, error) -> None:
    if error is None:
        spec_for(tmp_path, by)
    else:
        with pytest.raises(SpecError, match=error):
            spec_for(tmp_path, by)


def test_files_the_filter_empties_still_count(tmp_path: Path) -> None:
    # rule: maxFilesPerTrigger admits files before the query filters their rows, so a file
    # whose rows the filter all removes still takes its place in a batch (a batch of such
    # files alone is a batch without input rows: an empty data tick)
    import json

    write_deltalake(str(tmp_path / "clicks"), pd.DataFrame({
        "id": [0, 1, 2], "part": ["a", "b", "c"], "ts": [ts(i) for i in range(3)]}),
        partition_by=["part"])
    log = (tmp_path / "clicks" / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    order = [json.loads(x)["add"]["partitionValues"]["part"] for x in log if '"add"' in x]
    gone = order[1]  # the filter empties the log's second file
    idx = {p: ord(p) - ord("a") for p in order}
    s = plan(spec_for(tmp_path, {"files": 1}, filter=f"part <> '{gone}'"))
    # one file per batch: the emptied file's batch runs with no row; the others keep one each
    assert ticks_of(s) == [[idx[order[0]]], [], [idx[order[2]]], []]
    assert [t.idle for t in s.ticks] == [False, False, False, True]
    # two per batch: the first file with the emptied one, then the third alone (not the
    # first two files that have rows)
    s = plan(spec_for(tmp_path, {"files": 2}, filter=f"part <> '{gone}'"))
    assert ticks_of(s) == [[idx[order[0]]], [idx[order[2]]], []]


def test_versions_range_and_filter(tmp_path, three_commits) -> None:
    s = plan(spec_for(tmp_path, {"commits": 1}, versions=[1, 2]))
    assert ticks_of(s) == [[2, 3], [4], []]
    s = plan(spec_for(tmp_path, {"commits": 1}, filter="country = 'NL' AND id <> 4"))
    # rule: version 2 has no row left, but a Delta source still reads it and Spark runs a
    # batch on it (the query's filter runs after the source): an empty data tick
    assert ticks_of(s) == [[1], [3], [], []]
    assert [t.idle for t in s.ticks] == [False, False, False, True]


def test_a_commit_the_filter_empties_still_counts_as_a_commit(tmp_path, three_commits) -> None:
    # rule: batch_by commits counts the commits the source reads, before the query's filter:
    # version 1 (ids 2 and 3) is emptied, yet it is the first batch's second commit
    s = plan(spec_for(tmp_path, {"commits": 2}, filter="id <> 2 AND id <> 3"))
    assert ticks_of(s) == [[1], [4], []]
    s = plan(spec_for(tmp_path, {"commits": 1}, "live", filter="id <> 2 AND id <> 3"))
    assert ticks_of(s) == [[1], [], [], [], [4], []]
    assert [t.idle for t in s.ticks] == [False, True, False, True, False, True]
    # rows: n counts the rows the query reads; an emptied commit adds nothing there
    assert ticks_of(plan(spec_for(tmp_path, {"rows": 1}, filter="id <> 2 AND id <> 3"))
                    ) == [[1], [4], []]


def test_arrival_column_and_interval(tmp_path: Path) -> None:
    base = pd.Timestamp("2024-01-01", tz="UTC")
    rows = [{"id": i, "ts": 100 + i, "ingest": base + pd.Timedelta(seconds=sec)}
            for i, sec in enumerate([0, 30, 70, 65, 400])]
    write_commits(tmp_path / "clicks", [rows])
    s = plan(spec_for(tmp_path, {"arrival_interval": "1 minute"}, "live",
                      arrival="column:ingest"))
    # arrival order is by the column (65 s before 70 s); the empty minutes 2..5 add no tick
    assert ticks_of(s) == [[0, 1], [], [3, 2], [], [4], []]
    with pytest.raises(SpecError, match="commits needs arrival: commit"):
        spec_for(tmp_path, {"commits": 1}, arrival="column:ingest")
    with pytest.raises(SpecError, match="replay.batch_by.files: files needs arrival: commit"):
        spec_for(tmp_path, {"files": 1}, arrival="column:ingest")


def test_commit_times_are_made_increasing_as_deltas_history_does(tmp_path: Path) -> None:
    # rule: a writer whose clock is behind stamps a later version with an earlier time; Delta
    # reads a table's commits in version order and makes its history's times increasing
    # (the earlier one + 1 ms), so version 1 still arrives after version 0
    import json

    write_commits(tmp_path / "clicks", [[{"id": 1, "ts": 1}], [{"id": 2, "ts": 2}],
                                        [{"id": 3, "ts": 3}]])
    log = tmp_path / "clicks" / "_delta_log"
    times = []
    for v in range(3):
        f = log / f"{v:020d}.json"
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        for a in lines:
            if "commitInfo" in a:
                a["commitInfo"]["timestamp"] = [5_000, 4_000, 9_000][v]  # v1 "before" v0
                times.append(a["commitInfo"]["timestamp"])
        f.write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    assert times == [5_000, 4_000, 9_000]
    s = plan(spec_for(tmp_path, {"commits": 1}))
    assert ticks_of(s) == [[1], [2], [3], []]
    assert s.rows["clicks"][ARRIVAL_MS].tolist() == [5_000, 5_001, 9_000]


def test_two_sources_merge_by_commit_time(tmp_path: Path) -> None:
    write_commits(tmp_path / "imp", [[{"ad": 1, "ts": 1}]])
    write_commits(tmp_path / "clk", [[{"ad": 1, "ts": 2}]])
    write_commits(tmp_path / "imp", [[{"ad": 2, "ts": 3}]])

    def join_plan(batch_by: dict):
        return plan(parse_spec({
            "name": "j",
            "sources": {"imp": {"table": str(tmp_path / "imp"), "event_time": "ts"},
                        "clk": {"table": str(tmp_path / "clk"), "event_time": "ts"}},
            "query": {"kind": "join", "left": "imp", "right": "clk", "keys": ["ad"]},
            "replay": {"batch_by": batch_by},
            "candidates": {"c": {}},
        }))

    s = join_plan({"commits": 1})
    assert s.rows["imp"]["tick"].tolist() == [0, 2]
    assert s.rows["clk"]["tick"].tolist() == [1]
    assert s.rows["imp"]["row_id"].tolist() == [0, 2]
    assert [t.idle for t in s.ticks] == [False, False, False, True]
    # files of any source in arrival order: the first two are imp's first and clk's
    s = join_plan({"files": 2})
    assert s.rows["imp"]["tick"].tolist() == [0, 1] and s.rows["clk"]["tick"].tolist() == [0]


def test_row_ids_do_not_depend_on_batch_by(tmp_path, three_commits) -> None:
    a = plan(spec_for(tmp_path, {"commits": 1})).rows["clicks"]
    b = plan(spec_for(tmp_path, {"rows": 3})).rows["clicks"]
    assert a[["row_id", "id"]].equals(b[["row_id", "id"]])


# -- bad data: a clear error naming table, field and expectation -----------------------------

def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as e:
        plan(spec_for(tmp_path, {"commits": 1}))
    assert e.value.field == "sources.clicks.table" and "Delta table" in e.value.expected


def test_missing_event_time_column(tmp_path: Path) -> None:
    write_commits(tmp_path / "clicks", [[{"id": 1, "when": 3}]], event_time="when")
    with pytest.raises(DataError) as e:
        plan(spec_for(tmp_path, {"commits": 1}))
    assert e.value.field == "sources.clicks.event_time" and "'ts'" in e.value.expected


def test_naive_timestamps_are_rejected(tmp_path: Path) -> None:
    df = pd.DataFrame({"id": [1], "ts": [pd.Timestamp("2024-01-01")]})  # no time zone
    write_deltalake(str(tmp_path / "clicks"), df)
    with pytest.raises(DataError, match="naive"):
        plan(spec_for(tmp_path, {"commits": 1}))


def test_null_event_times_are_rejected(tmp_path: Path) -> None:
    df = pd.DataFrame({"id": [1, 2], "ts": [ts(1), pd.NaT]})
    df["ts"] = df["ts"].astype("datetime64[us, UTC]")
    write_deltalake(str(tmp_path / "clicks"), df)
    with pytest.raises(DataError, match="1 rows have none"):
        plan(spec_for(tmp_path, {"commits": 1}))


def test_empty_table_is_rejected(tmp_path: Path) -> None:
    df = pd.DataFrame({"id": pd.Series([], dtype="int64"),
                       "ts": pd.Series([], dtype="datetime64[us, UTC]")})
    write_deltalake(str(tmp_path / "clicks"), df)
    with pytest.raises(DataError, match="at least one row"):
        plan(spec_for(tmp_path, {"commits": 1}))


def test_missing_key_column(tmp_path: Path) -> None:
    write_commits(tmp_path / "clicks", [[{"key": 1, "ts": 3}]])
    with pytest.raises(DataError, match="column 'id'"):
        plan(spec_for(tmp_path, {"commits": 1}))


def test_bad_filter_names_the_field(tmp_path, three_commits) -> None:
    with pytest.raises(SpecError) as e:
        plan(spec_for(tmp_path, {"commits": 1}, filter="nation = 'NL'"))
    assert e.value.field == "sources.clicks.filter" and "unknown column" in e.value.expected


def test_a_commit_that_removes_rows_stops_the_stream_unless_skipped(tmp_path,
                                                                    three_commits) -> None:
    # rule (Delta streaming source): a commit with a dataChange remove (DELETE, UPDATE, MERGE,
    # overwrite) fails the stream; skipChangeCommits skips it whole, its rewritten file too.
    # Rows that arrived before the DELETE stay in the history: the stream had read them.
    from deltalake import DeltaTable

    DeltaTable(str(three_commits)).delete("id = 2")  # version 3 rewrites [3] without 2
    write_commits(three_commits, [[{"id": 5, "ts": 40, "country": "NL"}]])  # version 4
    with pytest.raises(DataError) as e:
        plan(spec_for(tmp_path, {"commits": 1}))
    assert e.value.field == "sources.clicks.skip_change_commits"
    assert "version 3 (DELETE)" in e.value.expected and "skipChangeCommits" in e.value.expected
    s = plan(spec_for(tmp_path, {"commits": 1}, skip_change_commits=True))
    assert ticks_of(s) == [[1], [2, 3], [4], [5], []]  # not [3] again
    assert s.rows["clicks"][VERSION].tolist() == [0, 1, 1, 2, 4]
    # a version range without the change needs no option
    assert ticks_of(plan(spec_for(tmp_path, {"commits": 1}, versions=[0, 2]))) == \
        [[1], [2, 3], [4], []]


def test_a_column_added_later_reads_as_null_in_earlier_rows(tmp_path, three_commits) -> None:
    df = pd.DataFrame({"id": [5], "ts": [ts(40)], "country": ["NL"], "device": ["phone"]})
    df["ts"] = df["ts"].astype("datetime64[us, UTC]")
    write_deltalake(str(three_commits), df, mode="append", schema_mode="merge")
    s = plan(spec_for(tmp_path, {"commits": 1}))
    rows = s.rows["clicks"]
    assert ticks_of(s) == [[1], [2, 3], [4], [5], []]
    assert rows["device"].isna().tolist() == [True, True, True, True, False]
    assert rows["device"].iloc[-1] == "phone"


def test_column_mapping_reads_logical_names(tmp_path: Path) -> None:
    # delta.columnMapping.mode = name: data files and partition values use physical names
    df = pd.DataFrame({"id": [1, 2], "country": ["NL", "DE"], "ts": [ts(15), ts(3)]})
    df["ts"] = df["ts"].astype("datetime64[us, UTC]")
    write_deltalake(str(tmp_path / "clicks"), df, partition_by=["country"], configuration={
        "delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
        "delta.minWriterVersion": "5"})
    s = plan(spec_for(tmp_path, {"commits": 1}))
    rows = s.rows["clicks"].sort_values("id")
    assert rows["id"].tolist() == [1, 2] and rows["country"].tolist() == ["NL", "DE"]
    assert rows["ts"].tolist() == [ts(15), ts(3)]


def test_a_filter_reads_timestamps_in_the_jobs_session_time_zone(tmp_path, three_commits) -> None:
    # ts are 15, 3, 4 and 30 s past the epoch. 00:00:10 is 10 s past it in UTC, and 23:00:10
    # UTC the day before in Amsterdam (UTC+1), as Spark reads it with that session time zone
    data = spec_for(tmp_path, {"commits": 1},
                    filter="ts > TIMESTAMP '1970-01-01 00:00:10'").model_dump(exclude={"path"})
    utc = plan(parse_spec(data, str(tmp_path / "s.yaml")))
    ams = plan(parse_spec({**data, "spark_conf": {
        "spark.sql.session.timeZone": "Europe/Amsterdam"}}, str(tmp_path / "s.yaml")))
    assert sorted(utc.rows["clicks"]["id"]) == [1, 4]
    assert sorted(ams.rows["clicks"]["id"]) == [1, 2, 3, 4]


def test_a_file_uri_names_a_local_table(tmp_path, three_commits) -> None:
    data = spec_for(tmp_path, {"commits": 1}).model_dump(exclude={"path"})
    data["sources"]["clicks"]["table"] = three_commits.as_uri()  # file:///...
    assert data["sources"]["clicks"]["table"].startswith("file:///")
    assert ticks_of(plan(parse_spec(data, str(tmp_path / "s.yaml")))) == [[1], [2, 3], [4], []]


def test_an_interval_whose_rows_the_filter_empties_is_a_batch(tmp_path, three_commits) -> None:
    # rule: a commit arriving in an interval is read there even when the query's filter then
    # removes all its rows: the interval is a batch without input rows (an empty data tick),
    # not an interval without arrivals (no data tick)
    import json

    log = tmp_path / "clicks" / "_delta_log"
    for v, at in enumerate([0, 60_000, 120_000]):
        f = log / f"{v:020d}.json"
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        for a in lines:
            if "commitInfo" in a:
                a["commitInfo"]["timestamp"] = 1_700_000_000_000 + at
        f.write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    s = plan(spec_for(tmp_path, {"arrival_interval": "1 minute"}, filter="id <> 2 AND id <> 3"))
    assert ticks_of(s) == [[1], [], [4], []]
    assert [t.idle for t in s.ticks] == [False, False, False, True]
    assert s.ticks[1].arrival_start_ms == 1_700_000_060_000


@st.composite
def _logs(draw: st.DrawFn) -> list[tuple[int, int, int, int, int]]:
    """Data files of one or two sources: (arrival ms, source, version, add index, rows kept
    by the filter: 0 = emptied), in the log's order per source."""
    out = []
    for src in range(draw(st.integers(1, 2))):
        at, add = 0, 0
        for version in range(draw(st.integers(1, 5))):
            at += draw(st.sampled_from([0, 1, 500, 1000, 2500]))
            for _ in range(draw(st.integers(1, 3))):
                out.append((at, src, version, add, draw(st.integers(0, 2))))
                add += 1
    return out


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(log=_logs(), by=st.sampled_from([{"commits": 1}, {"commits": 2}, {"files": 1},
                                        {"files": 2}, {"rows": 2},
                                        {"arrival_interval": "1 second"}]),
       pace=st.sampled_from(["backlog", "live"]))
def test_cut_with_emptied_files_against_a_plain_model(log, by, pace) -> None:
    # rule: emptied files take their place in the arrival sequence as any file (a commit, a
    # file, an arrival), and a tick that gets only such files is a data tick without rows;
    # rows: n ignores them. The model walks the files one by one.
    from semantics.schedule import ADD_INDEX, ARRIVAL_MS, ROW_ID, VERSION, cut
    from semantics.spec import BatchBy

    batch_by = BatchBy.model_validate(by)
    files = sorted(log)  # merged: arrival, source, version, add index
    assume(any(f[4] for f in files if f[1] == 0) and (len({f[1] for f in files}) == 1
                                                      or any(f[4] for f in files if f[1] == 1)))
    names = sorted({f[1] for f in files})
    rows: dict[int, list[dict]] = {s: [] for s in names}
    fb: dict[int, dict[int, int]] = {s: {} for s in names}  # batch by add index
    gone: dict[int, list[dict]] = {s: [] for s in names}
    rid = 0
    for i, (at, src, version, add, kept) in enumerate(files):
        fb[src][add] = i // (batch_by.files or 1)
        if not kept:
            gone[src].append({ARRIVAL_MS: at, VERSION: version, ADD_INDEX: add})
        for _ in range(kept):
            rows[src].append({ROW_ID: rid, ARRIVAL_MS: at, VERSION: version, ADD_INDEX: add,
                              "ts": pd.Timestamp(rid, unit="s", tz="UTC")})
            rid += 1
    # the model: each file's group, then groups in order, empty ones kept
    if batch_by.rows is not None:
        seq = [(f, None) for f in files for _ in range(f[4])]
        groups = [i // batch_by.rows for i in range(len(seq))]
    elif batch_by.commits is not None:
        commit_ids = {}
        for f in files:
            commit_ids.setdefault((f[1], f[2], f[0]), len(commit_ids))
        groups = [commit_ids[(f[1], f[2], f[0])] // batch_by.commits for f in files]
    elif batch_by.files is not None:
        groups = [i // batch_by.files for i in range(len(files))]
    else:
        groups = [(f[0] - files[0][0]) // 1000 for f in files]
    dense = {g: k for k, g in enumerate(sorted(set(groups)))}
    expect: list[list[int]] = [[] for _ in dense]
    rid = 0
    per_file = [f[4] for f in files] if batch_by.rows is None else [1] * len(groups)
    for g, n in zip(groups, per_file, strict=True):
        for _ in range(n):
            expect[dense[g]].append(rid)
            rid += 1
    label = {s: f"s{s}" for s in names}
    frames = {label[s]: pd.DataFrame(rows[s]) for s in names}
    sched = cut("t", frames, {label[s]: "ts" for s in names}, batch_by, pace,
                file_batch={label[s]: np.array([fb[s][a] for a in range(len(fb[s]))],
                                               dtype=np.int64) for s in names}
                if batch_by.by_files else None,
                emptied={label[s]: pd.DataFrame(gone[s], columns=[ARRIVAL_MS, VERSION,
                                                                  ADD_INDEX])
                         for s in names})
    data = [t for t in sched.ticks if not t.idle]
    got = [sorted(r for s in sched.rows for r in sched.tick_rows(s, t.index)[ROW_ID])
           for t in data]
    assert got == expect
    assert [t.idle for t in sched.ticks] == (
        [x for _ in expect for x in (False, True)] if pace == "live" else
        [False] * len(expect) + [True])


def test_row_ids_repeated_across_sources_are_refused() -> None:
    # the merged arrival order across sources is the row ids' order (SPEC §2): a row id used
    # by two sources leaves it undefined, so cut names the id and the sources instead of
    # interleaving them row by row
    from semantics.schedule import cut
    from semantics.spec import BatchBy

    def rows(ids: list[int], version: list[int]) -> pd.DataFrame:
        return pd.DataFrame({"row_id": ids, ARRIVAL_MS: version, VERSION: version,
                             "ts": pd.to_datetime(ids, unit="s", utc=True)})

    ok = cut("t", {"a": rows([0, 2], [0, 1]), "b": rows([1, 3], [0, 1])}, {"a": "ts", "b": "ts"},
             BatchBy(commits=1), "backlog")
    assert sum(not t.idle for t in ok.ticks) == 4
    with pytest.raises(ValueError, match=r"row id 1 is used twice \(sources a, b\)"):
        cut("t", {"a": rows([0, 1], [0, 1]), "b": rows([1, 2], [0, 1])},
            {"a": "ts", "b": "ts"}, BatchBy(commits=1), "backlog")
