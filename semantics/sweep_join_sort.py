"""Sorting the join sweep's rows by an integer key (docs/semantics.md §2.6, the join
paragraph; ``semantics.sweep_join``).

numpy sorts int64 values several times faster than it sorts their positions (``argsort``
gathers keys through the positions; ``sort`` runs vectorised in place). So when a key's span
and the positions fit 63 bits together, each value is packed as ``(key - least) << bits |
position`` and sorted: the sorted values hold the keys in order and, in their low bits, the
positions, ties in the order of position (a stable sort). Else ``argsort`` (stable).
"""

from __future__ import annotations

import numpy as np


def sort_order(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, key[order])``: the positions of the integers ``key`` in ascending order,
    equal keys in the order of position.

    >>> [v.tolist() for v in sort_order(np.array([5, -2, 5, 0, -2]))]
    [[1, 4, 3, 0, 2], [-2, -2, 0, 5, 5]]
    >>> [v.tolist() for v in sort_order(np.array([2**62, -2**62, 2**62]))]  # (no packing)
    [[1, 0, 2], [-4611686018427387904, 4611686018427387904, 4611686018427387904]]
    """
    n = len(key)
    if not n:
        return np.zeros(0, dtype=np.int64), key.copy()
    lo, hi = int(key.min()), int(key.max())
    bits = max(n - 1, 1).bit_length()
    if (hi - lo).bit_length() + bits > 62:
        order = np.argsort(key, kind="stable")
        return order, key[order]
    packed = key.astype(np.int64)  # (a copy, sorted in place)
    packed -= lo
    packed <<= bits
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    order = packed & ((1 << bits) - 1)
    packed >>= bits
    packed += lo
    return order, packed
