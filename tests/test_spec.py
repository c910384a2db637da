"""Spec loading: typed models, Spark durations, errors naming file, field and expectation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from semantics.durations import Duration
from semantics.errors import SpecError
from semantics.spec import load_spec

GOOD = """
name: clicks_per_ad
sources:
  clicks: {table: data/clicks, event_time: click_ts}
query:
  kind: aggregation
  source: clicks
  keys: [ad_id]
  window: {duration: 10 minutes, slide: 5 minutes}
  aggregates: {clicks: "count(*)", revenue: "sum(price)"}
  output_mode: append
replay: {batch_by: {commits: 1}, pace: backlog}
candidates:
  current: {watermark: {clicks: 10 minutes}}
  tight: {watermark: {clicks: 2 minutes}}
expect: {max_late_fraction: 0.001}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_good_spec_loads_into_typed_models(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.name == "clicks_per_ad"
    assert spec.candidates["tight"].watermark["clicks"].ms == 120_000
    assert spec.query.window.slide_us == 300_000_000
    assert spec.table_path("clicks") == tmp_path / "data/clicks"
    assert spec.conf("tight")["spark.sql.streaming.multipleWatermarkPolicy"] == "min"
    with pytest.raises(ValidationError):  # frozen
        spec.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize("text,us", [
    ("10 minutes", 600_000_000), ("1 hour", 3_600_000_000), ("500 milliseconds", 500_000),
    ("-1 hour", -3_600_000_000), ("0 seconds", 0), ("1 month", 31 * 86_400_000_000),
    ("1 year", 372 * 86_400_000_000), ("interval 1 day 2 hours", 26 * 3_600_000_000),
    ("1.5 seconds", 1_500_000),
])
def test_durations_follow_spark(text: str, us: int) -> None:
    assert Duration.parse(text).us == us


@pytest.mark.parametrize("bad", ["10 minuets", "ten minutes", "", 5, "1 second 2"])
def test_bad_durations_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        Duration.parse(bad)


@pytest.mark.parametrize("change,field,expected", [
    # unknown field
    (("output_mode: append", "output_mode: append\n  emit_every: 3"), "query.emit_every",
     "expected one of: kind, source, keys, window, aggregates, output_mode"),
    # unknown field under a named entry: the entry's fields are listed
    (("clicks: {table: data/clicks,", "clicks: {tabel: data/clicks,"), "sources.clicks.tabel",
     "expected one of: table, event_time, versions, arrival, filter"),
    # a candidate's trigger rate is its own batch_by, not a replay block
    (("tight: {watermark: {clicks: 2 minutes}}",
      "tight: {watermark: {clicks: 2 minutes}, replay: {batch_by: {rows: 10}}}"),
     "candidates.tight.replay", "overrides the trigger rate with batch_by"),
    # wrong type
    (("{commits: 1}", "{commits: many}"), "replay.batch_by.commits", "integer"),
    # negative delay (withWatermark rejects it)
    (("tight: {watermark: {clicks: 2 minutes}}", "tight: {watermark: {clicks: -2 minutes}}"),
     "candidates.tight.watermark", "negative"),
    # bad duration text
    (("duration: 10 minutes", "duration: 10 minuets"), "query.window.duration", "unit"),
    # a duration Spark's withWatermark rejects (tests/test_durations_spark.py), with the fix
    (("tight: {watermark: {clicks: 2 minutes}}", "tight: {watermark: {clicks: 2 min}}"),
     "candidates.tight.watermark.clicks", "not one of Spark's interval units"),
    (("tight: {watermark: {clicks: 2 minutes}}", "tight: {watermark: {clicks: 1.5 hours}}"),
     "candidates.tight.watermark.clicks", "'1 hour 30 minutes' or '90 minutes'"),
    # unknown query kind
    (("kind: aggregation", "kind: pivot"), "query", "kind must be one of"),
    # aggregate expression outside the supported set
    (('revenue: "sum(price)"', 'revenue: "median(price)"'), "query.aggregates", "expected"),
    # unknown source in candidate watermark
    (("current: {watermark: {clicks: 10 minutes}}", "current: {watermark: {click: 10 minutes}}"),
     "candidates.current.watermark.click", "a source of the query"),
    # batch_by must have exactly one rule
    (("{commits: 1}", "{commits: 1, rows: 5}"), "replay.batch_by", "exactly one"),
    # append aggregation without a watermark
    (("current: {watermark: {clicks: 10 minutes}}", "current: {}"),
     "candidates.current.watermark", "append output mode"),
    # an object store other than S3: not read, said before anything runs
    (("table: data/clicks,", "table: gs://bucket/clicks,"), "sources.clicks.table",
     "a local path, file:// URI or s3:// URI"),
    # credentials never come from a spec
    (("table: data/clicks,", "table: s3://lake/clicks, storage_options: "
      "{AWS_SECRET_ACCESS_KEY: abc},"), "sources.clicks.storage_options",
     "AWS_SECRET_ACCESS_KEY is a credential: credentials come from the environment"),
    (("table: data/clicks,", "table: s3://lake/clicks, storage_options: "
      "{AWS_ENDPOINT_URL: 'http://me:pw@127.0.0.1:9000'},"), "sources.clicks.storage_options",
     "a URL without user or password"),
    (("table: data/clicks,", "table: s3://lake/clicks, storage_options: {AWS_BUCKET: x},"),
     "sources.clicks.storage_options", "not an option a spec may set; expected one of: "
     "AWS_ENDPOINT_URL, AWS_REGION, AWS_ALLOW_HTTP"),
    (("table: data/clicks,", "table: data/clicks, storage_options: {AWS_REGION: eu-west-1},"),
     "sources.clicks", "storage_options apply to s3:// tables only"),
    # a semantic Spark setting we do not model
    (("expect:", "spark_conf: {spark.sql.streaming.stateStore.formatValidation.enabled: "
      "false}\nexpect:"), "spark_conf.spark.sql.streaming.stateStore.formatValidation.enabled",
     "models"),
])
def test_bad_specs_name_file_field_and_expectation(tmp_path: Path, change: tuple[str, str],
                                                   field: str, expected: str) -> None:
    assert change[0] in GOOD
    p = write(tmp_path, GOOD.replace(change[0], change[1], 1))
    with pytest.raises(SpecError) as err:
        load_spec(p)
    assert err.value.file == str(p.resolve())
    assert err.value.field == field
    assert expected in err.value.expected
    assert str(p.resolve()) in str(err.value)


def test_yaml_11_booleans_stay_strings(tmp_path: Path) -> None:
    # `on`, `yes`, `no` are strings (YAML 1.1 would make them booleans)
    text = GOOD.replace("current:", "on:").replace("tight:", "no:")
    spec = load_spec(write(tmp_path, text))
    assert set(spec.candidates) == {"on", "no"}


def test_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="an existing YAML file"):
        load_spec(tmp_path / "nope.yaml")


JOIN = """
name: imp_clicks
sources:
  impressions: {table: data/imp, event_time: imp_ts}
  clicks: {table: data/clicks, event_time: click_ts}
query:
  kind: join
  type: left_outer
  left: impressions
  right: clicks
  keys: [ad_id]
  time_range: {lower: -1 hour, upper: 0 seconds}
candidates:
  current: {watermark: {impressions: 2 hours, clicks: 3 hours}, policy: min}
"""


def test_join_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, JOIN))
    assert spec.query.time_range.lower.ms == -3_600_000
    assert spec.query_sources == ("impressions", "clicks")


@pytest.mark.parametrize("change", [
    # left outer needs a watermark on the right side ...
    ("{impressions: 2 hours, clicks: 3 hours}", "{impressions: 2 hours}"),
    # ... and a lower bound that limits how long left rows wait
    ("{lower: -1 hour, upper: 0 seconds}", "{upper: 0 seconds}"),
])
def test_outer_join_without_usable_watermark_is_rejected_like_spark(
        tmp_path: Path, change: tuple[str, str]) -> None:
    with pytest.raises(SpecError, match="Spark rejects a left_outer stream-stream join"):
        load_spec(write(tmp_path, JOIN.replace(*change)))


def test_inner_join_needs_no_watermark(tmp_path: Path) -> None:
    text = JOIN.replace("type: left_outer", "type: inner").replace(
        "{impressions: 2 hours, clicks: 3 hours}, policy: min", "{}")
    assert load_spec(write(tmp_path, text)).query.type == "inner"


def test_no_candidate_session_time_zone_next_to_a_filter(tmp_path: Path) -> None:
    # source filters are read once for every candidate, in the spec-level session time zone
    text = GOOD.replace("event_time: click_ts}", 'event_time: click_ts, filter: "price > 0"}')
    assert "filter" in text and "Europe" not in text
    zoned = text.replace("current: {watermark: {clicks: 10 minutes}}",
                         "current: {watermark: {clicks: 10 minutes}, spark_conf: "
                         "{spark.sql.session.timeZone: Europe/Amsterdam}}")
    with pytest.raises(SpecError) as err:
        load_spec(write(tmp_path, zoned))
    assert err.value.field == "candidates.current.spark_conf.spark.sql.session.timeZone"
    spec_wide = "spark_conf: {spark.sql.session.timeZone: Europe/Amsterdam}\nexpect:"
    load_spec(write(tmp_path, text.replace("expect:", spec_wide)))
    load_spec(write(tmp_path, zoned.replace(', filter: "price > 0"', "")))  # no filter: fine
