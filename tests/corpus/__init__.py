"""A corpus of streaming scenarios transcribed from Spark's own test suites (issue 47).

Each scenario is the *query* of a Spark test written as a PySpark function over our sources
(each ``MemoryStream`` a source, each ``AddData`` one Delta commit, ``StopStream`` /
``StartStream`` a ``replay.restarts`` tick, ``timestamp_seconds(value)`` a timestamp column
written in the commit rows) -- never its expected answers: real Spark replays it and the
predictor must equal the replay batch by batch and row by row (``tests/corpus_run.py``).

One module per Spark suite holds ``CODE`` (the PySpark functions, written to ``job.py`` next
to the scenario's spec) and ``SCENARIOS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Rows = Sequence[Mapping[str, object]]

CATEGORIES = ("chain", "join_chain", "union", "window_join", "session", "restart",
              "allow_multiple_false", "single")


@dataclass(frozen=True)
class Scenario:
    """One corpus scenario.

    ``commits``: ``(source, rows)`` in arrival order, one Delta commit each (one tick each with
    ``batch_by: {commits: 1}``); ``times`` the timestamp column of each source (default
    ``ts``), its values seconds since the epoch. ``candidates``: the delays as written (``{}``)
    and one override. ``code`` is the suite module's ``CODE``; ``function`` a function in it.
    """

    name: str
    origin: str  # "<Suite>: <test name>" the query comes from
    category: str
    code: str
    function: str
    commits: Sequence[tuple[str, Rows]]
    candidates: Mapping[str, Mapping[str, object]]
    times: Mapping[str, str] = field(default_factory=dict)
    pace: str = "live"
    restarts: Sequence[int] = ()
    spark_conf: Mapping[str, object] = field(default_factory=dict)
    output_mode: str = "append"

    def __post_init__(self) -> None:
        assert self.category in CATEGORIES, self.category
        assert f"def {self.function}(" in self.code, self.function

    def time_of(self, source: str) -> str:
        return self.times.get(source, "ts")


def ints(*values: int, **extra: object) -> list[dict[str, object]]:
    """``MemoryStream[Int]`` rows: ``value`` and its ``timestamp_seconds(value)`` as ``ts``."""
    return [{"value": v, "ts": v, **extra} for v in values]


def keyed(*pairs: tuple[object, int], time: str = "ts", value: str = "value"
          ) -> list[dict[str, object]]:
    """``(key, seconds)`` rows: ``key``, ``value`` (= seconds) and the timestamp ``time``."""
    return [{"key": k, value: t, time: t} for k, t in pairs]


def override(column: str, delay: str, **more: object) -> dict[str, dict[str, object]]:
    """The two candidates of a scenario: the code as written and ``column``'s delay changed."""
    return {"as_written": {}, "override": {"watermark": {column: delay}, **more}}


def all_scenarios() -> list[Scenario]:
    from tests.corpus import (
        aggregation,
        dedup,
        multi_stateful,
        session,
        shapes,
        stream_join,
        watermark,
    )

    out: list[Scenario] = []
    for module in (multi_stateful, watermark, aggregation, dedup, session, stream_join,
                   shapes):
        out.extend(module.SCENARIOS)
    names = [s.name for s in out]
    assert len(names) == len(set(names)), "scenario names must be unique"
    return out
