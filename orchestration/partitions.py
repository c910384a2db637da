"""Dynamic partitions: one per candidate (``"<backtest>|<candidate>"``) and one per backtest.

Both are kept up to date by the spec sensor and the nightly schedule (``orchestration.automation``)
from the spec folder; they can also be added in the UI.
"""

from __future__ import annotations

import dagster as dg

CANDIDATES = dg.DynamicPartitionsDefinition(name="candidates")
BACKTESTS = dg.DynamicPartitionsDefinition(name="backtests")
