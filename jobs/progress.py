"""Spark's streaming progress events, reduced to one record per executed batch.

Only progress of executed batches counts: an entry must have ``durationMs.addBatch`` (the idle
progress Spark may report before the first batch, or for a trigger that ran nothing, has not)
and its ``batchId`` must be committed in the checkpoint. Duplicates keep the last entry.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any


def progress_dicts(query: Any) -> list[dict[str, Any]]:
    """``query.recentProgress`` as plain JSON dicts (classic and Connect)."""
    out = []
    for p in query.recentProgress:
        raw = getattr(p, "json", None)
        out.append(json.loads(raw) if isinstance(raw, str) else dict(p))
    return out


def by_batch(progress: list[dict[str, Any]], committed: set[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for p in progress:
        b = int(p.get("batchId", -1))
        if b in committed and "addBatch" in (p.get("durationMs") or {}):
            out[b] = p
    return out


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
