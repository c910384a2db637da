"""The pipeline form of ``query`` (SPEC.md §1.2, docs/SPEC.md "Pipelines"): frozen models.

>>> q = PipelineQuery.model_validate({"pipeline": [{"deduplicate": {"keys": ["id", "ts"]}},
...     {"aggregate": {"window": {"duration": "1 minute"}, "aggregates": {"n": "count(*)"}}}]})
>>> [s.kind for s in q.stages], q.sources
(['deduplicate', 'aggregate'], ())

Invariants: every stage is a one-key mapping naming its kind; ``source`` or ``union`` may only
be the first stage; a pipeline holds at least one stateful stage (deduplicate or aggregate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    model_validator,
)

from semantics.errors import SpecError
from semantics.spec import (
    Aggregates,
    DurationField,
    Identifier,
    JoinQuery,
    JoinWindow,
    TimeRange,
    WindowSpec,
)

if TYPE_CHECKING:
    from semantics.spec import BacktestSpec


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class SourceStage(_Model):
    """``{source: clicks}``: the pipeline reads one source."""

    source: Identifier

    kind = property(lambda self: "source")


class UnionStage(_Model):
    """``{union: [a, b]}``: the sources unioned by column name, each with its own
    ``withWatermark`` (docs/semantics.md §13)."""

    union: tuple[Identifier, ...] = Field(min_length=2)

    kind = property(lambda self: "union")


class JoinArgs(_Model):
    """The fields of ``kind: join`` (SPEC.md §1): a stream-stream join of two sources."""

    type: Literal["inner", "left_outer", "right_outer", "full_outer", "left_semi"] = "inner"
    left: Identifier
    right: Identifier
    keys: tuple[Identifier, ...] = Field(min_length=1)
    time_range: TimeRange | None = None
    window: JoinWindow | None = None
    # Spark SQL over the joined columns, AND-ed to the ON condition (JoinQuery.extra, §4.4)
    extra: str | None = None
    _time_key: str | None = PrivateAttr(default=None)  # (JoinQuery._time_key)

    @property
    def query(self) -> JoinQuery:
        """The same join as a ``kind: join`` query (its rules and its PySpark)."""
        q = JoinQuery(kind="join", **self.model_dump())
        q._time_key = self._time_key
        return q


class JoinStage(_Model):
    """``{join: {type, left, right, keys, time_range}}``: first stage only; its output columns
    are ``<left>_<col>``..., ``<right>_<col>``... as for ``kind: join``."""

    join: JoinArgs

    kind = property(lambda self: "join")


class FilterStage(_Model):
    """``{filter: "country = 'NL'"}``: a Spark SQL predicate (``semantics.predicate``)."""

    filter: str

    kind = property(lambda self: "filter")


class SelectStage(_Model):
    """``{select: {new: value}}``: the columns output, in order; a value is a Spark SQL value
    expression (``semantics.expressions``), a plain column name being a rename.

    >>> SelectStage(select={"ad": "ad_id", "bucket": "ad_id % 4"}).column("bucket") is None
    True
    """

    select: dict[Identifier, Annotated[str, Field(min_length=1)]] = Field(min_length=1)

    kind = property(lambda self: "select")

    def column(self, new: str) -> str | None:
        """The input column ``new`` renames, or None: ``new`` is computed."""
        return plain_column(self.select[new])


def plain_column(text: str) -> str | None:
    """The column ``text`` names when it is nothing but a column reference (else None; text
    that does not parse is not one either: the evaluator says what is wrong with it)."""
    from semantics.expression_syntax import Col, ExpressionError, parse

    try:
        node = parse(text)
    except ExpressionError:
        return None
    return node.name if isinstance(node, Col) else None


class DedupArgs(_Model):
    keys: tuple[Identifier, ...] = Field(min_length=1)
    within_watermark: bool = False


class DeduplicateStage(_Model):
    """``{deduplicate: {keys: [...], within_watermark: false}}``."""

    deduplicate: DedupArgs

    kind = property(lambda self: "deduplicate")


class PipelineWindow(WindowSpec):
    """A window of an aggregate stage; ``time`` names its time column (default: the current
    event-time column: the source's ``event_time``, or ``window_time`` after a windowed
    aggregation)."""

    time: Identifier | None = None


class SessionArgs(_Model):
    """A session window (``session_window(time, gap)``, docs/semantics.md §13.5): a static
    ``gap`` (a positive duration without months) or a ``gap_expression``, a Spark SQL value
    expression evaluated per row to an interval string (a row whose gap is NULL or not
    positive is dropped, as Spark's ``SessionWindowing`` filter does); ``time`` as for a
    window (default: the current event-time column)."""

    gap: DurationField | None = None
    gap_expression: Annotated[str, Field(min_length=1)] | None = None
    time: Identifier | None = None

    @model_validator(mode="after")
    def _check(self) -> SessionArgs:
        if (self.gap is None) == (self.gap_expression is None):
            raise ValueError("a session needs exactly one of gap (a duration) or "
                             "gap_expression (a Spark SQL expression per row)")
        if self.gap is not None and (self.gap.us <= 0 or self.gap.has_months):
            raise ValueError("gap must be a positive duration without months")
        return self


class AggregateArgs(_Model):
    window: PipelineWindow | None = None
    session: SessionArgs | None = None
    keys: tuple[Identifier, ...] = ()
    aggregates: Aggregates = Field(default_factory=lambda: {"count": "count(*)"})

    @model_validator(mode="after")
    def _check(self) -> AggregateArgs:
        if self.session is not None and self.window is not None:
            raise ValueError("an aggregate has a window or a session, not both")
        if self.session is not None and not self.keys:
            raise ValueError("a session window needs at least one key (Spark rejects a global "
                             "session aggregation in a streaming query)")
        return self


class AggregateStage(_Model):
    """``{aggregate: {window: {...}, keys: [...], aggregates: {...}}}``."""

    aggregate: AggregateArgs

    kind = property(lambda self: "aggregate")


Stage = SourceStage | UnionStage | FilterStage | SelectStage | DeduplicateStage | AggregateStage
STAGES: dict[str, type[_Model]] = {
    "source": SourceStage, "union": UnionStage, "join": JoinStage, "filter": FilterStage,
    "select": SelectStage, "deduplicate": DeduplicateStage, "aggregate": AggregateStage}
STATEFUL = ("deduplicate", "aggregate")
FIRST = ("source", "union", "join")  # (first stage only)


def _tag(value: object) -> str | None:
    """A stage's kind: its one key (None: no stage; the check below says what is wrong)."""
    if isinstance(value, BaseModel):
        return value.kind  # type: ignore[attr-defined]
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in STAGES:
        return str(next(iter(value)))
    return None


def _check_shape(value: object) -> object:
    if _tag(value) is None:
        got = list(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"a stage is a mapping of exactly one of {', '.join(STAGES)}, "
                         f"got {got}")
    return value


AnyStage = Annotated[
    Annotated[SourceStage, Tag("source")] | Annotated[UnionStage, Tag("union")]
    | Annotated[JoinStage, Tag("join")]
    | Annotated[FilterStage, Tag("filter")] | Annotated[SelectStage, Tag("select")]
    | Annotated[DeduplicateStage, Tag("deduplicate")]
    | Annotated[AggregateStage, Tag("aggregate")],
    Discriminator(_tag), BeforeValidator(_check_shape)]


class PipelineQuery(_Model):
    """``query: {output_mode: append, pipeline: [stages]}``. ``complete`` only for one
    stateful stage, a session window (docs/semantics.md §13.5: a dynamic gap, which
    ``kind: session`` does not take); Spark runs several operators in append mode only."""

    kind: Literal["pipeline"] = "pipeline"
    output_mode: Literal["append", "complete"] = "append"
    pipeline: tuple[AnyStage, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> PipelineQuery:
        for i, s in enumerate(self.pipeline):
            if i and s.kind in FIRST:
                raise ValueError(f"pipeline[{i}]: {s.kind} may only be the first stage")
        if not any(s.kind in STATEFUL for s in self.pipeline):
            raise ValueError("a pipeline needs at least one deduplicate or aggregate stage "
                             "(a join alone is kind: join)")
        if self.output_mode == "complete" and not (
                self.join is None and len(self.stateful) == 1
                and isinstance(self.stateful[0], AggregateStage)
                and self.stateful[0].aggregate.session is not None):
            raise ValueError("output_mode complete is modelled for one session window stage "
                             "only (several stateful operators: append, as Spark)")
        return self

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages after the first ``source``/``union`` one."""
        first = self.pipeline[0].kind in FIRST
        return self.pipeline[1:] if first else self.pipeline

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources named by the first stage (empty: the spec's only source)."""
        s = self.pipeline[0]
        if isinstance(s, SourceStage):
            return (s.source,)
        if isinstance(s, JoinStage):
            return (s.join.left, s.join.right)
        return s.union if isinstance(s, UnionStage) else ()

    @property
    def keys(self) -> tuple[str, ...]:
        """(No query-level keys: each stateful stage has its own.)"""
        return ()

    @property
    def join(self) -> JoinArgs | None:
        """The first stage's join, if it is one."""
        s = self.pipeline[0]
        return s.join if isinstance(s, JoinStage) else None

    @property
    def stateful(self) -> tuple[DeduplicateStage | AggregateStage, ...]:
        return tuple(s for s in self.stages  # type: ignore[misc]
                     if isinstance(s, DeduplicateStage | AggregateStage))


def check_pipeline(spec: BacktestSpec) -> None:
    """Cross-field rules of a pipeline query (the columns are checked where the tables are
    read: ``semantics.pipeline.columns.flow``)."""
    q = spec.query
    if not isinstance(q, PipelineQuery):
        return
    if not q.sources and len(spec.sources) != 1:
        raise SpecError(spec.path, "query.pipeline[0]", "a first stage {source: name} or "
                        "{union: [names]}: the spec defines several sources "
                        f"({', '.join(spec.sources)})")
    if q.join is not None and q.join.window is not None:
        raise SpecError(spec.path, "query.pipeline[0].join.window", "kind: join for a join on "
                        "a window key (after it in a pipeline, the window struct is the only "
                        "event-time column: stages over it are not modelled yet)")
    for cname, cand in spec.candidates.items():
        _check_switch(spec, q, cname)
        if q.join is not None:
            from semantics.profiles import of_candidate

            if not of_candidate(spec, cname).reference_rules:
                raise SpecError(spec.path, f"candidates.{cname}.spark_version", "a Spark "
                                "release with the reference join rules (4.0, 4.1) for a "
                                "pipeline with a join (other profiles: kind: join only)")
        if any(isinstance(s, AggregateStage) for s in q.stages) and not any(
                s in cand.watermark for s in spec.query_sources):
            raise SpecError(spec.path, f"candidates.{cname}.watermark", "a watermark on a "
                            "source of the pipeline: Spark rejects append output mode for an "
                            "aggregation without one")


def _check_switch(spec: BacktestSpec, q: PipelineQuery, candidate: str) -> None:
    """What the pipeline predictor does not model about a candidate's ``after_restart``
    (restarts themselves are modelled, docs/semantics.md §13.8): a switched delay under a
    within-watermark dedup (its entries keep the expiry of the delay they were stored with),
    and ``allowMultiple`` switched after a join (the no-data rule of the operators after it
    reads the propagator of the run before the restart)."""
    cand = spec.candidates[candidate]
    after = cand.after_restart
    if after is None:
        return
    where = f"candidates.{candidate}.after_restart"
    # (delays by value: a within-watermark dedup needs one delay on every source, and a
    # PySpark candidate's are keyed by column here, by source after lowering)
    switched = {d.us for d in after.watermark.values()} != {d.us for d in
                                                             cand.watermark.values()}
    if switched and any(isinstance(s, DeduplicateStage) and s.deduplicate.within_watermark
                        for s in q.stages):
        raise SpecError(spec.path, f"{where}.watermark", "the same delays for a pipeline with "
                        "a within-watermark deduplication (entries stored before the switch "
                        "keep the old delay's expiry: not modelled)")
    from semantics.spark_conf import ALLOW_MULTIPLE, spark_bool

    key = ALLOW_MULTIPLE
    if q.join is not None and key in after.spark_conf and spark_bool(
            after.spark_conf[key], key, spec.path) != spark_bool(
            spec.conf(candidate).get(key, True), key, spec.path):
        raise SpecError(spec.path, f"{where}.spark_conf.{key}", "the candidate's own value "
                        "for a pipeline with a join (a switch of the watermark propagator "
                        "after a join is not modelled)")


def refuse_for_pipelines(spec: BacktestSpec, feature: str) -> None:
    """A command option not built for pipelines yet: a SpecError naming it (exit code 2)."""
    if isinstance(spec.query, PipelineQuery):
        raise SpecError(spec.path, "query.pipeline", f"a single-operator query for {feature} "
                        "(not built for pipelines yet)")
