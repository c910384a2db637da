"""A tumbling-window aggregation (append or update mode) for a whole run at once, by counting
every batch's rows into a grid of its own windows × keys. Used by
``AggregationOperator.whole_run`` (no explain, exact key ids, numeric buffers) before the
general ``whole_run.aggregation``, whose difference arrays and key ranges serve sliding
windows; rules of ``aggregation.py``.

A row of a tumbling window is in one window (digit ``d``: its start is the grid's ``d``-th),
its group id is ``d · minor + key``. In batch ``b`` it is late iff its window ends at or before
the batch's late watermark: ``d <= late_digit[b]``. The batch's rows that are not late lie in
the windows ``lo_b .. hi_b``; every batch gets a block of ``(hi_b − lo_b + 1) · minor`` cells,
the blocks one after the other (the *stack*, window-major inside a block), so one
``bincount`` over the run gives every batch's partial aggregate (a row's cell:
``at_b + (d − lo_b) · minor + key``; late rows go to one cell past the stack). The blocks are
then merged into the run's grid of windows × keys batch by batch, in batch order, as the state
merges partial aggregates: a float sum adds each batch's partial sum (its rows added in row
order, as ``bincount`` adds them) to the state's, as stepping does.

The run is read in chunks of whole batches (``kernels.batch_chunks``), each chunk's rows, cells
and stack computed at once: a chunk's arrays stay in the core's cache, where a pass over the
whole run's arrays would go to memory and back for every numpy call. Groups of neighbouring
chunks are computed in threads (chunks of ``kernels.PART_CHUNK_ROWS`` rows: on smaller ones two
threads wait on each other for the GIL), and their stacks merged in batch order after (the
figures: docs/benchmarks-archive.md, the twenty-first and twenty-fifth passes).

Small batches over many windows × keys (a commit a minute, late rows half an hour behind)
would make mostly empty blocks: a chunk whose blocks would pass its share of the budget numbers
its (batch, group) cells densely instead (one sort; :class:`_Entries`), reduces the same
partials over them and merges them group by group, still in batch order per group: round
``k`` merges every group's ``k``-th entry of the chunk at once (a group appears once a
round). A stream of a few readings a batch over thousands of batches, whose blocks would all
pass the budget, is thus computed at once rather than stepped.

Why it is the same as stepping (see ``whole_run.aggregation``): a group leaves the state in the
first batch whose eviction watermark reaches its window end and never comes back, since every later
batch's late watermark is at least that (the caller checks); so a group is created in the first
batch with one of its rows, emitted (append mode) with all of them in the batch it leaves, and the
batches emit whole rows of windows, in id order.

Invariants: ``0 <= key < minor``, digits ``>= 0``; the batch a window's groups leave in never
decreases with its digit (window ends grow with it, watermarks never go backwards).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from semantics.operators.aggfuncs import merge_of, reduce_at
from semantics.operators.grouping import stable_argsort
from semantics.parallel import map_parts
from semantics.whole_run.aggregation import RunGrid, late_groups
from semantics.whole_run.kernels import batch_chunks, chunk_groups


def tumbling_at_once(rows: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
                     counts: np.ndarray, late_digit: np.ndarray, minor: int, windows: int,
                     values: tuple[tuple[np.ndarray, str], ...],
                     leaving: Callable[[np.ndarray], np.ndarray], budget: int,
                     update: bool = False) -> RunGrid | None:
    """Every batch of a tumbling-window aggregation at once.

    ``rows(lo, hi)``: of the run's rows ``lo .. hi - 1`` (in batch order; batch ``b`` holds
    ``counts[b]`` rows), their window digits (``0 .. windows - 1``) and key ids
    (``0 .. minor - 1``), as new arrays. Per batch, ``late_digit``: windows up to it are
    late. ``values``: per buffer array one value per row and how it combines (``sum``: int64;
    ``ordered``: a float64 sum; ``min``/``max``: int64 or float64; NULLs already the
    identity of ``aggfuncs``). ``leaving`` maps window digits to the batch their groups leave
    in (``len(counts)``: never). With ``update``, every batch emits the groups it put, with
    their values after it; else the groups that leave. None when the run's grid would take
    more than ``budget`` cells (the caller goes on another way); a chunk of batches whose
    blocks would take more than its share of it is merged entry by entry (:func:`_entries`).

    Key 1 of 4 in window 3, batch 0 (late below window 2) and batch 1 (late below 4, so that
    row is late); key 2 in window 4, batch 1. Window 3 leaves in batch 1, window 4 never:

    >>> digit, key = np.array([3, 3, 4]), np.array([1, 1, 2])
    >>> g = tumbling_at_once(lambda lo, hi: (digit[lo:hi], key[lo:hi]), np.array([1, 2]),
    ...                      np.array([1, 3]), 4, 5, ((np.array([5, 7, 9]), "sum"),),
    ...                      lambda d: np.where(d < 4, 1, 2), 100)
    >>> g.dropped.tolist(), g.updated.tolist(), g.removed.tolist(), g.state_rows.tolist()
    ([0, 1], [1, 1], [0, 1], [1, 1])
    >>> g.ids.tolist(), g.cuts.tolist(), g.pairs.tolist(), g.arrays[0].tolist()
    ([13], [0, 0, 1], [1], [5])
    """
    n_b = len(counts)
    counts = np.asarray(counts, dtype=np.int64)
    late_digit = np.asarray(late_digit, dtype=np.int64)
    if windows * minor > budget or not counts.any():
        return None
    # per array (the pair count first): how two partials merge (ufunc, identity), and the
    # run's grid of windows × keys, of the partials' dtype, filled with the identity
    merges = [(np.add, 0)] + [merge_of(how, v.dtype) for v, how in values]
    dtypes = [np.int64] + [np.int64 if how == "sum" else np.float64 if how == "ordered"
                           else v.dtype for v, how in values]
    grids = [np.full(windows * minor, f, dtype=t)
             for (_, f), t in zip(merges, dtypes, strict=True)]
    made = np.zeros(n_b, dtype=np.int64)
    updated = np.zeros(n_b, dtype=np.int64)
    put: list[tuple[np.ndarray, ...]] = []  # update mode: per batch, ids and values after it

    total_rows = int(counts.sum())

    def blocks(group: list[tuple[int, int, int, int]]) -> list[_Blocks | _Entries]:
        """A group of neighbouring chunks' blocks, or their entries where the blocks would
        pass the chunk's share of the budget."""
        return [_blocks(rows, chunk, counts, late_digit, minor, values,
                        -(-budget * (chunk[3] - chunk[2]) // total_rows))
                for chunk in group]

    # chunks' blocks computed in threads, a group of chunks each, then merged in batch order
    late_at: list[np.ndarray] = []  # late rows: their batch and group id
    late_gid: list[np.ndarray] = []
    ops = [op for op, _ in merges]
    for group in map_parts(blocks, chunk_groups(batch_chunks(counts))):
        for c in group:
            late_at.append(c.late_at)
            late_gid.append(c.late_gid)
            if isinstance(c, _Entries):
                _fold_entries(c, grids, ops, made, updated, put if update else None)
            else:
                _fold(c.partials, grids, ops, c.busy, c.at, c.base, c.size, made, updated,
                      put if update else None)
    pairs = grids[0]
    e_row = np.asarray(leaving(np.arange(windows, dtype=np.int64)), dtype=np.int64)
    per_row = np.count_nonzero(pairs.reshape(windows, minor), axis=1)
    removed = np.bincount(e_row, weights=per_row, minlength=n_b + 1)[:n_b].astype(np.int64)
    dropped = late_groups(np.concatenate(late_at), np.concatenate(late_gid), n_b)
    state_rows = np.cumsum(made) - np.cumsum(removed)
    if update:
        cols = [np.concatenate(c) for c in zip(*put, strict=True)] if put else \
            [np.array([], dtype=np.int64)] * 2 + [g[:0] for g in grids]
        batch, ids, out = cols[0], cols[1], cols[2:]
    else:
        # leaving windows are a prefix of the grid's rows (their batch never decreases)
        gone = int(np.searchsorted(e_row, n_b))
        ids = np.flatnonzero(pairs[:gone * minor] != 0)  # (of booleans: faster than of ints)
        batch = e_row[ids // minor]
        out = [grid[ids] for grid in grids]
    cuts = np.r_[0, np.cumsum(np.bincount(batch, minlength=n_b)[:n_b])]
    return RunGrid(dropped, state_rows, updated, removed, ids, cuts, out[0], tuple(out[1:]))


@dataclass(frozen=True)
class _Blocks:
    """A chunk's partial aggregates: block ``i`` (of batch ``busy[i]``) is ``size[i]`` cells at
    ``at[i]`` of ``partials`` (``total`` cells in all, and one for the late rows), over the
    grids' cells from ``base[i]``; and the chunk's late rows' batches and group ids."""

    busy: np.ndarray
    at: np.ndarray
    base: np.ndarray
    size: np.ndarray
    total: int
    partials: list[np.ndarray]
    late_at: np.ndarray
    late_gid: np.ndarray


@dataclass(frozen=True)
class _Entries:
    """A chunk's partial aggregates group by group, where its blocks would be mostly empty
    cells (small batches over many windows × keys): entry ``i`` is group ``gid[i]`` in batch
    ``batch[i]`` (in (batch, group id) order, only the groups a batch has rows of), with
    ``partials[j][i]`` its partial of array ``j`` (the pair count first); and the chunk's late
    rows' batches and group ids."""

    batch: np.ndarray
    gid: np.ndarray
    partials: list[np.ndarray]
    late_at: np.ndarray
    late_gid: np.ndarray


def _blocks(rows: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
            chunk: tuple[int, int, int, int], counts: np.ndarray, late_digit: np.ndarray,
            minor: int, values: tuple[tuple[np.ndarray, str], ...], budget: int
            ) -> _Blocks | _Entries:
    """The :class:`_Blocks` of a chunk ``(b0, b1, r0, r1)`` of batches (arguments as
    :func:`tumbling_at_once`'s): its rows' cells, one ``bincount`` for the pair counts and
    one reduction per array of values; its :class:`_Entries` when the blocks would take more
    than ``budget`` cells. Reads only its arguments: chunks can go in threads."""
    b0, b1, r0, r1 = chunk
    digit, key = rows(r0, r1)
    busy = b0 + np.flatnonzero(counts[b0:b1])
    cnt = counts[busy]
    starts = np.cumsum(cnt) - cnt
    hi = np.maximum.reduceat(digit, starts)
    lo = np.maximum(late_digit[busy] + 1, np.minimum.reduceat(digit, starts))
    size = np.maximum(hi - lo + 1, 0) * minor
    total = int(size.sum())
    if total > max(budget, 0):
        return _entries(digit, key, busy, cnt, late_digit, minor, values, r0)
    at = np.cumsum(size) - size
    # a row's cell: at_b + (d - lo_b) * minor + key; a late row's (d < lo_b): past the stack
    lo_row = np.repeat(lo, cnt)
    lr = np.flatnonzero(digit < lo_row)
    cell = digit - lo_row
    cell *= minor
    cell += key
    cell += np.repeat(at, cnt)
    cell[lr] = total
    partials = [np.bincount(cell, minlength=total + 1)]
    partials += [reduce_at(how, total + 1, cell, v[r0:r1]) for v, how in values]
    return _Blocks(busy, at, lo * minor, size, total, partials,
                   busy[np.searchsorted(starts, lr, side="right") - 1], digit[lr] * minor + key[lr])


def _entries(digit: np.ndarray, key: np.ndarray, busy: np.ndarray, cnt: np.ndarray,
             late_digit: np.ndarray, minor: int, values: tuple[tuple[np.ndarray, str], ...],
             r0: int) -> _Entries:
    """The :class:`_Entries` of a chunk's rows (window ``digit`` and ``key`` of each, from
    source row ``r0``; batch ``busy[i]`` holds ``cnt[i]`` of them): each (batch, group) a
    cell of its own, numbered in (batch, group id) order by one stable sort, its partials
    reduced over its rows in row order as a block's cell is (late rows: one cell past the
    last)."""
    batch = np.repeat(busy, cnt)
    gid = digit * minor
    gid += key
    late = digit <= np.repeat(late_digit[busy], cnt)
    lr = np.flatnonzero(late)
    ok = np.flatnonzero(~late)
    g_bits = int(gid.max()).bit_length()  # (group ids are >= 0)
    word = batch[ok] - int(busy[0])
    word <<= g_bits
    word |= gid[ok]
    order = stable_argsort(word, (int(busy[-1] - busy[0]) + 1) << g_bits)
    w = word[order]
    new = np.empty(len(w), dtype=bool)
    new[:1] = True
    np.not_equal(w[1:], w[:-1], out=new[1:])
    at = np.full(len(digit), np.count_nonzero(new), dtype=np.int64)
    at[ok[order]] = np.cumsum(new) - 1
    cells = w[new]
    n = len(cells)
    partials = [np.bincount(at, minlength=n + 1)[:n]]
    partials += [reduce_at(how, n + 1, at, v[r0:r0 + len(digit)])[:n] for v, how in values]
    return _Entries((cells >> g_bits) + int(busy[0]), cells & ((1 << g_bits) - 1), partials,
                    batch[lr], gid[lr])


def _fold_entries(c: _Entries, grids: list[np.ndarray], merges: list[np.ufunc],
                  made: np.ndarray, updated: np.ndarray,
                  put: list[tuple[np.ndarray, ...]] | None) -> None:
    """Merge a chunk's entries into ``grids`` as :func:`_fold` merges blocks: each group's
    partials in batch order. Integer sums do not depend on the order: a running sum over the
    entries in (group, batch) order, less what the groups before held, gives each entry's
    value after its batch. The others (float sums, minima, maxima) merge round by round:
    round ``k`` merges every group's ``k``-th entry of the chunk at once (a group appears
    once a round), so there are as many rounds as the most batches one group of the chunk has
    rows in, not as many as batches. ``made`` counts the groups without pairs before their
    first entry (a group never comes back after it left: the caller checks), ``updated``
    every entry, and ``put`` gets the entries with their values after their batch, in
    (batch, group id) order."""
    batch, gid = c.batch, c.gid
    n_b = len(made)
    updated += np.bincount(batch, minlength=n_b)[:n_b]
    order = stable_argsort(gid, len(grids[0]))  # (each group's entries in batch order)
    g = gid[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else g
    lens = np.diff(np.r_[first, len(g)])
    g1 = g[first]
    made += np.bincount(batch[order[first[grids[0][g1] == 0]]], minlength=n_b)[:n_b]
    after = [np.empty(len(gid), dtype=grid.dtype) for grid in grids] if put is not None else []
    rounds = []
    for j, (p, op, grid) in enumerate(zip(c.partials, merges, grids, strict=True)):
        if op is not np.add or grid.dtype.kind != "i":
            rounds.append(j)
            continue
        run = np.cumsum(p[order])  # (int64: wraps, and the differences are exact)
        run += np.repeat(grid[g1] - (run[first] - p[order[first]]), lens)
        grid[g1] = run[first + lens - 1]
        if after:
            after[j][order] = run
    k, heads = 0, first
    with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
        while rounds and len(heads):
            e = order[heads + k]
            ge = gid[e]
            for j in rounds:
                grid = grids[j]
                region = grid[ge]
                merges[j](region, c.partials[j][e], out=region)
                grid[ge] = region
                if after:
                    after[j][e] = region
            k += 1
            keep = lens > k
            heads, lens = heads[keep], lens[keep]
    if put is not None:
        put.append((batch, gid, *after))


def _fold(partials: list[np.ndarray], grids: list[np.ndarray], merges: list[np.ufunc],
          busy: np.ndarray, at: np.ndarray, base: np.ndarray, size: np.ndarray,
          made: np.ndarray, updated: np.ndarray, put: list[tuple[np.ndarray, ...]] | None) -> None:
    """Merge the blocks of a chunk's ``busy`` batches (block ``i``: ``size[i]`` cells at
    ``at[i]`` of ``partials``, over the grids' cells from ``base[i]``) into ``grids``, in batch
    order; count per batch the groups it puts (``updated``) and creates (``made``), and with
    ``put`` list them with their values after the batch. ``merges``: per grid, its merge
    ufunc."""
    pairs = grids[0]
    with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
        for b, s0, g0, m in zip(busy.tolist(), at.tolist(), base.tolist(), size.tolist(),
                                strict=True):
            if not m:
                continue
            got = partials[0][s0:s0 + m] > 0
            updated[b] = np.count_nonzero(got)
            made[b] = np.count_nonzero(got & (pairs[g0:g0 + m] == 0))
            for p, op, grid in zip(partials, merges, grids, strict=True):
                region = grid[g0:g0 + m]
                op(region, p[s0:s0 + m], out=region)
            if put is not None:
                ids = np.flatnonzero(got)
                put.append((np.full(len(ids), b, dtype=np.int64), ids + g0,
                            *(grid[g0:g0 + m][ids] for grid in grids)))
