"""Prediction vs actual as Great Expectations 1.x suites (called directly; no dagster-ge).

Per candidate, one validation definition over three small frames:

* ``<backtest>.<candidate>.batches`` — predicted and actual batch reports joined on
  (batch_id, operator); ``ExpectColumnPairValuesToBeEqual`` for every exact column (watermark,
  late/eviction watermark, dropped_by_watermark, state rows, output rows, ...), and the state-bytes
  estimate within ``STATE_BYTES_TOLERANCE`` (a deduplication's, exact:
  ``STATE_BYTES_EXACT_TOLERANCE``, :func:`state_bytes_tolerance`) of Spark's memoryUsedBytes plus
  ``STATE_BYTES_SLACK`` (when both exist) in at least ``STATE_BYTES_MOSTLY`` of the batches,
  and the predicted checkpoint bytes within ``CHECKPOINT_BYTES_TOLERANCE`` of the replay's in
  every batch (when both exist: every operator kind the HDFS-backed model predicts, joins
  included);
* ``<backtest>.<candidate>.outputs`` — emitted rows counted per (batch, row) on both sides;
  the counts must be equal (row for row, as a multiset);
* ``<backtest>.<candidate>.expect`` — the spec's ``expect`` thresholds on the actual run.

Failures come back as readable messages naming batch and column, e.g.
``batch 3 (stateStoreSave): dropped_by_watermark predicted 2, actual 1``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from semantics.compare import row_counts
from semantics.metrics import candidate_metrics, late_fraction_column
from semantics.report import EXACT_COLUMNS

if TYPE_CHECKING:  # (great_expectations is imported by a validation only; jobs.backtest
    # imports this module where it validates)
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.data_context import AbstractDataContext
    from great_expectations.expectations import Expectation

    from jobs.backtest import CandidateResult
    from semantics.report import RunResult
    from semantics.schedule import Schedule
    from semantics.spec import BacktestSpec

STATE_BYTES_TOLERANCE = 0.5  # |predicted − actual| ≤ 50 % of actual + 2 KiB
STATE_BYTES_SLACK = 2048  # (docs/state-bytes.md: small states are dominated by fixed overhead)
# ... in at least 98 % of the batches: Spark's memoryUsedBytes is a sampled estimate
# (SizeEstimator samples the hash table) that moves ±20 % between batches holding the same rows,
# so a run of hundreds of batches meets a few outliers of a sound estimate (docs/state-bytes.md)
STATE_BYTES_MOSTLY = 0.98
# a deduplication's prediction is Spark's own draw of its estimator, equal to the byte in every
# replayed batch (docs/state-bytes.md, "Spark's figure, exactly"): 5 % (+ 2 KiB) instead,
# on Spark 4's layout without restarts (a restarted query reloads its state from files,
# which the figure does not model)
STATE_BYTES_EXACT_TOLERANCE = 0.05
# predicted checkpoint bytes (state files on disk, semantics/checkpoint_bytes.py and
# checkpoint_join.py) within 25 % of the replay's in every batch: about three times the
# evaluation's worst batch, joins included (docs/state-bytes.md)
CHECKPOINT_BYTES_TOLERANCE = 0.25
BATCH_KEY = ["batch_id", "operator"]


def _context(root: Path) -> AbstractDataContext:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    root.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(root))
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        ctx.variables.save()
    except Exception:  # pragma: no cover - cosmetic only
        pass
    return ctx


def state_bytes_tolerance(spec: BacktestSpec, candidate: str, schedule: Schedule,
                         predicted: RunResult) -> float:
    """The state_bytes check's band (a share of the actual figure, plus
    ``STATE_BYTES_SLACK``): ``STATE_BYTES_EXACT_TOLERANCE`` where the prediction computed
    Spark's exact figure (a deduplication whose entries it kept: ``byte_facts.dedup``) on
    Spark 4's rules without restarts, else ``STATE_BYTES_TOLERANCE`` (count models, and a
    prediction that does not say)."""
    from semantics.config import resolve

    facts = getattr(predicted, "byte_facts", None)
    exact = facts is not None and facts.dedup is not None
    if not exact or schedule.restarts or \
            resolve(spec, candidate).profile.checkpoint_layout_unmodelled:
        return STATE_BYTES_TOLERANCE
    return STATE_BYTES_EXACT_TOLERANCE


def batches_frame(predicted: pd.DataFrame, actual: pd.DataFrame,
                  tolerance: float = STATE_BYTES_TOLERANCE) -> pd.DataFrame:
    cols = [c for c in EXACT_COLUMNS if c not in BATCH_KEY]
    extra = [c for c in predicted.columns if c.startswith("input_rows_")]
    sizes = ["state_bytes"] + [c for c in ["checkpoint_bytes"]
                               if c in predicted.columns and c in actual.columns]
    # (a pipeline's operators may share a name: matched on their index too)
    key = BATCH_KEY + (["operator_index"] if "operator_index" in predicted.columns
                       and "operator_index" in actual.columns else [])
    p = predicted[key + cols + extra + sizes].add_prefix("predicted_")
    a = actual[key + cols + extra + sizes].add_prefix("actual_")
    m = p.merge(a, left_on=["predicted_" + k for k in key],
                right_on=["actual_" + k for k in key], how="outer")
    m["batch_id"] = m["predicted_batch_id"].fillna(m["actual_batch_id"]).astype("int64")
    m["operator"] = m["predicted_operator"].fillna(m["actual_operator"])
    for c in cols + extra:
        for side in ("predicted_", "actual_"):
            s = m[side + c]
            m[side + c] = s.astype(object).where(s.notna(), "<none>").astype(str)
    pb = pd.to_numeric(m["predicted_state_bytes"], errors="coerce")
    ab = pd.to_numeric(m["actual_state_bytes"], errors="coerce")
    m["state_bytes_ratio"] = np.where((ab > 0) & pb.notna(), pb / ab.where(ab > 0), np.nan)
    # how far outside the tolerance band the estimate is (<= 0: inside)
    m["state_bytes_excess"] = np.where(
        pb.notna() & ab.notna(),
        (pb - ab).abs() - (tolerance * ab + STATE_BYTES_SLACK), np.nan)
    if "checkpoint_bytes" not in sizes:
        m["checkpoint_bytes_ratio"] = m["checkpoint_bytes_excess"] = np.nan
    else:
        pc = pd.to_numeric(m["predicted_checkpoint_bytes"], errors="coerce")
        ac = pd.to_numeric(m["actual_checkpoint_bytes"], errors="coerce")
        m["checkpoint_bytes_ratio"] = np.where((ac > 0) & pc.notna(), pc / ac.where(ac > 0),
                                               np.nan)
        m["checkpoint_bytes_excess"] = np.where(
            pc.notna() & ac.notna(), (pc - ac).abs() - CHECKPOINT_BYTES_TOLERANCE * ac, np.nan)
    return m.sort_values("batch_id").reset_index(drop=True)


def outputs_frame(predicted: pd.DataFrame, actual: pd.DataFrame) -> pd.DataFrame:
    """Emitted rows counted on both sides (``semantics.compare.row_counts``)."""
    return row_counts(predicted, actual)


def _messages(res: ExpectationSuiteValidationResult,
              tolerance: float = STATE_BYTES_TOLERANCE) -> list[str]:
    out = []
    for r in res.results:
        if r.success:
            continue
        cfg = r.expectation_config
        kw = cfg.kwargs
        idx = r.result.get("unexpected_index_list") or []
        if cfg.type == "expect_column_pair_values_to_be_equal":
            a, b = kw["column_A"], kw["column_B"]
            col = a.removeprefix("predicted_")
            for u in idx[:20]:
                if "row" in u:
                    out.append(f"batch {u['batch_id']}: output row {u['row']} emitted "
                               f"{u.get(a)}× predicted, {u.get(b)}× actual")
                else:
                    out.append(f"batch {u['batch_id']} ({u.get('operator')}): {col} "
                               f"predicted {u.get(a)}, actual {u.get(b)}")
        elif cfg.type == "expect_column_values_to_be_between" and kw["column"] == \
                "state_bytes_excess":
            got = r.result
            out.append(f"state_bytes: the estimate is outside {tolerance:.0%} of "
                       f"actual + {STATE_BYTES_SLACK} B in {got.get('unexpected_count')} of "
                       f"{got.get('element_count', 0) - got.get('missing_count', 0)} batches "
                       f"(at most {1 - STATE_BYTES_MOSTLY:.0%} may be)")
            for u in idx[:20]:
                out.append(f"batch {u['batch_id']} ({u.get('operator')}): state_bytes "
                           f"estimate is {u['state_bytes_excess']:.0f} bytes outside "
                           f"{tolerance:.0%} of actual + {STATE_BYTES_SLACK} B")
        elif cfg.type == "expect_column_values_to_be_between" and kw["column"] == \
                "checkpoint_bytes_excess":
            out.append(f"checkpoint_bytes: the prediction is outside "
                       f"{CHECKPOINT_BYTES_TOLERANCE:.0%} of actual in "
                       f"{r.result.get('unexpected_count')} batches")
            for u in idx[:20]:
                out.append(f"batch {u['batch_id']} ({u.get('operator')}): checkpoint_bytes "
                           f"predicted {u['checkpoint_bytes_excess']:.0f} bytes outside "
                           f"{CHECKPOINT_BYTES_TOLERANCE:.0%} of actual")
        else:
            obs = r.result.get("observed_value")
            if obs is None and r.result.get("partial_unexpected_list"):
                obs = r.result["partial_unexpected_list"][0]
            out.append(f"expect: {kw['column']} = {obs} is above the threshold "
                       f"{kw.get('max_value')}")
    return out


def ran_expectations(part: str, res: ExpectationSuiteValidationResult) -> list[dict[str, Any]]:
    """One entry per expectation GX evaluated in suite ``part``, as GX reports it:
    ``{"suite", "check", "type", "column", "success", "unexpected"}``. ``check`` is the name
    ``validate`` gave it (``checkpoint_bytes``, ``state_bytes``, an exact column, ...);
    ``unexpected``: the rows outside it (None where GX counts none)."""
    out = []
    for r in res.results:
        cfg = r.expectation_config
        kw = cfg.kwargs
        column = kw.get("column") or kw.get("column_A")
        out.append({"suite": part, "check": (cfg.meta or {}).get("check", column),
                    "type": cfg.type, "column": column, "success": bool(r.success),
                    "unexpected": r.result.get("unexpected_count")})
    return out


def _sample_meta(cr: CandidateResult) -> dict[str, Any] | None:
    """A sampled run's suite says so (rate, rows, carrier rows; Data Docs show it)."""
    s = cr.predicted.info.get("sample") if cr.predicted is not None else None
    return {"sample": s} if isinstance(s, dict) else None


def validate(spec: BacktestSpec, cr: CandidateResult, root: Path, counts: pd.DataFrame | None = None
             ) -> dict[str, Any]:
    """Run the GX suites for one candidate; returns {success, failed, statistics, expectations,
    data_docs}: ``expectations`` names each one that ran and its verdict (``ran_expectations``).
    ``counts``: the emitted rows' ``row_counts``, when already computed. ``cr`` has both
    its prediction and its replay."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    assert cr.predicted is not None and cr.actual is not None
    ctx = _context(root)
    ds = ctx.data_sources.add_or_update_pandas("wmbt")
    band = state_bytes_tolerance(spec, cr.name, cr.schedule, cr.predicted)
    b = batches_frame(cr.predicted.batches, cr.actual.batches, band)
    o = counts if counts is not None else outputs_frame(cr.predicted.outputs, cr.actual.outputs)
    metrics = candidate_metrics(spec, cr.schedule, cr.actual)
    m = pd.DataFrame([{"candidate": cr.name, "batch_id": -1, **metrics}])
    exact = [c for c in EXACT_COLUMNS if c not in BATCH_KEY]
    exact += [c for c in cr.predicted.batches.columns if c.startswith("input_rows_")]
    # (each expectation carries its name in ``meta["check"]``: the result lists what ran)
    plans: list[tuple[str, pd.DataFrame, list[Expectation], list[str]]] = [
        ("batches", b,
         [gxe.ExpectColumnPairValuesToBeEqual(column_A=f"predicted_{c}", column_B=f"actual_{c}",
                                              meta={"check": c})
          for c in exact]
         + ([gxe.ExpectColumnValuesToBeBetween(column="state_bytes_excess", max_value=0,
                                                mostly=STATE_BYTES_MOSTLY,
                                                meta={"check": "state_bytes"})]
            if b["state_bytes_excess"].notna().any() else [])
         + ([gxe.ExpectColumnValuesToBeBetween(column="checkpoint_bytes_excess", max_value=0,
                                                meta={"check": "checkpoint_bytes"})]
            if b["checkpoint_bytes_excess"].notna().any() else []),
         ["batch_id", "operator"]),
        ("outputs", o,
         [gxe.ExpectColumnPairValuesToBeEqual(column_A="predicted_count",
                                              column_B="actual_count",
                                              meta={"check": "emitted_rows"})],
         ["batch_id", "row"]),
    ]
    exp = []
    if spec.expect.max_late_fraction is not None:
        exp.append(gxe.ExpectColumnValuesToBeBetween(column=late_fraction_column(metrics),
                                                     min_value=0,
                                                     max_value=spec.expect.max_late_fraction,
                                                     meta={"check": "max_late_fraction"}))
    if spec.expect.max_state_rows is not None:
        exp.append(gxe.ExpectColumnValuesToBeBetween(column="peak_state_rows", min_value=0,
                                                     max_value=spec.expect.max_state_rows,
                                                     meta={"check": "max_state_rows"}))
    if exp:
        plans.append(("expect", m, exp, ["batch_id"]))
    failed: list[str] = []
    ran: list[dict[str, Any]] = []
    stats = {"evaluated": 0, "successful": 0}
    validations = []
    for part, frame, expectations, index_cols in plans:
        name = f"{spec.name}.{cr.name}.{part}"
        asset_name = name.replace(".", "__")
        try:
            asset = ds.get_asset(asset_name)
        except LookupError:
            asset = ds.add_dataframe_asset(name=asset_name)
        try:
            bd = asset.get_batch_definition("whole")
        except (KeyError, LookupError):
            bd = asset.add_batch_definition_whole_dataframe("whole")
        suite = gx.ExpectationSuite(name=name, meta=_sample_meta(cr))
        for e in expectations:
            suite.add_expectation(e)
        suite = ctx.suites.add_or_update(suite)
        vd = ctx.validation_definitions.add_or_update(
            gx.ValidationDefinition(data=bd, suite=suite, name=name))
        fmt = {"result_format": "COMPLETE", "unexpected_index_column_names": index_cols}
        res = vd.run(batch_parameters={"dataframe": frame}, result_format=fmt)
        validations.append(vd)
        stats["evaluated"] += len(res.results)
        stats["successful"] += sum(1 for r in res.results if r.success)
        failed += _messages(res, band)
        ran += ran_expectations(part, res)
    docs = None
    try:
        from jobs.datadocs import make_offline

        ctx.build_data_docs()
        urls = ctx.get_docs_sites_urls()
        docs = urls[0]["site_url"] if urls else None
        if docs and docs.startswith("file://"):
            make_offline(Path(docs.removeprefix("file://")).parent)
    except Exception as exc:  # pragma: no cover - docs are a by-product
        logging.getLogger(__name__).warning("data docs not built: %s", exc)
    return {"success": not failed, "failed": failed, "statistics": stats, "expectations": ran,
            "data_docs": docs}
