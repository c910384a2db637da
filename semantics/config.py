"""One candidate's effective settings, resolved once: what the engine and the operators read,
instead of each reading ``spec.candidates[name]`` and ``spec.conf(name)`` and parsing the
Spark flags again (docs/semantics.md §8 lists the settings the predictor honours).

>>> from semantics.spec import parse_spec
>>> spec = parse_spec({"name": "t", "sources": {"e": {"table": "x", "event_time": "ts"}},
...     "query": {"source": "e", "kind": "deduplication", "keys": ["id"]},
...     "spark_conf": {"spark.sql.session.timeZone": "Europe/Paris"},
...     "candidates": {"c": {"watermark": {"e": "10 seconds"}, "policy": "max", "spark_conf": {
...         "spark.sql.streaming.noDataMicroBatches.enabled": " FALSE"}}}})
>>> r = resolve(spec, "c")
>>> dict(r.delays_ms), r.policy, r.no_data_batches, r.allow_multiple, r.time_zone
({'e': 10000}, 'max', False, True, 'Europe/Paris')
>>> resolved(spec, r) is r
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from semantics.profiles import SparkProfile, of_candidate
from semantics.spark_conf import ALLOW_MULTIPLE, NO_DATA_BATCHES, spark_bool
from semantics.spec import PARTITIONS, BacktestSpec

POLICY = "spark.sql.streaming.multipleWatermarkPolicy"
MERGE_LOCAL_CONF = "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
DEFAULT_PARTITIONS = 2  # the replay's spark.sql.shuffle.partitions (jobs/spark.py)


@dataclass(frozen=True)
class ResolvedCandidate:
    """A candidate's settings as Spark would run it. Invariants: ``delays_ms`` holds the
    watermarked sources of the query only, in the spec's source order, each delay ≥ 0; every
    boolean is Spark's reading of its setting (:func:`semantics.spark_conf.spark_bool`), so a
    value Spark refuses failed in :func:`resolve` with a ``SpecError`` naming the key."""

    name: str
    delays_ms: Mapping[str, int]  # per watermarked query source (docs/semantics.md §2.1)
    policy: str  # "min" or "max" (multipleWatermarkPolicy, else the candidate's ``policy``)
    allow_multiple: bool  # statefulOperator.allowMultiple (§2.3)
    no_data_batches: bool  # noDataMicroBatches.enabled (§2.2)
    merge_sessions_locally: bool  # sessionWindow.merge.sessions.in.local.partition (§4.3)
    state_store_provider: str  # "" for Spark's default (HDFS-backed) provider
    shuffle_partitions: int  # spark.sql.shuffle.partitions: state stores per operator
    time_zone: str  # spark.sql.session.timeZone of the spec (UTC by default)
    profile: SparkProfile  # the Spark release's rule switches (docs/semantics.md §12)
    conf: Mapping[str, str]  # every setting: spec-level, the candidate's overrides, the policy
    file: str  # the spec's path, for errors naming a setting


def resolve(spec: BacktestSpec, candidate: str) -> ResolvedCandidate:
    """``candidate``'s settings from ``spec`` (its overrides over the spec-level ones)."""
    cand = spec.candidates[candidate]
    conf = spec.conf(candidate)

    def flag(key: str, default: bool) -> bool:
        return spark_bool(conf.get(key, default), key, spec.path)

    return ResolvedCandidate(
        name=candidate,
        delays_ms=MappingProxyType({s: cand.watermark[s].ms for s in spec.query_sources
                                    if s in cand.watermark}),
        policy=str(conf.get(POLICY, cand.policy)),
        allow_multiple=flag(ALLOW_MULTIPLE, True),
        no_data_batches=flag(NO_DATA_BATCHES, True),
        merge_sessions_locally=flag(MERGE_LOCAL_CONF, False),
        state_store_provider=str(conf.get(PROVIDER, "")),
        shuffle_partitions=int(conf.get(PARTITIONS, DEFAULT_PARTITIONS)),
        time_zone=spec.session_time_zone,
        profile=of_candidate(spec, candidate),
        conf=MappingProxyType(dict(conf)),
        file=spec.path,
    )


def resolved(spec: BacktestSpec, candidate: str | ResolvedCandidate) -> ResolvedCandidate:
    """``candidate`` resolved (as given when it already is): for the entry points that take a
    candidate's name or its settings resolved once by the caller (``semantics.predict``)."""
    return candidate if isinstance(candidate, ResolvedCandidate) else resolve(spec, candidate)
