"""The backtest spec (SPEC.md §1) as immutable, validated models, and its loader.

>>> spec = load_spec("backtests/clicks_per_ad.yaml")        # doctest: +SKIP
>>> spec.candidates["tight"].watermark["clicks"].ms          # doctest: +SKIP
120000

Every error is a :class:`SpecError` naming the file, the field path and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from semantics.durations import DAY_US, Duration
from semantics.errors import SpecError
from semantics.pyspark_spec import PySparkOrigin, PySparkQuery, check_pyspark_query
from semantics.spark_conf import spark_bool

DurationField = Annotated[
    Duration,
    BeforeValidator(Duration.parse),
    PlainSerializer(lambda d: str(d), return_type=str),
]
Name = Annotated[str, Field(pattern=r"^[a-z0-9_-]+$")]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

AGGREGATE_RE = re.compile(
    r"^\s*(count|sum|min|max|avg|mean)\s*\(\s*(\*|\d+|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$",
    re.IGNORECASE)

SESSION_TZ = "spark.sql.session.timeZone"
CASE_SENSITIVE = "spark.sql.caseSensitive"
# Spark settings the predictor models (value checked where it matters); any other key that starts
# with one of SEMANTIC_PREFIXES changes semantics we do not model and is rejected.
MODELED_CONF = {
    "spark.sql.streaming.statefulOperator.allowMultiple",
    "spark.sql.streaming.noDataMicroBatches.enabled",
    "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition",
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
    "spark.sql.streaming.statefulOperator.checkCorrectness.enabled",
    SESSION_TZ,
}
SEMANTIC_PREFIXES = ("spark.sql.streaming.", "spark.sql.session.")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
# The longest window duration, slide, start_time, session gap or join bound: an event time of
# Spark's years 1-9999 (|t| < 2**58 µs) plus three of them stays within 64-bit microseconds
# (Spark's window and join arithmetic; ANSI mode fails on overflow)
MAX_SPAN_US = 2**61


def _check_spans(**spans: Duration | None) -> None:
    """Each of ``spans`` (field name: duration) at most ``MAX_SPAN_US`` long either way."""
    for name, d in spans.items():
        if d is not None and abs(d.us) > MAX_SPAN_US:
            raise ValueError(f"{name} must be at most {MAX_SPAN_US // DAY_US:,} days either way "
                             f"(longer spans can overflow Spark's 64-bit microsecond event times), "
                             f"got {d}")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class SourceSpec(_Model):
    table: str
    # required but for a ``pyspark`` query, whose code names its event times (SPEC.md §1.1)
    event_time: Identifier | None = None
    versions: tuple[int, int] | None = None
    arrival: str = "commit"
    filter: str | None = None
    # Delta's readStream option skipChangeCommits: commits that remove or rewrite rows (DELETE,
    # UPDATE, MERGE, overwrite) are skipped whole; without it such a commit is an error, as a
    # Delta streaming source stops on it
    skip_change_commits: bool = False
    # non-secret options of an s3:// table's object store (semantics/storage.py)
    storage_options: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("table")
    @classmethod
    def _local(cls, table: str) -> str:
        from semantics import storage

        scheme = storage.scheme(table)
        if scheme not in (None, "file", *storage.REMOTE_SCHEMES):
            raise ValueError(f"a local path, file:// URI or s3:// URI ({scheme}:// tables are "
                             "not read: mount or copy the table)")
        return table

    @field_validator("storage_options")
    @classmethod
    def _storage(cls, options: dict[str, str | int | float | bool]) -> dict[str, str]:
        from semantics.storage import check_storage_options

        return check_storage_options(options)

    @model_validator(mode="after")
    def _check(self) -> SourceSpec:
        from semantics.storage import is_remote

        if self.storage_options and not is_remote(self.table):
            raise ValueError("storage_options apply to s3:// tables only")
        if self.versions is not None:
            lo, hi = self.versions
            if lo < 0 or hi < lo:
                raise ValueError("versions must be [first, last] with 0 <= first <= last")
        if self.arrival != "commit" and not re.fullmatch(
            r"column:[A-Za-z_][A-Za-z0-9_]*", self.arrival
        ):
            raise ValueError("arrival must be 'commit' or 'column:<ingest timestamp column>'")
        return self

    @property
    def arrival_column(self) -> str | None:
        return self.arrival.split(":", 1)[1] if self.arrival.startswith("column:") else None


class WindowSpec(_Model):
    """``window(event_time, duration, slide, start_time)``: windows start at ``start_time``
    plus whole slides from the epoch (``start_time`` shifts them, e.g. ``-1 hour`` for days
    that start at 23:00 UTC), as Spark's ``TimeWindowing`` assigns them."""

    duration: DurationField
    slide: DurationField | None = None
    start_time: DurationField | None = None

    @model_validator(mode="after")
    def _check(self) -> WindowSpec:
        _check_spans(**{"window.duration": self.duration, "window.slide": self.slide,
                        "window.start_time": self.start_time})
        if self.duration.us <= 0:
            raise ValueError("window.duration must be positive")
        if any(d is not None and d.has_months for d in (self.duration, self.slide,
                                                          self.start_time)):
            raise ValueError("window durations cannot use months or years (Spark rejects them)")
        if self.slide is not None and not 0 < self.slide.us <= self.duration.us:
            raise ValueError("window.slide must be positive and at most the duration")
        if self.start_time is not None and not abs(self.start_time.us) < self.slide_us:
            raise ValueError("window.start_time must be shorter than the slide (Spark: "
                             "abs(start_time) < slide_duration), e.g. '-1 hour' for daily "
                             "windows that start at 23:00 UTC")
        return self

    @property
    def slide_us(self) -> int:
        return (self.slide or self.duration).us

    @property
    def start_us(self) -> int:
        """The windows' offset from the epoch in µs (0 without ``start_time``)."""
        return 0 if self.start_time is None else self.start_time.us


def _check_aggregates(aggs: dict[str, str]) -> dict[str, str]:
    for name, expr in aggs.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"aggregate name {name!r} must be an identifier")
        m = AGGREGATE_RE.match(expr)
        if not m:
            raise ValueError(
                f"aggregate {name!r}: expected count(*), count(col), sum(col), min(col), "
                f"max(col) or avg(col), got {expr!r}"
            )
        if (m.group(2) == "*" or m.group(2).isdigit()) and m.group(1).lower() != "count":
            raise ValueError(f"aggregate {name!r}: only count accepts * or a number")
    return aggs


Aggregates = Annotated[dict[Identifier, str], AfterValidator(_check_aggregates)]


def _non_negative(wm: dict[str, Duration]) -> dict[str, Duration]:
    for src, d in wm.items():
        if d.us < 0:
            raise ValueError(f"watermark delay for {src!r} must not be negative ({d})")
    return wm


def parse_aggregate(expr: str) -> tuple[str, str | None]:
    """``"sum(price)"`` -> ``("sum", "price")``; ``"count(*)"`` -> ``("count", None)``, and so
    is ``count(1)`` (a literal is never NULL: Spark counts every row); ``mean`` is Spark's other
    name for ``avg``.

    >>> parse_aggregate("COUNT(1)"), parse_aggregate("mean(v)")
    (('count', None), ('avg', 'v'))
    """
    m = AGGREGATE_RE.match(expr)
    assert m, expr
    func, col = m.group(1).lower(), m.group(2)
    return "avg" if func == "mean" else func, None if col == "*" or col.isdigit() else col


class _Grouped(_Model):
    """A query whose output carries its group keys, spelt as the spec writes them (Spark's
    ``groupBy("AD_ID")`` outputs ``AD_ID``), while ``keys`` may be respelt as the table spells
    them (``semantics.column_names.resolved``)."""

    _written_keys: tuple[str, ...] | None = PrivateAttr(default=None)

    @property
    def output_keys(self) -> tuple[str, ...]:
        """The group keys' output column names."""
        keys: tuple[str, ...] = self.keys  # type: ignore[attr-defined]  # (both subclasses')
        return self._written_keys if self._written_keys is not None else keys


class AggregationQuery(_Grouped):
    kind: Literal["aggregation"]
    source: str
    keys: tuple[Identifier, ...] = ()
    window: WindowSpec | None = None
    aggregates: Aggregates = Field(default_factory=lambda: {"count": "count(*)"})
    output_mode: Literal["append", "update", "complete"] = "append"


class DeduplicationQuery(_Model):
    kind: Literal["deduplication"]
    source: str
    keys: tuple[Identifier, ...]
    within_watermark: bool = False


class SessionQuery(_Grouped):
    kind: Literal["session"]
    source: str
    keys: tuple[Identifier, ...]
    gap: DurationField
    aggregates: Aggregates = Field(default_factory=lambda: {"count": "count(*)"})
    output_mode: Literal["append", "update", "complete"] = "append"

    @model_validator(mode="after")
    def _check(self) -> SessionQuery:
        _check_spans(gap=self.gap)
        if self.gap.us <= 0 or self.gap.has_months:
            raise ValueError("gap must be a positive duration without months")
        if not self.keys:
            raise ValueError("a session window needs at least one key (Spark rejects it)")
        if self.output_mode == "update":
            raise ValueError("output_mode update is not supported for session windows (Spark "
                             "rejects it); use append or complete")
        return self


class TimeRange(_Model):
    lower: DurationField | None = None
    upper: DurationField | None = None
    lower_inclusive: bool = True
    upper_inclusive: bool = True

    @model_validator(mode="after")
    def _check(self) -> TimeRange:
        _check_spans(**{"time_range.lower": self.lower, "time_range.upper": self.upper})
        for b in (self.lower, self.upper):
            if b is not None and b.has_months:
                raise ValueError("join bounds cannot use months or years (no state watermark)")
        if self.lower is None and self.upper is None:
            raise ValueError("time_range needs lower, upper or both")
        if self.lower is not None and self.upper is not None and self.lower.us > self.upper.us:
            raise ValueError("time_range.lower must not exceed time_range.upper")
        return self


class JoinWindow(_Model):
    """``window: {duration: 10 seconds}`` of a join: both sides get ``window(event_time,
    duration)`` (tumbling) in place of their event-time column and join on keys + window
    (docs/semantics.md §4.4 "Window key")."""

    duration: DurationField

    def side_columns(self, data_columns: Sequence[str], event_time: str) -> tuple[str, ...]:
        """A side's data columns under the window: its event-time column gives way to
        ``window_start``, ``window_end`` (last).

        >>> JoinWindow(duration="10 seconds").side_columns(["k", "ts", "v"], "ts")
        ('k', 'v', 'window_start', 'window_end')
        """
        return (*(c for c in data_columns if c != event_time), "window_start", "window_end")

    @model_validator(mode="after")
    def _check(self) -> JoinWindow:
        _check_spans(**{"window.duration": self.duration})
        if self.duration.us <= 0 or self.duration.has_months:
            raise ValueError("window.duration must be positive, without months or years")
        return self


class JoinQuery(_Model):
    kind: Literal["join"]
    type: Literal["inner", "left_outer", "right_outer", "full_outer", "left_semi"] = "inner"
    left: str
    right: str
    keys: tuple[Identifier, ...]
    time_range: TimeRange | None = None
    window: JoinWindow | None = None
    # Spark SQL over the joined columns <source>_<column>, AND-ed to the ON condition
    # (semantics.operators.join_extra)
    extra: str | None = None
    # an equi key holding a watermarked event-time column under another name (a PySpark
    # join's hidden key of ``ts = rts``): Spark's key-based state watermark (§4.4 "Time key")
    _time_key: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> JoinQuery:
        if self.left == self.right:
            raise ValueError("left and right must be different sources")
        if not self.keys:
            raise ValueError("a join needs at least one equi-join key")
        if self.window is not None and self.time_range is not None:
            raise ValueError("time_range with window: the window replaces each side's event-"
                             "time column (Spark allows one event-time column per side), so "
                             "no time range can be written on it; give one of the two")
        return self


from semantics.pipeline.spec import (  # noqa: E402 (it uses the above)
    STAGES,
    PipelineQuery,
    check_pipeline,
)


def _query_tag(data: Any) -> str | None:
    """The query model's tag: ``pyspark`` for the job's own code, ``pipeline`` for stages
    (both written without ``kind``), else its ``kind``."""
    if isinstance(data, dict):
        for tag in ("pyspark", "pipeline"):
            if tag in data and "kind" not in data:
                return tag
        return data.get("kind")
    return getattr(data, "kind", None)


Query = Annotated[
    Annotated[AggregationQuery, Tag("aggregation")] | Annotated[DeduplicationQuery,
                                                                Tag("deduplication")]
    | Annotated[SessionQuery, Tag("session")] | Annotated[JoinQuery, Tag("join")]
    | Annotated[PipelineQuery, Tag("pipeline")] | Annotated[PySparkQuery, Tag("pyspark")],
    Discriminator(_query_tag),
]
# the query models by their ``kind`` (pydantic's discriminator tag in error locations)
QUERY_KINDS: dict[str, type[BaseModel]] = {
    "aggregation": AggregationQuery, "deduplication": DeduplicationQuery,
    "session": SessionQuery, "join": JoinQuery, "pipeline": PipelineQuery,
    "pyspark": PySparkQuery}


_BYTE_UNITS = {"": 0, "b": 0, "k": 1, "kb": 1, "m": 2, "mb": 2, "g": 3, "gb": 3, "t": 4,
               "tb": 4, "p": 5, "pb": 5}


def parse_bytes(value: object) -> int:
    """A size as Spark reads ``maxBytesPerTrigger`` (``JavaUtils.byteStringAsBytes``): a whole
    number with an optional binary unit, ``b``, ``k``/``kb``, ``m``/``mb``, ``g``/``gb``,
    ``t``/``tb``, ``p``/``pb`` (any case).

    >>> parse_bytes("512m"), parse_bytes("1g"), parse_bytes(1000)
    (536870912, 1073741824, 1000)
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as '512m' or '1g', got {value!r}")
    if isinstance(value, int):
        n, unit = value, ""
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
        if m is None or m.group(2).lower() not in _BYTE_UNITS:
            raise ValueError(f"expected a size such as '512m' or '1g' (units b, k, m, g, t, p), "
                             f"got {value!r}")
        n, unit = int(m.group(1)), m.group(2).lower()
    if n <= 0:
        raise ValueError(f"a positive size, got {value!r}")
    return n * 1024 ** _BYTE_UNITS[unit]


class BatchBy(_Model):
    """The rate limit that cuts the arrival sequence into micro-batches: ``commits`` (n Delta
    commits), ``files`` and/or ``bytes`` (a Delta source's ``maxFilesPerTrigger`` and
    ``maxBytesPerTrigger``: data files admitted while both have room, so a batch may end
    inside a commit; a Delta source without either reads ``files: 1000``), ``rows`` (n rows)
    or ``arrival_interval`` (what arrived in each interval)."""

    # (bounds: Delta reads maxFilesPerTrigger as an Int, maxBytesPerTrigger as a Long; the
    # schedule counts commits and rows in int64)
    commits: int | None = Field(default=None, gt=0, le=INT64_MAX)
    files: int | None = Field(default=None, gt=0, le=INT32_MAX)
    bytes: Annotated[int, BeforeValidator(parse_bytes), Field(le=INT64_MAX)] | None = None
    rows: int | None = Field(default=None, gt=0, le=INT64_MAX)
    arrival_interval: DurationField | None = None

    @property
    def by_files(self) -> bool:
        """Whether batches are data files admitted by ``files`` and/or ``bytes``."""
        return self.files is not None or self.bytes is not None

    @property
    def units(self) -> list[str]:
        """The limits given (``bytes`` counts only without ``files``: they go together); a
        valid spec has exactly one."""
        given = [k for k in ("commits", "files", "rows", "arrival_interval")
                 if getattr(self, k) is not None]
        return given + ["bytes"] if self.bytes is not None and self.files is None else given

    @model_validator(mode="after")
    def _check(self) -> BatchBy:
        if len(self.units) != 1:
            raise ValueError("exactly one of commits, files (and/or bytes), rows, "
                             "arrival_interval is required")
        if self.arrival_interval is not None and self.arrival_interval.ms <= 0:
            raise ValueError("arrival_interval must be at least 1 millisecond (arrival times "
                             f"are commit timestamps in milliseconds), got "
                             f"{self.arrival_interval}")
        return self


class ReplaySpec(_Model):
    batch_by: BatchBy = BatchBy(commits=1)
    pace: Literal["backlog", "live"] = "backlog"
    # ticks after which the query stops and restarts from its checkpoint (SPEC.md §1.3,
    # docs/semantics.md §2.7; checked against the schedule by ``restarts.check_schedule``)
    restarts: tuple[int, ...] = ()

    @field_validator("restarts")
    @classmethod
    def _restarts(cls, ticks: tuple[int, ...]) -> tuple[int, ...]:
        if any(t < 0 for t in ticks):
            raise ValueError(f"restart ticks must be tick numbers >= 0, got {list(ticks)}")
        if any(b <= a for a, b in zip(ticks[:-1], ticks[1:], strict=True)):
            raise ValueError(f"restart ticks must be distinct and in increasing order, got "
                             f"{list(ticks)}")
        return ticks


class Candidate(_Model):
    watermark: Annotated[dict[str, DurationField], AfterValidator(_non_negative)] = Field(
        default_factory=dict)
    policy: Literal["min", "max"] = "min"
    spark_conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    batch_by: BatchBy | None = None
    spark_version: str | None = None  # §1.4; overrides the spec's

    _version_text = field_validator("spark_version", mode="before")(
        lambda v: _version_text(v))
    # the candidate's configuration from the first restart on (SPEC.md §1.3; the rules:
    # semantics/restarts.py)
    after_restart: Candidate | None = None


class Expect(_Model):
    max_late_fraction: float | None = Field(default=None, ge=0, le=1)
    max_state_rows: int | None = Field(default=None, ge=0)


def _delay_range(text: str) -> str:
    """A sweep range as ``wmbt sweep --delays`` reads it (``semantics.sweep_range``)."""
    from semantics.sweep_range import parse_delays

    parse_delays(text)
    return text


class SweepSpec(_Model):
    """What the Dagster ``delay_sweep`` asset sweeps (docs/dagster.md): ``wmbt sweep``'s
    ``--source S --delays R`` as ``delays: {S: R}``, one source (a curve) or a join's two (a
    grid), around ``candidate`` (default: the first). Or, instead of ``delays``, the query:
    ``window_sizes: R`` (``--window-sizes R``) or ``ranges: {upper: R}`` (``--ranges R
    --bound upper``; ``lower`` likewise), read by ``wmbt sweep`` (checked by
    :func:`_check_sweep`)."""

    delays: dict[Identifier, Annotated[str, AfterValidator(_delay_range)]] = Field(
        default_factory=dict)
    window_sizes: str | None = None
    ranges: dict[Literal["lower", "upper"], str] | None = None
    candidate: Name | None = None


class BacktestSpec(_Model):
    name: Name
    sources: dict[Identifier, SourceSpec]
    query: Query
    replay: ReplaySpec = ReplaySpec()
    candidates: dict[Name, Candidate]
    expect: Expect = Expect()
    spark_conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    sweep: SweepSpec | None = None
    spark_version: str | None = None  # §1.4: the predictor's profile (semantics.profiles)
    path: str = Field(default="<memory>", exclude=True)
    # a spec lowered from a ``pyspark`` query (jobs.pyspark_query): the code's output columns
    _output_columns: tuple[str, ...] | None = PrivateAttr(default=None)
    _pyspark: PySparkOrigin | None = PrivateAttr(default=None)

    _version_text = field_validator("spark_version", mode="before")(
        lambda v: _version_text(v))

    # -- derived ------------------------------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        return Path(self.path).parent if self.path != "<memory>" else Path.cwd()

    def table_path(self, source: str) -> Path:
        table = self.sources[source].table
        if table.lower().startswith("file://"):  # file:///abs/path (or file://localhost/...)
            from urllib.parse import unquote, urlparse

            table = unquote(urlparse(table).path)
        p = Path(table)
        return p if p.is_absolute() else (self.base_dir / p)

    @property
    def query_sources(self) -> tuple[str, ...]:
        q = self.query
        if isinstance(q, PipelineQuery):  # (no source named: the spec's only one)
            return q.sources or tuple(self.sources)[:1]
        if isinstance(q, PySparkQuery):  # (the code receives every source)
            return tuple(self.sources)
        return (q.left, q.right) if isinstance(q, JoinQuery) else (q.source,)

    @property
    def time_keyed(self) -> bool:
        """Is this an aggregation whose groups carry the watermarked event time (a window, or
        the event-time column among the keys)? Only such groups are dropped as late and
        evicted; without it the watermark changes nothing."""
        q = self.query
        return isinstance(q, AggregationQuery) and (
            q.window is not None
            or any(self.same_column(self.sources[q.source].event_time, k) for k in q.keys))

    @property
    def case_sensitive(self) -> bool:
        """``spark.sql.caseSensitive`` of the spec (false, Spark's default, unless set true):
        whether column names match exactly or in any case."""
        return spark_bool(self.spark_conf.get(CASE_SENSITIVE, False), CASE_SENSITIVE, self.path)

    def same_column(self, a: str, b: str) -> bool:
        """Whether two names of one source denote one column: equal but for case unless
        :attr:`case_sensitive` (Spark's resolution; a source has no two columns equal but for
        case then, ``semantics.column_names``)."""
        return a == b if self.case_sensitive else a.lower() == b.lower()

    @property
    def session_time_zone(self) -> str:
        """The spec-wide ``spark.sql.session.timeZone`` (UTC by default): source filters read
        timestamps without an offset in it."""
        return str(self.spark_conf.get(SESSION_TZ, "UTC"))

    def batch_by(self, candidate: str) -> BatchBy:
        return self.candidates[candidate].batch_by or self.replay.batch_by

    def spark_version_of(self, candidate: str) -> str | None:
        """The Spark version the candidate is predicted for (SPEC.md §1.4): its own
        ``spark_version``, else the spec's; None: the version the replay runs on."""
        return self.candidates[candidate].spark_version or self.spark_version

    def conf(self, candidate: str) -> dict[str, str]:
        """Spark settings for a candidate: spec-level, then the candidate's overrides, then the
        candidate's ``policy`` as ``spark.sql.streaming.multipleWatermarkPolicy``."""
        out = {k: _conf_str(v) for k, v in self.spark_conf.items()}
        cand = self.candidates[candidate]
        out.update({k: _conf_str(v) for k, v in cand.spark_conf.items()})
        out.setdefault("spark.sql.streaming.multipleWatermarkPolicy", cand.policy)
        return out


def _conf_str(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# ---------------------------------------------------------------------------------------------
# YAML loading without YAML 1.1 booleans (`on`, `yes`, `no` stay strings)


class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def _read_yaml(p: Path) -> object:
    """The YAML document of ``p``; a file that is no YAML text, or whose mappings repeat a key
    (YAML loaders keep the last one silently), is a :class:`SpecError`."""
    if p.is_dir():
        raise SpecError(str(p), "<file>", "a YAML file, not a directory")
    if not p.is_file():
        raise SpecError(str(p), "<file>", "an existing YAML file")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise SpecError(str(p), "<file>", f"a readable YAML file ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(p), "<file>", f"a UTF-8 YAML text file (byte {exc.start} is not "
                        "UTF-8: a binary file?)") from None
    if not text.strip():
        raise SpecError(str(p), "<root>", "a YAML mapping with name, sources, query, "
                        "candidates (the file is empty)")
    try:
        loader = _Loader(text)  # (which refuses control characters)
        node = loader.get_single_node()
        if node is None:
            return None
        _no_repeated_keys(loader, str(p), node, "", set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise SpecError(str(p), "<yaml>", f"valid YAML ({exc})") from None
    except (ValueError, TypeError) as exc:  # a value its tag cannot hold: 2026-13-45
        raise SpecError(str(p), "<yaml>", f"valid YAML values ({exc})") from None
    except RecursionError:  # (the YAML composer recurses once per level)
        raise SpecError(str(p), "<yaml>", "a YAML document nested a few levels deep, as a "
                        "spec is (this one nests too deep to read)") from None


def _no_repeated_keys(loader: _Loader, file: str, node: yaml.Node, path: str,
                      seen_nodes: set[int]) -> None:
    """Refuse a mapping that gives a key twice, anywhere in the document (``<<`` merges are
    overrides, not repeats); ``path`` is the node's field path (``""`` at the root). Each node
    is read once, however many aliases name it (aliases of aliases grow exponentially)."""
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _no_repeated_keys(loader, file, item, f"{path}[{i}]", seen_nodes)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[object, int] = {}
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
            continue  # (a collection as a key fails construction with its own error)
        line = key.start_mark.line + 1
        here = f"{path}.{key.value}" if path else str(key.value)
        same = loader.construct_object(key)  # the key as the dict holds it: null and ~ are one
        if same in seen:
            raise SpecError(file, here, f"each key once in {path or '<root>'}: "
                            f"{key.value!r} is given on line {seen[same]} and again on line "
                            f"{line}")
        seen[same] = line
        _no_repeated_keys(loader, file, value, here, seen_nodes)


def _loc(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for i, p in enumerate(loc):
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif i == 1 and p in QUERY_KINDS and parts == ["query"]:
            continue  # discriminator tag inserted by pydantic
        elif p in STAGES and parts[:2] == ["query", ".pipeline"] and loc[i + 1:i + 2] == (p,):
            continue  # (a pipeline stage's tag, before its one key)
        elif str(p).startswith("function-") or p in ("Duration",):
            continue
        else:
            parts.append(("." if parts else "") + _shown(str(p)))
    return "".join(parts) or "<root>"


def _shown(name: str) -> str:
    """A field name as an error shows it: quoted when empty or not printable (a control
    character would cut or hide the message).

    >>> print(_shown("query"), _shown("a\\x1eb"), _shown(""))
    query 'a\\x1eb' ''
    """
    return name if name and name.isprintable() else repr(name)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``loc`` (a pydantic error location), or None."""
    model: Any = BacktestSpec
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        if model is BacktestSpec and part == "query":
            model = QUERY_KINDS.get(str(parts.pop(0))) if parts else None
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        model = field.annotation
        while get_origin(model) is not None:  # X | None, dict[str, X], Annotated[X, ...]
            if get_origin(model) is dict:
                if parts:
                    parts.pop(0)  # the mapping's key: a source or candidate name
                model = get_args(model)[1]
            else:
                model = next((a for a in get_args(model) if a is not type(None)), None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unknown_field(loc: tuple[Any, ...]) -> str:
    """The message for a field the spec does not define: the fields allowed there, and a hint
    for a candidate's trigger rate (``batch_by`` sits in the candidate, not under ``replay``)."""
    msg = "unknown field (check the spelling; see SPEC.md §1)"
    model = _model_at(loc)
    if model is not None:
        names = [n for n, f in model.model_fields.items() if not f.exclude]
        msg = f"unknown field; expected one of: {', '.join(names)} (see SPEC.md §1)"
    if model is Candidate and loc[-1] == "replay":
        msg += "; a candidate overrides the trigger rate with batch_by: {...} in the candidate"
    return msg


def parse_spec(data: Any, path: str = "<memory>") -> BacktestSpec:
    """Validate a spec given as a mapping; see :func:`load_spec`. Where the query's tables
    exist, every column name is checked against them and spelt as they spell it
    (``column_names.with_table_columns``, docs/semantics.md §1.1)."""
    if not isinstance(data, dict):
        raise SpecError(path, "<root>", "a YAML mapping with name, sources, query, candidates")
    try:
        spec = BacktestSpec.model_validate({**data, "path": path})
    except ValidationError as exc:
        # a misspelt field is also a missing one: name the misspelling, it says what to fix
        err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = _unknown_field(tuple(err["loc"]))
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            msg = (f"kind must be one of {', '.join(k for k in QUERY_KINDS if k != 'pyspark')}"
                   " (or pyspark: file.py:function)")
        elif err["type"] == "string_pattern_mismatch":
            msg = f"{msg} (got {err.get('input')!r})"
        more = f" (and {len(exc.errors()) - 1} more error(s))" if len(exc.errors()) > 1 else ""
        raise SpecError(path, _loc(tuple(err["loc"])), msg + more) from None
    check_spec(spec)
    if isinstance(spec.query, PySparkQuery):  # (the code names its columns: SPEC.md §1.1)
        return spec
    from semantics.column_names import check_output_names, with_table_columns

    check_output_names(spec)
    return with_table_columns(spec)


def load_spec(path: str | Path) -> BacktestSpec:
    """Read and validate a backtest spec file (SPEC.md §1). Runs nothing; reads the schemas
    of the tables there are to resolve the column names (see :func:`parse_spec`)."""
    p = Path(path)
    return parse_spec(_read_yaml(p), str(p.resolve()))


def check_spec(spec: BacktestSpec) -> None:
    """Cross-field rules, including Spark's own analysis-time rejections (SPEC.md §1)."""
    f = spec.path
    if not spec.candidates:
        raise SpecError(f, "candidates", "at least one candidate")
    for src in spec.query_sources:
        if src not in spec.sources:
            raise SpecError(f, "query", f"source {src!r} is not defined under sources "
                            f"(defined: {', '.join(spec.sources)})")
    _check_keys_once(spec)
    check_pipeline(spec)
    _check_sweep(spec)
    used = set(spec.query_sources)
    pyspark = isinstance(spec.query, PySparkQuery)
    if pyspark:
        check_pyspark_query(f, spec.base_dir, spec.query)  # type: ignore[arg-type]
    for src in sorted(used):
        if spec.sources[src].event_time is None and not pyspark:
            raise SpecError(f, f"sources.{src}.event_time", "the source's event-time column "
                            "(optional only for a pyspark query)")
    for name, cand in spec.candidates.items():
        bb = cand.batch_by or spec.replay.batch_by
        unit = bb.units[0]
        if unit in ("commits", "files", "bytes"):
            for sname in used:
                if spec.sources[sname].arrival_column:
                    raise SpecError(f, f"candidates.{name}.batch_by" if cand.batch_by else
                                    f"replay.batch_by.{unit}",
                                    f"{unit} needs arrival: commit on every source; source "
                                    f"{sname!r} uses {spec.sources[sname].arrival}; use rows or "
                                    "arrival_interval")
        for src in cand.watermark:
            if src not in used and not pyspark:  # (pyspark: event-time columns, §1.1)
                raise SpecError(f, f"candidates.{name}.watermark.{src}",
                                f"a source of the query ({', '.join(sorted(used))})")
        for key in (*spec.spark_conf, *cand.spark_conf):
            if key.startswith(SEMANTIC_PREFIXES) and key not in MODELED_CONF:
                where = (f"candidates.{name}.spark_conf.{key}" if key in cand.spark_conf
                         else f"spark_conf.{key}")
                raise SpecError(f, where, "a Spark setting the predictor models: "
                                + ", ".join(sorted(MODELED_CONF)))
        conf = spec.conf(name)
        if SESSION_TZ in cand.spark_conf and str(cand.spark_conf[SESSION_TZ]) != \
                spec.session_time_zone and any(spec.sources[s].filter for s in used):
            raise SpecError(f, f"candidates.{name}.spark_conf.{SESSION_TZ}",
                            "the spec-level session time zone: source filters are read once "
                            "for every candidate; set it in the top-level spark_conf")
        _check_partitions(spec, name)
        if conf.get("spark.sql.streaming.multipleWatermarkPolicy") not in ("min", "max"):
            raise SpecError(f, f"candidates.{name}.spark_conf",
                            "spark.sql.streaming.multipleWatermarkPolicy must be min or max")
        _check_query_for_candidate(spec, name)
        _check_spark_version(spec, name)
    from semantics.restarts import check_restarts

    check_restarts(spec)


def _version_text(v: object) -> object:
    """``spark_version: 3.5`` in YAML is a number: read it as the text written."""
    return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


def _check_spark_version(spec: BacktestSpec, cname: str) -> None:
    """A ``spark_version`` names a release the predictor has a profile for."""
    from semantics.profiles import profile_for

    own = spec.candidates[cname].spark_version
    version = spec.spark_version_of(cname)
    if version is None:
        return
    try:
        profile_for(version)
    except ValueError as exc:
        raise SpecError(spec.path, f"candidates.{cname}.spark_version" if own
                        else "spark_version", str(exc)) from None


def _check_sweep(spec: BacktestSpec) -> None:
    """``sweep:`` names one or two sources of the query and a candidate of the spec."""
    if spec.sweep is None:
        return
    f, used = spec.path, spec.query_sources
    given = [k for k in ("delays", "window_sizes", "ranges") if getattr(spec.sweep, k)]
    if len(given) > 1:
        raise SpecError(f, f"sweep.{given[1]}", f"one of delays, window_sizes and ranges (what "
                        f"the sweep varies), got {' and '.join(given)}")
    if given and given[0] != "delays":
        _check_query_sweep(spec)
    elif not 1 <= len(spec.sweep.delays) <= 2:
        raise SpecError(f, "sweep.delays", "one source's range (a curve) or two (a grid), e.g. "
                        "{clicks: 1 minute..2 hours/60}")
    for src in spec.sweep.delays:
        if src not in used:
            raise SpecError(f, f"sweep.delays.{src}", f"a source of the query ({', '.join(used)})")
    if spec.sweep.candidate is not None and spec.sweep.candidate not in spec.candidates:
        raise SpecError(f, "sweep.candidate", f"a candidate of this spec "
                        f"({', '.join(spec.candidates)})")


def _check_query_sweep(spec: BacktestSpec) -> None:
    """``sweep.window_sizes`` or ``sweep.ranges`` (one bound): each value one the predictor
    and Spark take (``semantics.sweep_fallback.varied``)."""
    from semantics.sweep_fallback import QueryAxis, check_values
    from semantics.sweep_range import parse_sizes, parse_values

    sw = spec.sweep
    assert sw is not None
    axis: QueryAxis
    if sw.window_sizes is not None:
        field, axis, text = "sweep.window_sizes", "window", sw.window_sizes
    else:
        assert sw.ranges is not None
        if len(sw.ranges) != 1:
            raise SpecError(spec.path, "sweep.ranges", "one bound of the join's time_range and "
                            "its range, e.g. {upper: 0 seconds..2 hours/20}")
        [(axis, text)] = sw.ranges.items()
        field = f"sweep.ranges.{axis}"
    try:
        check_values(spec, axis, parse_sizes(text) if axis == "window" else
                     parse_values(text, least_ms=None))
    except ValueError as exc:
        raise SpecError(spec.path, field, str(exc)) from None


PARTITIONS = "spark.sql.shuffle.partitions"


def _check_partitions(spec: BacktestSpec, cname: str) -> None:
    """``spark.sql.shuffle.partitions`` as Spark's ``intConf`` reads it: the trimmed text a
    32-bit integer (``Integer.parseInt``), positive (its ``checkValue``)."""
    cand = spec.candidates[cname]
    value = cand.spark_conf.get(PARTITIONS, spec.spark_conf.get(PARTITIONS))
    if value is None:
        return
    text = _conf_str(value).strip("".join(map(chr, range(0x21))))  # (Java's String.trim)
    if not (re.fullmatch(r"[+-]?[0-9]+", text) and 0 < int(text) <= INT32_MAX):
        where = (f"candidates.{cname}.spark_conf.{PARTITIONS}" if PARTITIONS in cand.spark_conf
                 else f"spark_conf.{PARTITIONS}")
        raise SpecError(spec.path, where, f"a positive whole number of at most {INT32_MAX} "
                        f"(Spark reads it as an int), but was {value!r}")


def _check_keys_once(spec: BacktestSpec) -> None:
    """Each of the query's keys once: a key named twice would be two output columns of one
    name (found by the spec fuzzer: ``keys: [ts, ts]`` failed deep in the predictor)."""
    keys = spec.query.keys
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise SpecError(spec.path, "query.keys", f"each key once ({', '.join(map(repr, twice))} "
                        "given more than once)")


def _check_query_for_candidate(spec: BacktestSpec, cname: str) -> None:
    """Spark's UnsupportedOperationChecker rules, applied before anything runs."""
    f, q, wm = spec.path, spec.query, spec.candidates[cname].watermark
    where = f"candidates.{cname}.watermark"
    if isinstance(q, AggregationQuery):
        et = spec.sources[q.source].event_time
        if q.output_mode == "append":
            if q.source not in wm:
                raise SpecError(f, where, f"a watermark on {q.source!r}: Spark rejects append "
                                "output mode for an aggregation without a watermark")
            if not spec.time_keyed:
                raise SpecError(f, "query.keys", f"the event-time column {et!r} (or a window): "
                                "append mode needs the watermarked time among the group keys")
    elif isinstance(q, DeduplicationQuery):
        if q.within_watermark and q.source not in wm:
            raise SpecError(f, where, f"a watermark on {q.source!r}: "
                            "dropDuplicatesWithinWatermark requires one")
    elif isinstance(q, SessionQuery):
        if q.output_mode == "append" and q.source not in wm:
            raise SpecError(f, where, f"a watermark on {q.source!r}: append mode for a session "
                            "window needs one")
    elif isinstance(q, JoinQuery):
        tr = q.time_range
        left_bounded = tr is not None and tr.lower is not None and q.right in wm
        right_bounded = tr is not None and tr.upper is not None and q.left in wm
        keyed = any(
            spec.same_column(k, spec.sources[q.left].event_time) and q.left in wm
            or spec.same_column(k, spec.sources[q.right].event_time) and q.right in wm
            for k in q.keys
        ) or (q.window is not None and (q.left in wm or q.right in wm))  # (a window key)
        need = {"left_outer": left_bounded, "left_semi": left_bounded,
                "right_outer": right_bounded, "full_outer": left_bounded or right_bounded}
        if q.type in need and not (need[q.type] or keyed):
            side = {"left_outer": "right", "left_semi": "right", "right_outer": "left",
                    "full_outer": "left or right"}[q.type]
            bound = {"left_outer": "lower", "left_semi": "lower", "right_outer": "upper",
                     "full_outer": "lower or upper"}[q.type]
            raise SpecError(f, where, f"Spark rejects a {q.type} stream-stream join without a "
                            f"watermark in the join keys, or a watermark on the {side} input "
                            f"plus a time_range.{bound} bound")
