"""The reference semantics (``semantics/reference/``, docs/semantics.md §10) against both fast
paths of the predictor, on random small streams of every operator kind: the stepping path and
the whole-run path (where it engages; otherwise it must decline with a reason) must give every
report column and the emitted rows (as multisets per batch) of the definition.

CI runs ``CASES`` seeds per kind (derandomized: seeds 0..n-1); ``--soak`` runs ``SOAK_CASES``
(``.venv/bin/python -m pytest -q -p no:cacheprovider --soak tests/test_reference_paths.py``).
"""

from __future__ import annotations

import pytest

from semantics import reference
from semantics.engine import WholeRunDeclined
from semantics.predict import predict
from semantics.report import output_columns
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec
from tests.reference_kit import join_case, predicted_tables, ref_tables, single_case
from tests.soak import SOAK

CASES, SOAK_CASES = 40, 2_000
KINDS = ["tumbling", "sliding", "keyed", "session", "dedup", "join"]
# kinds whose whole-run path must engage on some of the random cases (a test that never
# reaches it could not fail)
WHOLE_RUN = {"tumbling", "sliding", "session", "dedup", "join"}


def check(schedule: Schedule, spec: BacktestSpec) -> bool:
    """Reference == ``path="step"`` == ``path="whole_run"`` (or its decline, with a reason,
    and then ``path="auto"`` steps); whether the whole run engaged."""
    cols = output_columns(spec, dict(schedule.data_columns))
    want = ref_tables(reference.run(schedule, spec, "c"), cols)
    step = predict(schedule, spec, "c", explain=False, path="step")
    assert step.info["path"] == "step"
    assert predicted_tables(step, cols) == want, "path='step' != reference"
    try:
        whole = predict(schedule, spec, "c", explain=False, path="whole_run")
    except WholeRunDeclined as e:
        assert str(e).split(": ", 1)[1].strip(), "declined without a reason"
        auto = predict(schedule, spec, "c", explain=False)
        assert auto.info["path"] == "step" and auto.info["path_reason"]
        return False
    assert whole.info["path"] == "whole_run"
    assert predicted_tables(whole, cols) == want, "path='whole_run' != reference"
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_reference_equals_both_paths(kind: str) -> None:
    engaged = checked = 0
    for seed in range(SOAK_CASES if SOAK else CASES):
        case = join_case(seed) if kind == "join" else single_case(kind, seed)
        if case is None:
            continue
        try:
            engaged += check(*case)
        except AssertionError as e:
            raise AssertionError(f"{kind} seed {seed}: {e}\nspec: "
                                 f"{case[1].model_dump_json(exclude={'path'})}") from e
        checked += 1
    assert checked >= (SOAK_CASES if SOAK else CASES) // 3
    if kind in WHOLE_RUN:
        assert engaged, f"the whole-run path of {kind} never engaged"
