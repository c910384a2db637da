"""Parts of a whole-run computation in threads (semantics/parallel.py): the same results, in
the same order, as one after the other."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from semantics import parallel
from semantics.whole_run import join as join_all
from semantics.whole_run import session as session_all
from tests.predict_kit import schedule_of, spec_of
from tests.test_predict_join import join_run
from tests.test_predict_join_store import _random_join
from tests.test_predict_session_all import _long_stream


def test_parts_come_back_in_order_whatever_finishes_first(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("WMBT_THREADS", "2")
    names: set[str] = set()

    def slow_first(x: int) -> int:
        names.add(threading.current_thread().name)
        time.sleep(0.05 if x == 0 else 0.0)
        return x * 10

    assert parallel.map_parts(slow_first, [0, 1, 2, 3]) == [0, 10, 20, 30]
    assert any(n.startswith("wmbt-part") for n in names)  # in the pool's threads


def test_one_thread_runs_the_parts_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WMBT_THREADS", "1")
    names: list[str] = []
    parallel.map_parts(lambda x: names.append(threading.current_thread().name), [1, 2])
    assert names == [threading.current_thread().name] * 2
    assert parallel.threads() == 1


def test_a_part_that_maps_parts_does_not_wait_for_itself(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # every pool thread busy with an outer part: the inner parts run in the part's thread
    monkeypatch.setenv("WMBT_THREADS", "2")
    got = parallel.map_parts(lambda x: parallel.map_parts(lambda y: x + y, [1, 2]), [10, 20])
    assert got == [[11, 12], [21, 22]]


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_threads_do_not_change_a_prediction(threads: str, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    # sessions and joins split by small key ranges, computed in 1, 2 or 3 threads: the same
    # report and rows, in the same order
    from semantics.predict import predict

    monkeypatch.setattr(session_all, "CHUNK", 97)
    monkeypatch.setattr(join_all, "CHUNK", 37)
    runs = []
    for seed in range(3):
        query, batches, delay, pace = _long_stream(seed)
        runs.append((spec_of(query, delay, pace), schedule_of(batches, pace)))
        steps, jtype, kw = _random_join(seed)
        join = join_run(steps, jtype, explain=False, **kw)
        runs.append((join.spec, join.schedule))
    results = {}
    for env in ("1", threads):
        monkeypatch.setenv("WMBT_THREADS", env)
        results[env] = [predict(sched, spec, "c", explain=False) for spec, sched in runs]
    for a, b in zip(results["1"], results[threads], strict=True):
        assert a.batches.equals(b.batches) and a.outputs.equals(b.outputs)
        assert np.array_equal(a.batches["state_rows"], b.batches["state_rows"])


def test_a_forked_child_gets_its_own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # a process forked after the pool was made (e.g. by a multiprocess executor) has none of
    # its threads: it must make its own pool, not wait forever on the parent's
    import multiprocessing

    monkeypatch.setenv("WMBT_THREADS", "2")
    assert parallel.map_parts(abs, [-1, -2]) == [1, 2]  # the parent's pool exists
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(parallel.map_parts, (abs, [-3, -4])).get(timeout=60)
    assert got == [3, 4]
