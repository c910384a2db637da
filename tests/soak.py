"""Whether the suite runs as ``./dev test --soak`` (the root conftest.py sets ``WMBT_SOAK``
from the flag before any test module is imported), and the random draws that grow with it
(docs/testing.md lists what only ``--soak`` runs)."""

import os

SOAK = bool(os.environ.get("WMBT_SOAK"))


def seeds(ci: int, soak: int) -> range:
    """The random streams a test draws: ``ci`` of them in CI, ``soak`` under ``--soak``.

    >>> len(seeds(20, 80)) in (20, 80)
    True
    """
    return range(soak if SOAK else ci)
