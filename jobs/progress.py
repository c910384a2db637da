"""Spark's streaming progress events, reduced to one record per executed batch.

Only progress of executed batches counts: an entry must have ``durationMs.addBatch`` (the idle
progress Spark may report before the first batch, or for a trigger that ran nothing, has not)
and its ``batchId`` must be committed in the checkpoint. Duplicates keep the last entry.

Every executed batch's progress is also saved as ``<progress dir>/<batch_id>.json`` (written
atomically, once per batch id), so a replay that resumes after a kill still has the
progress of the batches an earlier process ran (``jobs.resume``).
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def progress_texts(query: Any) -> list[str]:
    """``query.recentProgress`` as JSON texts (classic and Connect)."""
    out = []
    for p in query.recentProgress:
        raw = getattr(p, "json", None)
        out.append(raw if isinstance(raw, str) else json.dumps(dict(p)))
    return out


def progress_dicts(query: Any) -> list[dict[str, Any]]:
    """``query.recentProgress`` as plain JSON dicts (classic and Connect)."""
    return [json.loads(t) for t in progress_texts(query)]


def by_batch(progress: list[dict[str, Any]], committed: set[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for p in progress:
        b = int(p.get("batchId", -1))
        if b in committed and executed(p):
            out[b] = p
    return out


def executed(p: dict[str, Any]) -> bool:
    """Is ``p`` the progress of a batch that ran (not of a trigger that ran nothing)?"""
    return "addBatch" in (p.get("durationMs") or {}) and int(p.get("batchId", -1)) >= 0


def save(directory: Path, raw: str) -> int | None:
    """Save one progress event (its JSON text) as ``<batch_id>.json`` unless that batch's is
    saved already: the first one stays (a batch run again after a restart reports another
    ``memoryUsedBytes``: ``jobs.resume``). Atomic: a kill leaves the whole file or none.
    Returns the batch id, or None for a trigger that ran no batch (nothing saved)."""
    p = json.loads(raw)
    if not executed(p):
        return None
    b = int(p["batchId"])
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{b}.json.{uuid.uuid4().hex}.tmp"
    tmp.write_text(raw)
    try:
        os.link(tmp, directory / f"{b}.json")  # (fails if the batch's is there)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return b


def saved_batches(directory: Path) -> set[int]:
    if not directory.is_dir():
        return set()
    return {int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit()}


def load_saved(directory: Path) -> list[dict[str, Any]]:
    """The saved progress events, in batch order."""
    return [json.loads((directory / f"{b}.json").read_text())
            for b in sorted(saved_batches(directory))]


def drop_saved(directory: Path, first: int) -> None:
    """Forget the saved progress of batch ``first`` and later ones."""
    for b in saved_batches(directory):
        if b >= first:
            (directory / f"{b}.json").unlink(missing_ok=True)


def parse_time_ms(value: str | None) -> int | None:
    """``1970-01-01T00:00:12.500Z`` -> 12500 (UTC epoch milliseconds)."""
    if value is None:
        return None
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def watermark_ms(p: dict[str, Any]) -> int | None:
    """The watermark the batch ran with (``eventTime.watermark``), None without a watermark."""
    return parse_time_ms((p.get("eventTime") or {}).get("watermark"))


def input_rows(p: dict[str, Any]) -> int:
    """``numInputRows`` of the batch; summed over ``sources`` when the top-level field is absent
    (Spark Connect's progress JSON has only the per-source counts)."""
    n = p.get("numInputRows")
    if n is None:
        n = sum(int(s.get("numInputRows") or 0) for s in p.get("sources") or [])
    return int(n)
