"""The whole-run paths: every batch of a run computed at once, one module per operator it
speeds up (``aggregation``: sliding windows, ``tumbling``: tumbling windows, ``session``,
``join`` with ``join_band``, ``time_sorted``: deduplication by event time), and the numeric
kernels they share (``kernels``). Each operator's ``whole_run`` (semantics/operators/) calls
its module here or returns :class:`semantics.engine.Declined`; both paths give exactly
stepping's batches and rows (docs/architecture.md, "Stepping or the whole run at once").
"""
