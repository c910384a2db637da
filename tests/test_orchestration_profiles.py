"""The Dagster comparison names the Spark profile of each prediction (docs/semantics.md §12):
a ``spark_profile`` column in the comparison table, ``spark_profiles`` metadata and the HTML
report's line."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from jobs.backtest import run_backtest
from orchestration.comparison import candidate_comparison
from semantics.spec import load_spec
from tests.test_orchestration import NAME, NoSpark, add_partitions, resources, write_tiny_backtest


def test_comparison_shows_each_predictions_profile(tmp_path):
    """Two candidates predicted under two Spark releases (no Spark: ``wmbt predict``'s runner
    writes the results store the asset reads)."""
    folder = write_tiny_backtest(tmp_path, candidates={
        "tight": "{watermark: {clicks: 5 seconds}, spark_version: '3.5.3'}",
        "loose": "{watermark: {clicks: 30 seconds}, spark_version: '4.3'}"})
    run_backtest(load_spec(folder / f"{NAME}.yaml"), actual=False, results=tmp_path / "results")
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight", f"{NAME}|loose"])
        run = dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                             resources=resources(tmp_path, NoSpark()))
    assert run.success
    meta = run.asset_materializations_for_node("candidate_comparison")[0].metadata
    table = meta["comparison"].value
    assert "spark_profile" in [c.name for c in table.schema.columns]
    rows = {(r.data["candidate"], r.data["side"]): r.data for r in table.records}
    assert rows[("tight", "predicted")]["spark_profile"] == "3.5.0"
    assert rows[("loose", "predicted")]["spark_profile"] == "4.2"
    assert meta["spark_profiles"].value == {"tight": "3.5.0", "loose": "4.2"}
    # the HTML report written from the store names them too
    html = Path(meta["report"].value).read_text()
    assert "predicted with Spark profile 3.5.0, 4.2" in html or \
        "predicted with Spark profile 4.2, 3.5.0" in html
