"""Spec files that are no specs, repeated keys, and the names a spec gives columns: each a
SpecError or DataError naming the file, the field and what was expected, before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from semantics.errors import SpecError
from semantics.spec import load_spec

SPEC = """
name: names
sources:
  clicks: {table: clicks, event_time: ts}
query:
  kind: aggregation
  source: clicks
  keys: [ad_id]
  window: {duration: 10 seconds}
  aggregates: {n: "count(*)"}
candidates:
  current: {watermark: {clicks: 5 seconds}}
  tight: {watermark: {clicks: 1 second}}
"""


def write(tmp_path: Path, text: str | bytes, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(textwrap.dedent(text))
    return p


def spec_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_spec(path)
    return err.value


@pytest.mark.parametrize("content,field,expected", [
    (os.urandom(64) + b"\xff\xfe", "<file>", "a UTF-8 YAML text file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "<file>", "a UTF-8 YAML text file"),
    ("name: caf\xe9\n".encode("latin-1"), "<file>", "byte 9 is not UTF-8"),
    (b"", "<root>", "the file is empty"),
    (b"  \n# only a comment\n", "<root>", "a YAML mapping"),
    (b"- a\n- b\n", "<root>", "a YAML mapping"),
    (b"just text\n", "<root>", "a YAML mapping"),
    (b"name: x\0y\n", "<yaml>", "valid YAML"),
    (b"name: 2026-13-45\n", "<yaml>", "month must be in 1..12"),
    (b"name: !!int abc\n", "<yaml>", "valid YAML values"),
])
def test_files_that_are_no_spec_are_spec_errors(tmp_path: Path, content: bytes, field: str,
                                                 expected: str) -> None:
    p = write(tmp_path, content)
    err = spec_error(p)
    assert (err.file, err.field) == (str(p), field)
    assert expected in err.expected


def test_a_missing_path_and_a_directory_are_spec_errors(tmp_path: Path) -> None:
    assert spec_error(tmp_path / "nope.yaml").expected == "an existing YAML file"
    assert spec_error(tmp_path).expected == "a YAML file, not a directory"


@pytest.mark.parametrize("change,field,lines", [
    (("name: names\n", "name: names\nname: other\n"), "name", "line 2 and again on line 3"),
    (("  tight: {watermark: {clicks: 1 second}}", "  current: {policy: max}"),
     "candidates.current", "line 12 and again on line 13"),
    (("{n: \"count(*)\"}", "{n: \"count(*)\", n: \"count(ad_id)\"}"), "query.aggregates.n",
     "line 10 and again on line 10"),
    (("keys: [ad_id]", "keys: [ad_id]\n  keys: [ts]"), "query.keys", "line 8 and again on line 9"),
    (("{duration: 10 seconds}", "{duration: 10 seconds, duration: 1 minute}"),
     "query.window.duration", "line 9 and again"),
    (("{clicks: 5 seconds}", "{clicks: 5 seconds, clicks: 0 seconds}"),
     "candidates.current.watermark.clicks", "line 12 and again"),
    (("name: names\n", "name: names\nnull: 1\n~: 2\n"), "~", "line 3 and again on line 4"),
])
def test_a_repeated_key_anywhere_is_an_error_with_its_path_and_lines(
        tmp_path: Path, change: tuple[str, str], field: str, lines: str) -> None:
    err = spec_error(write(tmp_path, SPEC.replace(*change, 1)))
    assert err.field == field
    assert "each key once" in err.expected and lines in err.expected, err.expected


def test_merge_keys_override_without_being_repeats(tmp_path: Path) -> None:
    text = SPEC.replace("  current: {watermark: {clicks: 5 seconds}}",
                        "  current: &c {watermark: {clicks: 5 seconds}, policy: min}\n"
                        "  other: {<<: *c, policy: max}")
    spec = load_spec(write(tmp_path, text))
    assert spec.candidates["other"].policy == "max"


def test_the_cli_prints_the_error_and_exits_2_without_traceback(tmp_path: Path) -> None:
    p = write(tmp_path, b"\x89PNG\r\n\x1a\n")
    run = subprocess.run([sys.executable, "-m", "jobs.cli", "predict", str(p)],
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[1])
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert f"{p}: <file>: a UTF-8 YAML text file" in run.stderr
    assert not (tmp_path / "results").exists()
