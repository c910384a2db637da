"""Exact, incremental interning of group keys to dense integer ids.

A stateful operator sees its keys batch by batch and needs the *same* id for the same key in
every batch, so its state can be sorted integer arrays (searchsorted lookups, vectorised
merges) instead of hash maps of Python tuples.

:class:`KeyInterner` is an append-only dictionary built on pandas' incremental factorizers
(hash tables in C): one per key column, plus one per pair of (ids so far, next column codes).

Invariants
* ids are small non-negative int64 values handed out in first-seen order (a single key column
  reserves 0 for NULL); an id, once handed out, always denotes the same key tuple (so states
  holding ids stay valid values even though the interner grows);
* equality is SQL grouping equality as Spark's ``UnsafeRow`` keys see it: NULL equals NULL,
  ``-0.0`` equals ``0.0``, and values of different columns never mix.

The interner is the only mutable object an operator owns; it never changes what an existing id
means, so step functions that take and return immutable states remain pure.
"""

from __future__ import annotations

import numpy as np
from pandas._libs import hashtable as _ht

from semantics.operators.columns import Values

_PAIR_SHIFT = 32
_MAX_LEFT = 1 << (63 - _PAIR_SHIFT)


class _Coder:
    """Codes of one column: 0 for NULL, 1.. for values in first-seen order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "float":
            self._f = _ht.Float64Factorizer(1024)
        elif kind == "object":
            self._f = _ht.ObjectFactorizer(1024)
        else:
            self._f = _ht.Int64Factorizer(1024)

    def codes(self, v: Values) -> np.ndarray:
        if v.kind != self.kind:
            raise TypeError(f"key column changed kind from {self.kind} to {v.kind}")
        data = v.data
        if self.kind == "object":
            codes = self._f.factorize(np.asarray(data, dtype=object), na_sentinel=-1)
        elif self.kind == "float":
            data = np.where(v.valid, data, np.nan) if v.null is not None else data
            codes = self._f.factorize(np.ascontiguousarray(data, dtype=np.float64),
                                      na_sentinel=-1)
        else:
            codes = self._f.factorize(np.ascontiguousarray(data, dtype=np.int64), na_sentinel=-1,
                                      mask=v.null)
        return np.asarray(codes, dtype=np.int64) + 1


class KeyInterner:
    """Dense ids for tuples of key columns (see the module docstring)."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        self._coders = [_Coder(k) for k in kinds]
        self._pairs = [_ht.Int64Factorizer(1024) for _ in kinds[1:]]

    def ids(self, columns: list[Values] | tuple[Values, ...], n: int | None = None
            ) -> np.ndarray:
        """Id of every row of ``columns`` (int64). With no key columns every row is id 0."""
        if not self.kinds:
            assert n is not None
            return np.zeros(n, dtype=np.int64)
        assert len(columns) == len(self.kinds)
        acc = self._coders[0].codes(columns[0])
        for coder, pair, col in zip(self._coders[1:], self._pairs, columns[1:], strict=True):
            right = coder.codes(col)
            acc = self._pair(pair, acc, right)
        return acc

    @staticmethod
    def _pair(table: _ht.Int64Factorizer, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        if len(left) and int(left.max()) >= _MAX_LEFT:
            raise OverflowError("more than 2**31 distinct key prefixes")
        composite = (left << _PAIR_SHIFT) | right
        return np.asarray(table.factorize(composite, na_sentinel=-1), dtype=np.int64)


class IdInterner:
    """Dense ids for pairs of already-dense int64 ids (e.g. key id + window start code)."""

    def __init__(self) -> None:
        self._left = _ht.Int64Factorizer(1024)
        self._right = _ht.Int64Factorizer(1024)
        self._pair = _ht.Int64Factorizer(1024)

    def ids(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        lcode = np.asarray(self._left.factorize(np.ascontiguousarray(left, dtype=np.int64),
                                                na_sentinel=-1), dtype=np.int64)
        rcode = np.asarray(self._right.factorize(np.ascontiguousarray(right, dtype=np.int64),
                                                 na_sentinel=-1), dtype=np.int64)
        return KeyInterner._pair(self._pair, lcode, rcode)
