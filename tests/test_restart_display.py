"""The switch moment shown (SPEC.md §1.3, docs/semantics.md §2.7): the command line's table
and notes, the HTML report and the Dagster comparison say after which tick the query restarted,
the first batch after it and the delays before → after, from the prediction (no Spark: the
prediction of a restart is checked against Spark in tests/test_restarts.py).

The tiny backtest of tests/test_orchestration.py restarted after tick 1: "switch" runs with
30 s, then 5 s (and asks for a shuffle-partition count the checkpoint fixes); "tight" runs
with 5 s throughout and only restarts.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from jobs.backtest import BacktestResult, run_backtest
from jobs.report_html import figures, restart_marks, write_report
from jobs.tables import restart_notes, summary_rows
from orchestration.comparison import candidate_comparison
from semantics.spec import load_spec
from tests.test_orchestration import NAME, NoSpark, add_partitions, resources, write_tiny_backtest

CANDIDATES = {
    "switch": "{watermark: {clicks: 30 seconds}, after_restart: {watermark: {clicks: 5 seconds},"
              " spark_conf: {spark.sql.shuffle.partitions: 7}}}",
    "tight": "{watermark: {clicks: 5 seconds}}",
}


def predicted(root: Path, restarts: str = "[1]") -> BacktestResult:
    """The tiny backtest with ``replay.restarts``, predicted into ``root/results``."""
    folder = write_tiny_backtest(root, candidates=CANDIDATES)
    path = folder / f"{NAME}.yaml"
    path.write_text(path.read_text().replace("pace: backlog}",
                                             f"pace: backlog, restarts: {restarts}}}"))
    return run_backtest(load_spec(path), actual=False, results=root / "results")


def test_table_and_notes_mark_the_first_batch_after_the_restart(tmp_path: Path) -> None:
    result = predicted(tmp_path)
    rows = {r["candidate"]: r for r in summary_rows(result)}
    # one batch per tick: tick 2's batch (id 2) is the first the restarted query runs
    assert rows["switch"]["restart_batches"] == rows["tight"]["restart_batches"] == "2"
    notes = restart_notes(result)
    assert len(notes) == 2
    switch = next(n for n in notes if n.startswith("switch:"))
    assert "after tick 1" in switch and "predicted: 2" in switch
    assert "clicks 30 seconds → 5 seconds" in switch
    assert "ignored: after_restart sets spark.sql.shuffle.partitions=7" in switch
    tight = next(n for n in notes if n.startswith("tight:"))
    assert "switched" not in tight


def test_without_restarts_nothing_is_said(tmp_path: Path) -> None:
    folder = write_tiny_backtest(tmp_path)
    result = run_backtest(load_spec(folder / f"{NAME}.yaml"), actual=False,
                          results=tmp_path / "results")
    assert restart_notes(result) == [] and restart_marks(result) == {}
    assert all("restart_batches" not in r for r in summary_rows(result))
    assert "Restarts from the checkpoint" not in Path(write_report(result, tmp_path)).read_text()


def test_html_report_shows_the_switch(tmp_path: Path) -> None:
    result = predicted(tmp_path)
    assert restart_marks(result) == {"switch": ([1], [2]), "tight": ([1], [2])}
    text = Path(write_report(result, tmp_path / "reports")).read_text()
    assert "<h2>Restarts from the checkpoint</h2>" in text
    assert "clicks 30 seconds → 5 seconds" in text
    assert "first batch after restart" in text  # the candidates table's column


def test_plots_mark_the_restart(tmp_path: Path) -> None:
    """Per batch id: a vertical line at the first batch after the restart (batch 2); per tick:
    between tick 1 and tick 2."""
    import matplotlib.pyplot as plt

    figs = dict(figures(predicted(tmp_path)))
    try:
        def marks(title: str) -> dict[str, list[float]]:
            return {ln.get_label(): [float(x) for x in ln.get_xdata()]
                    for ln in figs[title].axes[0].lines if "restart" in ln.get_label()}

        assert marks("State rows per batch") == {
            "first batch after restart (switch, tight)": [2.0, 2.0]}
        assert marks("Watermark vs max event time") == {
            "restart (switch, tight)": [1.5, 1.5]}
    finally:
        for fig in figs.values():
            plt.close(fig)


def test_dagster_comparison_metadata_has_the_switch(tmp_path: Path) -> None:
    predicted(tmp_path, "[1, 3]")
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|switch", f"{NAME}|tight"])
        run = dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                             resources=resources(tmp_path, NoSpark()))
    meta = run.asset_materializations_for_node("candidate_comparison")[0].metadata
    switch = meta["switch"].value
    assert switch["switch"]["predicted"]["switch"] == {
        "first_batch": 2, "after_tick": 1, "delays_before": {"clicks": "30 seconds"},
        "delays_after": {"clicks": "5 seconds"},
        "spark_conf": {"spark.sql.shuffle.partitions": "7"},
        "ignored": [switch["switch"]["predicted"]["switch"]["ignored"][0]]}
    assert "spark.sql.shuffle.partitions" in switch["switch"]["predicted"]["switch"]["ignored"][0]
    assert switch["tight"]["predicted"] == {"restarts": [{"after_tick": 1, "first_batch": 2},
                                                         {"after_tick": 3, "first_batch": 4}]}
    rows = {(r.data["candidate"], r.data["side"]): r.data for r in meta["comparison"].value.records}
    assert rows[("switch", "predicted")]["restart_batches"] == "2, 4"
    assert rows[("switch", "predicted")]["switch"] == "clicks 30 seconds → 5 seconds"
    assert rows[("tight", "predicted")]["switch"] is None
    assert ("Delays switched at a restart from the checkpoint: **switch** from batch 2: "
            "clicks 30 seconds → 5 seconds.") in meta["summary"].value
    assert "after tick 1, 3" in meta["restarts"].value
