"""Spark version profiles: the few rules in which Spark releases report different figures.

``spark_version`` (SPEC.md §1.4; top level or per candidate) selects a profile; without it the
profile of the pyspark the replay runs on (the project's pinned 4.0.5: ``4.0``). A profile is
a set of named rule switches read by the operators where releases differ; nothing else differs
between profiles (docs/semantics.md §4.4 "Spark version profiles" has the table: profile,
switches, Spark change, verifying test).

| profile | releases | differs from ``4.0`` in |
|---|---|---|
| ``3.5.0`` | 3.5.0 - 3.5.3 | which join input rows are added to state (before SPARK-49829) |
| ``3.5`` | 3.5.4 - 3.5.x | nothing the predictor models |
| ``4.0`` | 4.0.x, 4.1.x | (the reference: docs/semantics.md) |
| ``4.2`` | 4.2.x, 4.3.x | left-semi joins (SPARK-55973) |

Invariants: every profile is one frozen :class:`SparkProfile`; a version string maps to exactly
one profile or is refused (:func:`profile_for` raises ``ValueError`` naming what is accepted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from semantics.spec import BacktestSpec, Candidate


@dataclass(frozen=True)
class SparkProfile:
    """The rule switches of one profile (``False`` everywhere = Spark 4.0's rules)."""

    name: str
    #: Spark 3.5.0-3.5.3 (before SPARK-49829, fixed in 3.5.4 and 4.0.0): an input row of
    #: *either* side whose state predicate is already true (it would be evicted in this very
    #: batch) is not added to the join state - left rows too, and right rows of right/full
    #: outer joins too, so such an unmatched outer row never emits its null-padded row.
    #: From 3.5.4 left rows are always stored and right rows of right/full outer joins
    #: that did not match are stored. Locked by tests/test_profiles_spark.py (pyspark 3.5.3).
    join_skips_evictable_inputs: bool = False
    #: Spark 4.2+ (SPARK-55973, apache/spark PR 54769, whose description names both parts:
    #: left semi joins take the right input before the left one, and drop a stored left row
    #: as soon as a new right row matches it, not at the watermark): new right rows meet the
    #: left state of earlier batches first, each left row they match is removed at once; then
    #: the new left rows meet the whole right state; a left row emitted on arrival is never
    #: stored. Locked by tests/test_profiles_spark.py (pyspark 4.3.0: random scenarios and
    #: Spark's own StreamingJoinSuite left semi scenarios, test_spark_suite_scenarios).
    left_semi_right_first: bool = False
    #: Spark 4.2+ (observed on pyspark 4.3.0 against 4.0.5 and 4.1.4; no release note names
    #: it: SPARK-55144, 4.2's join state rework, changed how this metric is summed, unverified
    #: in source): ``numRowsRemoved`` counts every row evicted from the join state, the outer
    #: sides' rows removed while emitting their null rows too (4.0 counts only the final
    #: cleanup pass: left outer the right side, right outer the left side, full outer
    #: nothing). Locked by tests/test_profiles_spark.py (pyspark 4.3.0: random full outer
    #: scenarios and Spark's own range-condition scenario in every outer join type).
    join_counts_every_removal: bool = False
    #: Spark 3.5: the checkpoint layout ``semantics.checkpoint_bytes`` models is Spark 4's
    #: (checked on 4.0.5 by tests/test_checkpoint_bytes.py); a 3.5.9 replay's first batch
    #: differed by more than its tolerance (docs/replay.md's 3.5 command), so not predicted.
    checkpoint_layout_unmodelled: bool = False

    @property
    def reference_rules(self) -> bool:
        """No switch on: Spark 4.0's rules (docs/semantics.md as written)."""
        return not (self.join_skips_evictable_inputs or self.left_semi_right_first
                    or self.join_counts_every_removal)


PROFILES: dict[str, SparkProfile] = {
    "3.5.0": SparkProfile("3.5.0", join_skips_evictable_inputs=True,
                          checkpoint_layout_unmodelled=True),
    "3.5": SparkProfile("3.5", checkpoint_layout_unmodelled=True),
    "4.0": SparkProfile("4.0"),
    "4.2": SparkProfile("4.2", left_semi_right_first=True, join_counts_every_removal=True),
}
DEFAULT = "4.0"  # the project's pinned pyspark 4.0.5
ACCEPTED = ("a Spark release the predictor has a profile for: 3.5.x, 4.0.x, 4.1.x, 4.2.x or "
            "4.3.x, a line (3.5, 4.0, 4.1, 4.2, 4.3) or a profile name (3.5.0)")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def profile_name(version: str) -> str:
    """The profile of a Spark version (``"3.5.3"`` -> ``"3.5.0"``, ``"4.1"`` -> ``"4.0"``).

    A line without a patch number means its newest releases (``"3.5"`` -> ``"3.5"``). Vendor
    suffixes (``3.5.1-amzn-0``, ``4.0.0.dev1``) are read up to the patch number.

    >>> [profile_name(v) for v in ("3.5.0", "3.5.3", "3.5.4", "3.5", "4.0.5", "4.1", "4.3.0")]
    ['3.5.0', '3.5.0', '3.5', '3.5', '4.0', '4.0', '4.2']
    """
    m = _VERSION.match(str(version).strip())
    if m is None:
        m2 = re.match(r"^(\d+)\.(\d+)\.(\d+)[.+-]", str(version).strip())
        if m2 is None:
            raise ValueError(ACCEPTED + f", got {version!r}")
        m = m2
    major, minor = int(m.group(1)), int(m.group(2))
    patch = None if m.group(3) is None else int(m.group(3))
    if (major, minor) == (3, 5):
        return "3.5.0" if patch is not None and patch <= 3 else "3.5"
    if (major, minor) in ((4, 0), (4, 1)):
        return "4.0"
    if (major, minor) in ((4, 2), (4, 3)):
        return "4.2"
    raise ValueError(ACCEPTED + f", got {version!r}")


def profile_for(version: str | None) -> SparkProfile:
    """The profile of ``version`` (a release, a line or a profile name); None: the default."""
    if version is None:
        return PROFILES[DEFAULT]
    if version in PROFILES:
        return PROFILES[version]
    return PROFILES[profile_name(version)]


def of_candidate(spec: BacktestSpec, candidate: str | Candidate) -> SparkProfile:
    """The profile ``candidate`` of ``spec`` is predicted with: its ``spark_version``, else the
    spec's, else the installed pyspark's (:func:`installed_profile`)."""
    cand = spec.candidates[candidate] if isinstance(candidate, str) else candidate
    return profile_for(cand.spark_version or spec.spark_version or installed_profile())


@cache  # (a package metadata lookup, which every resolve of a candidate would repeat)
def installed_profile() -> str:
    """The profile of the pyspark installed in this environment (read from its package
    metadata, pyspark is not imported), or the default without one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return profile_name(version("pyspark"))
    except (PackageNotFoundError, ValueError):
        return DEFAULT
