"""Checkpoint bytes of the HDFS-backed state store: the predictor against real Spark's files.

Each case replays a small query in Spark, then reads the checkpoint it wrote: every delta file
is decoded here (an lz4 block decoder of a few lines) and checked against the predictor's parts
— the compressed size of each block (exact), the records (puts and removes = Spark's
``numRowsUpdated`` / ``numRowsRemoved``), the UnsafeRow bytes of the sampled keys and values, the
fixed files — and the predicted ``checkpoint_bytes`` against the replay's, with the tolerance
the evaluation in docs/state-bytes.md supports.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from semantics import checkpoint_bytes as cb
from semantics.predict import predict
from tests.replay_support import make_spec, run

pytestmark = pytest.mark.spark


def _lz4_decode(src: bytes) -> bytes:
    """An lz4 block, decompressed (the format: token, literals, 2-byte offset, match)."""
    out = bytearray()
    i = 0
    while i < len(src):
        token = src[i]
        i += 1
        n = token >> 4
        if n == 15:
            while src[i] == 255:
                n, i = n + 255, i + 1
            n, i = n + src[i], i + 1
        out += src[i:i + n]
        i += n
        if i >= len(src):
            break
        offset = src[i] | src[i + 1] << 8
        i += 2
        m = token & 15
        if m == 15:
            while src[i] == 255:
                m, i = m + 255, i + 1
            m, i = m + src[i], i + 1
        for _ in range(m + 4):
            out.append(out[-offset])
    return bytes(out)


def _blocks(data: bytes) -> list[tuple[bool, int, bytes]]:
    """``LZ4BlockOutputStream`` blocks: (compressed?, stored length, raw bytes)."""
    out = []
    i = 0
    while i < len(data):
        assert data[i:i + 8] == b"LZ4Block"
        token = data[i + 8]
        stored, raw_len, _ = struct.unpack("<iii", data[i + 9:i + 21])
        body = data[i + 21:i + 21 + stored]
        compressed = token & 0xF0 == 0x20
        raw = _lz4_decode(body) if compressed else body
        assert len(raw) == raw_len
        out.append((compressed, stored, raw))
        i += 21 + stored
    return out


def _records(raw: bytes) -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    j = 0
    while True:
        (ks,) = struct.unpack(">i", raw[j:j + 4])
        if ks == -1:
            return out
        key = raw[j + 4:j + 4 + ks]
        (vs,) = struct.unpack(">i", raw[j + 4 + ks:j + 8 + ks])
        j += 8 + ks
        out.append((key, raw[j:j + vs] if vs >= 0 else None))
        j += max(vs, 0)


def _events(n_commits: int, rows: int, seed: int = 7) -> list[tuple[str, list[dict]]]:
    """Commits of ``rows`` events: ``ts`` rising ~0.1 s per event, 10 s out of order, 1 % a
    minute late; ``k`` of 1 000 keys, ``id`` repeated now and then, ``v`` below 100."""
    rng = np.random.default_rng(seed)
    commits = []
    t = 1_000_000.0
    for _ in range(n_commits):
        batch = []
        for _ in range(rows):
            t += rng.exponential(0.1)
            late = 60.0 if rng.random() < 0.01 else 0.0
            batch.append({"id": int(rng.integers(0, rows * n_commits // 2)),
                          "k": int(rng.integers(0, 1000)), "v": int(rng.integers(0, 100)),
                          "ts": round(t - rng.random() * 10 - late, 3)})
        commits.append(("e", batch))
    return commits


CASES = {
    "aggregation_2": ({"kind": "aggregation", "source": "e", "keys": ["k"],
                       "window": {"duration": "1 minute"},
                       "aggregates": {"n": "count(*)", "s": "sum(v)"}}, 2),
    "dedup_4": ({"kind": "deduplication", "source": "e", "keys": ["id", "ts"]}, 4),
    "session_2": ({"kind": "session", "source": "e", "keys": ["k"], "gap": "30 seconds",
                   "aggregates": {"n": "count(*)", "s": "sum(v)"}}, 2),
}


def decode_state_files(files: list[Path], batches: int
                       ) -> tuple[np.ndarray, np.ndarray, set[bytes], set[bytes]]:
    """Every state file's lz4 stream checked byte for byte against the predictor's sizing,
    and its records read: puts and removes per version, the keys and the values seen
    (delta files and RocksDB changelogs share the framing, docs/semantics.md §9.1)."""
    puts = np.zeros(batches + 1, dtype=np.int64)
    removes = np.zeros(batches + 1, dtype=np.int64)
    keys: set[bytes] = set()
    values: set[bytes] = set()
    for f in files:
        data = f.read_bytes()
        blocks = _blocks(data)
        raw = b"".join(b[2] for b in blocks)
        for compressed, stored, block in blocks:
            if compressed:
                assert stored == cb.lz4_block_bytes(block), f
        assert len(data) == cb.lz4_stream_bytes(raw), f
        version = int(f.name.split(".")[0])
        for key, value in _records(raw):
            if value is None:
                removes[version] += 1
            else:
                puts[version] += 1
                values.add(value)
            keys.add(key)
    return puts, removes, keys, values


@pytest.mark.parametrize("case", sorted(CASES))
def test_predicted_checkpoint_bytes_follow_sparks_delta_files(spark, tmp_path, case):
    query, parts = CASES[case]
    spec = make_spec(tmp_path / "src", _events(8, 400), query, {"e": "30 seconds"},
                     spark_conf={"spark.sql.shuffle.partitions": parts})
    actual = run(spark, spec, tmp_path / "work").batches
    from semantics.history import plan
    sched = plan(spec, "c")
    state = Path(tmp_path / "work" / "c" / "checkpoint" / "state" / "0")

    # every delta file: the lz4 stream the predictor sizes, byte for byte
    files = sorted(state.glob("*/*.delta"))
    assert len(files) == parts * len(actual)
    puts, removes, keys, values = decode_state_files(files, len(actual))
    # records: Spark's numRowsUpdated (puts) and numRowsRemoved (removes), batch b = version b+1
    assert puts[1:].tolist() == actual["state_rows_updated"].tolist()
    assert removes[1:].tolist() == actual["state_rows_removed"].tolist()

    # the sample's keys are Spark's bytes (most of them: a late row's group may never be kept)
    sample = cb.sample_records(spec, "c", sched)
    assert sample is not None
    sample_keys = {r[4:4 + struct.unpack(">i", r[:4])[0]] for r in sample.puts}
    assert len(sample_keys & keys) >= 0.95 * len(sample_keys)
    if query["kind"] == "deduplication":  # the value (one null field) too
        assert values == {cb.unsafe_row([("long", None)])}

    # the fixed files, as predicted
    fixed = sum(p.stat().st_size for p in state.rglob("*")
                if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".delta"))
    assert cb.fixed_bytes(spec, "c", sched) == fixed

    # checkpoint_bytes: the tolerance of docs/state-bytes.md (median 0.9–1.1, batches 25 %)
    pred = predict(sched, spec, "c", explain=False).batches
    ratio = (pred["checkpoint_bytes"].astype("float64")
             / actual["checkpoint_bytes"].astype("float64"))
    assert 0.9 <= ratio.median() <= 1.1, ratio.tolist()
    assert ((ratio - 1).abs() <= 0.25).all(), ratio.tolist()


def test_sample_fields_take_timestamps_beyond_the_nanosecond_range() -> None:
    """Event times of year 1 or 9999 (µs timestamps pandas cannot hold in ns) are encoded as
    their µs, not an overflow (found by tests/test_spec_fuzz.py on a full outer join)."""
    from semantics.checkpoint_bytes import _fields

    us = [-62135596800000000, 253402300799999999, -1]
    rows = pd.DataFrame({"ts": pd.Series(np.array(us, dtype="datetime64[us]"))
                         .dt.tz_localize("UTC")})
    assert [f[0][1] for f in _fields(rows, ["ts"], {})] == us
