"""Sums and averages of decimal columns, predicted (no Spark here; tests/test_decimal_spark.py
replays them in Spark): Spark 4.0's result types and rounding, against Python's exact
arithmetic."""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from semantics.operators.aggfuncs import decimal_results


def test_an_average_rounds_its_39_digit_quotient_once_to_the_result_scale() -> None:
    # Spark 4.0's avg of a decimal is DecimalDivideWithOverflowCheck: the sum over the count at
    # 39 significant digits, half up, then toPrecision(p + 4, s + 4), half up. No step through
    # the type of a decimal division (an older Spark's Divide(sum, count).cast(result)). Each
    # value below is what Spark 4.0.5 answered for the same sum and count (a batch query:
    # avg(x) over the rows).
    def avg(unscaled: int, count: int, p: int, s: int) -> Decimal:
        return decimal_results("avg", np.array([unscaled]), np.array([count]), p, s)[0]

    # 1/3 of a decimal(38, 18): 22 decimals, not the division type's 18 (+ four zeros)
    assert str(avg(10**18, 3, 38, 18)) == "0.3333333333333333333333"
    assert str(avg(2 * 10**18, 3, 38, 18)) == "0.6666666666666666666667"
    assert str(avg(10**6, 3, 28, 6)) == "0.3333333333"  # decimal(32, 10)
    # decimal(18, 0): the quotient is 1000000000.0000499999750..., four decimals: .0000 (a
    # rounding to the division's 10 decimals first made it .0000500000 and then .0001)
    assert str(avg(2000001000000100, 2000001, 18, 0)) == "1000000000.0000"
