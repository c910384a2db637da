"""The names a spec gives columns, as Spark's analyzer reads them (docs/semantics.md §1.1).

Spark resolves a column reference case-insensitively unless ``spark.sql.caseSensitive`` is true:
``groupBy("AD_ID")`` reads the table's ``ad_id`` and outputs a column spelt ``AD_ID``. The
predictor reads the schedule's frames by the table's spelling, so every reference of the spec is
resolved once against the table's columns (:func:`resolved`); the outputs keep the spelling Spark
gives them (:func:`output_names`).

Invariant: with case-insensitive resolution a source has no two columns equal but for case
(Spark's reader refuses them), so two names of a spec denote one column iff they are equal but
for case.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from semantics.errors import DataError, SpecError
from semantics.spark_conf import spark_bool
from semantics.spec import (
    CASE_SENSITIVE,
    AggregationQuery,
    BacktestSpec,
    JoinQuery,
    SessionQuery,
    SourceSpec,
    parse_aggregate,
)
from semantics.storage import TableLocation, is_remote


def fold(name: str, exact: bool) -> str:
    """The form two names are compared in: as written (case-sensitive) or lower case."""
    return name if exact else name.lower()


def check_output_names(spec: BacktestSpec) -> None:
    """Refuse what Spark cannot tell apart: candidates with another ``spark.sql.caseSensitive``
    than the spec's (the sources are read once for all), and an aggregation's or a session's
    output columns (keys, the window's, aggregates) of which two are one name (Spark outputs
    both, then refuses the reference as ambiguous or the sink the duplicate column)."""
    exact = spec.case_sensitive
    for cname, cand in spec.candidates.items():
        if CASE_SENSITIVE in cand.spark_conf and spark_bool(
                cand.spark_conf[CASE_SENSITIVE], f"{CASE_SENSITIVE}", spec.path) != exact:
            raise SpecError(spec.path, f"candidates.{cname}.spark_conf.{CASE_SENSITIVE}",
                            "the spec-level value: column names are resolved once for every "
                            "candidate; set it in the top-level spark_conf")
    q = spec.query
    if not isinstance(q, AggregationQuery | SessionQuery):
        return
    if isinstance(q, SessionQuery):
        struct, parts = "session_window", ("session_start", "session_end")
    else:
        struct, parts = "window", ("window_start", "window_end")
    taken: dict[str, str] = {}  # folded name -> what holds it
    for i, key in enumerate(q.keys):
        _claim(spec, taken, key, f"query.keys[{i}]", f"group key {key!r}", exact)
    if q.window is not None if isinstance(q, AggregationQuery) else True:
        for name in (struct, *parts):
            taken.setdefault(fold(name, exact), f"the window column {name!r}")
    for name in q.aggregates:
        _claim(spec, taken, name, f"query.aggregates.{name}", f"aggregate {name!r}", exact)


def _claim(spec: BacktestSpec, taken: dict[str, str], name: str, field: str, what: str,
           exact: bool) -> None:
    other = taken.get(fold(name, exact))
    if other is not None:
        case = "" if exact else f" ({CASE_SENSITIVE} is false: names differing in case are one)"
        raise SpecError(spec.path, field, f"a name apart from {other}: Spark would output two "
                        f"columns named {name!r}, which it refuses as ambiguous{case}")
    taken[fold(name, exact)] = what


def resolve(name: str, columns: Sequence[str], exact: bool) -> str | None:
    """The table's column that ``name`` denotes (its spelling), or None.

    >>> resolve("AD_ID", ["ts", "ad_id"], False), resolve("AD_ID", ["ts", "ad_id"], True)
    ('ad_id', None)
    """
    if name in columns:
        return name
    if exact:
        return None
    return next((c for c in columns if c.lower() == name.lower()), None)


def check_distinct_columns(spec: BacktestSpec, source: str, where: str,
                           columns: Iterable[str]) -> None:
    """Refuse a source table with two columns equal but for case when Spark compares names
    case-insensitively: its reader fails on them (``COLUMN_ALREADY_EXISTS``) whatever the
    query reads. (deltalake refuses to open such a Delta table today, :func:`open_table`;
    this keeps the rule if it ever opens one.)"""
    if spec.case_sensitive:
        return
    seen: dict[str, str] = {}
    for c in columns:
        if c.lower() in seen:
            raise DataError(where, f"sources.{source}",
                            f"no two columns equal but for case: {seen[c.lower()]!r} and {c!r} "
                            f"(Spark refuses the table while {CASE_SENSITIVE} is false)")
        seen[c.lower()] = c


def references(spec: BacktestSpec, source: str) -> list[tuple[str, str]]:
    """The columns of ``source`` that the spec names, as ``(field path, name)``: its event
    time, arrival column, the query's keys and aggregated columns (a window's event time is
    the source's)."""
    src: SourceSpec = spec.sources[source]
    refs = [(f"sources.{source}.event_time", src.event_time)]
    if src.arrival_column:
        refs.append((f"sources.{source}.arrival", src.arrival_column))
    q = spec.query
    refs += [(f"query.keys[{i}]", k) for i, k in enumerate(getattr(q, "keys", ()))]
    if isinstance(q, AggregationQuery | SessionQuery):
        for name, expr in q.aggregates.items():
            col = parse_aggregate(expr)[1]
            if col is not None:
                refs.append((f"query.aggregates.{name}", col))
    return refs


def spelling(spec: BacktestSpec, source: str,
             columns: Sequence[str]) -> dict[tuple[str, str], str]:
    """The table's spelling of every column the spec names in ``source``, by ``(field path,
    name)``; an unknown name is a :class:`DataError` naming the source, the field and the
    table's columns (``columns``: its own, never the schedule's)."""
    exact = spec.case_sensitive
    out: dict[tuple[str, str], str] = {}
    for field, name in references(spec, source):
        col = resolve(name, columns, exact)
        if col is None:
            case = "" if exact else " (in any case)"
            raise DataError(table_location(spec, source).where, field,
                            f"column {name!r}{case} in source {source!r} (columns: "
                            f"{', '.join(columns)})")
        out[field, name] = col
    return out


def resolved(spec: BacktestSpec, columns: Mapping[str, Sequence[str]]) -> BacktestSpec:
    """``spec`` with every column it names spelt as the table spells it (``columns``: each
    query source's own columns; see :func:`spelling`)."""
    spelt = {s: {name: col for (_, name), col in spelling(spec, s, columns[s]).items()}
             for s in spec.query_sources}
    if all(k == v for m in spelt.values() for k, v in m.items()):
        return spec
    sources = dict(spec.sources)
    for s, names in spelt.items():
        src = sources[s]
        arrival = f"column:{names[src.arrival_column]}" if src.arrival_column else src.arrival
        sources[s] = src.model_copy(update={"event_time": names[src.event_time],
                                            "arrival": arrival})
    q = spec.query
    if isinstance(q, JoinQuery):
        for k in q.keys:  # the operators read both sides' key by one name
            if spelt[q.left][k] != spelt[q.right][k]:
                raise DataError(table_location(spec, q.right).where, "query.keys",
                                f"key {k!r} spelt alike in both sources (left {q.left!r}: "
                                f"{spelt[q.left][k]!r}, right {q.right!r}: "
                                f"{spelt[q.right][k]!r}); the predictor does not model "
                                "differently spelt join keys")
        update: dict[str, object] = {"keys": tuple(spelt[q.left][k] for k in q.keys)}
    else:
        names = spelt[q.source]
        update = {"keys": tuple(names[k] for k in q.keys)}
        if isinstance(q, AggregationQuery | SessionQuery):
            update["aggregates"] = {n: _respelt(e, names) for n, e in q.aggregates.items()}
    query = q.model_copy(update=update)
    if isinstance(q, AggregationQuery | SessionQuery):
        assert isinstance(query, AggregationQuery | SessionQuery)
        query._written_keys = q.output_keys  # Spark outputs the keys as written
    return spec.model_copy(update={"sources": sources, "query": query})


def _respelt(expr: str, names: Mapping[str, str]) -> str:
    func, col = parse_aggregate(expr)
    return f"{func}({names[col]})" if col is not None else expr


def output_names(spec: BacktestSpec) -> dict[str, str]:
    """The output columns that Spark spells as the spec writes them, not as the table does:
    an aggregation's or a session's group keys (``groupBy("AD_ID")`` outputs ``AD_ID``), by
    the table's spelling; {} when none differs. Deduplication and joins output the table's
    columns as the table spells them."""
    q = spec.query
    if not isinstance(q, AggregationQuery | SessionQuery):
        return {}
    return {k: w for k, w in zip(q.keys, q.output_keys, strict=True) if k != w}


def table_location(spec: BacktestSpec, source: str) -> TableLocation:
    """Where ``source``'s table is: an s3:// URI with its options, or a local path."""
    src = spec.sources[source]
    field = f"sources.{source}.table"
    if is_remote(src.table):
        return TableLocation(src.table, field, src.storage_options)
    return TableLocation(str(spec.table_path(source)), field)


def open_table(spec: BacktestSpec, source: str) -> DeltaTable:
    """``source``'s Delta table (local or on an object store, ``TableLocation.open``); a log
    that deltalake cannot read is a :class:`DataError` (a schema with two columns equal but
    for case among them: deltalake refuses it whatever ``spark.sql.caseSensitive`` says)."""
    loc = table_location(spec, source)
    try:
        return loc.open()
    except DeltaError as exc:
        if "Duplicate field name (case-insensitive)" in str(exc):
            pair = (_equal_but_case(_logged_columns(Path(loc.uri))) if not loc.remote
                    else "two of its columns")
            raise DataError(loc.where, f"sources.{source}",
                            f"no two columns equal but for case: {pair} (deltalake cannot "
                            f"read such a table; Spark refuses it while {CASE_SENSITIVE} is "
                            "false)") from None
        raise DataError(loc.where, f"sources.{source}.table",
                        f"a Delta table deltalake can read ({exc})") from None


def _logged_columns(path: Path) -> list[str]:
    """The top-level columns of the last schema written to the Delta log at ``path`` (what
    deltalake refused to read), [] if none is found."""
    for commit in sorted((path / "_delta_log").glob("*.json"), reverse=True):
        for line in commit.read_text(errors="replace").splitlines():
            try:
                meta = json.loads(line).get("metaData") if line.strip() else None
                if meta:
                    return [f["name"] for f in json.loads(meta["schemaString"])["fields"]]
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return []


def _equal_but_case(columns: Sequence[str]) -> str:
    seen: dict[str, str] = {}
    for c in columns:
        if c.lower() in seen:
            return f"{seen[c.lower()]!r} and {c!r}"
        seen[c.lower()] = c
    return "two of its columns"


def table_columns(spec: BacktestSpec, source: str) -> list[str] | None:
    """The top-level columns of ``source``'s Delta table (its latest schema, logical names),
    or None when there is no table there (yet: ``history.plan`` says so)."""
    loc = table_location(spec, source)
    if not loc.remote and not DeltaTable.is_deltatable(loc.uri):
        return None
    return [f.name for f in open_table(spec, source).schema().fields]


def with_table_columns(spec: BacktestSpec) -> BacktestSpec:
    """``spec`` resolved against its tables' columns (:func:`resolved`), after refusing a
    table with two columns equal but for case; unchanged while a table is not there (the
    schedule checks the names again when it reads the tables)."""
    columns: dict[str, list[str]] = {}
    for source in spec.query_sources:
        cols = table_columns(spec, source)
        if cols is None:
            return spec
        check_distinct_columns(spec, source, table_location(spec, source).where, cols)
        columns[source] = cols
    return resolved(spec, columns)
