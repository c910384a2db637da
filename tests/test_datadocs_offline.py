"""The GX Data Docs index page, the one users open first, lists its validations and expectation
suites without the network: rendered by headless Chromium from the file, every remote reference
stripped and the network unreachable (bootstrap-table, which fills these tables online, is not
there). Skipped without ``/usr/bin/chromium`` (Debian package ``chromium``)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from jobs.datadocs import remote_references
from jobs.validation import validate
from semantics.report import RunResult
from tests.test_backtest import agg_spec, candidate
from tests.test_dagster_ui import CHROMIUM, chromium, page_text

# no name resolves and every request goes to a closed port: nothing can come from the network
OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
           "--proxy-bypass-list=<-loopback>"]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed "
                    "(/usr/bin/chromium; Debian package 'chromium')")
def test_data_docs_index_lists_validations_offline(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path)
    cr = candidate(spec, tmp_path)
    cr.actual = RunResult("c", cr.predicted.batches.copy(), cr.predicted.outputs.copy())
    res = validate(spec, cr, tmp_path / "gx")
    index = Path(res["data_docs"].removeprefix("file://"))
    assert remote_references(index.parent) == []

    dom = chromium([*OFFLINE, "--virtual-time-budget=5000", "--dump-dom", index.as_uri()],
                   tmp_path / "chrome-dom").stdout.decode(errors="replace")
    shot = tmp_path / "data-docs-index.png"
    chromium([*OFFLINE, "--window-size=1300,800", f"--screenshot={shot}", index.as_uri()],
             tmp_path / "chrome-shot")
    keep = os.environ.get("WMBT_UI_ARTIFACTS")
    if keep:  # for a human look
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "data-docs-index.png")
    assert shot.read_bytes()[:4] == b"\x89PNG"
    text = page_text(dom)
    # the validations table: a header and one row per suite's validation, newest first
    assert "Status Run Time Run Name Asset Name Batch ID Expectation Suite" in text, text
    for part in ("outputs", "batches"):
        assert re.search(rf"UTC __none__ tamper__c__{part} wmbt-tamper__c__{part} "
                         rf"(Batch Spec: .*? )?tamper\.c\.{part}", text), text
    # each row links to its validation page, and the suites to theirs: pages that exist
    links = re.findall(r'<a\b[^>]*\bhref="([^"]+)"', dom)
    validations = [link for link in links if link.startswith("validations/")]
    suites = [link for link in links if link.startswith("expectations/")]
    assert len(validations) == 2 and len(set(suites)) == 2, links
    assert all((index.parent / link).is_file() for link in validations + suites)
