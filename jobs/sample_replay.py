"""A sampled replay (``--sample RATE``): Spark replays a key-hash sample of the history plus
carrier rows (``semantics.sample``), and the predictor runs on the same sampled schedule; both
are reported for the sampled keys, carrier rows removed (docs/semantics.md §11,
docs/replay.md "Validating a sample").

The carrier keys' figures are the prediction of the carrier rows alone (same ticks, hence the
same batches and watermarks), subtracted on both sides; so the sampled prediction and the
sampled replay agree exactly iff the predictor and Spark agree on the whole sampled run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from semantics.predict import Prediction, predict
from semantics.report import RunResult
from semantics.sample import Sample, predicted_outputs, without_carriers
from semantics.spec import BacktestSpec

if TYPE_CHECKING:  # (pyspark is imported by a replay only)
    from pyspark.sql import SparkSession


def carrier_prediction(sample: Sample, spec: BacktestSpec, candidate: str) -> Prediction:
    """What the carrier rows alone do (their keys' figures, to subtract)."""
    return predict(sample.carriers, spec, candidate, explain=False, count_late=True)


def predict_sample(sample: Sample, spec: BacktestSpec, candidate: str, carrier: Prediction, *,
                   explain: bool = True) -> Prediction:
    """The prediction for the sampled keys (``sample.schedule`` predicted, carriers removed)."""
    whole = predict(sample.schedule, spec, candidate, explain=explain, count_late=not explain)
    out = without_carriers(whole, carrier, sample, spec)
    assert isinstance(out, Prediction)
    # (typed as the single machine types the sampled keys' rows: docs/semantics.md §15.2)
    return replace(out, outputs=predicted_outputs(out.outputs, spec))


def replay_sample(sample: Sample, spec: BacktestSpec, candidate: str, carrier: Prediction,
                  workdir: Path, spark: SparkSession, *, fresh: bool = False,
                  notify: Callable[[str], None] = lambda _m: None) -> RunResult:
    """Spark's run of ``sample.schedule`` for the sampled keys (carriers removed)."""
    from jobs.replay import replay

    actual = replay(spec, candidate, sample.schedule, workdir, spark, fresh=fresh,
                    notify=notify)
    return without_carriers(actual, carrier, sample, spec)


def sample_workdir(root: Path, spec: BacktestSpec, rate: float) -> Path:
    """The sampled replay's own work folder (a full replay's stays resumable)."""
    return root / "_work" / spec.name / f"sample-{rate:g}"
