"""The predictor's performance constants, in one place: sizes of parts and chunks, thresholds
past which work goes to threads, budgets past which a run steps instead of being computed at
once. None of them changes a prediction, only how fast it is made (tests set them to extremes
and compare with stepping). Each says what it tunes and where it was measured: a pass of
docs/benchmarks-archive.md (today's figures: docs/benchmarks.md).

The modules that use a constant import it by name, so a test may patch it where it is read
(``monkeypatch.setattr(session_all, "CHUNK", 97)``). Semantic constants (Spark's defaults,
column names, bit widths of packed words) are not tuning and stay in their modules.
"""

from __future__ import annotations

# --- threads and chunks (engine, parallel passes) ---
# rows of a chunk of batches: its arrays stay cached, threads rarely wait on the GIL (25th pass)
PART_CHUNK_ROWS = 1 << 17
# rows a batch holds on average, below which one pass beats a call per batch (twenty-sixth pass)
SMALL_BATCH = 1 << 12
# values an eviction search takes at once, more in parts in threads (nineteenth pass)
SEARCH_PART = 1 << 18
# cells (as bits) of the threshold table a run's parts share (thirty-second pass: for_parts)
PART_SEARCH_CELL_BITS = 16
# rows past which a whole-run pass is cut into one range per thread (twenty-fourth pass)
THREAD_RANGE_ROWS = 1 << 20
# rows of a key range of sessions, joins and aggregations at once, about (nineteenth pass)
KEY_RANGE_ROWS = 1 << 18

# --- sorts, splits and hash tables (operators/grouping.py) ---
# words past which a packed sort goes in two halves, in threads (twenty-first pass)
SPLIT_SORT = 1 << 20
# ids per hash table past which it leaves the caches, about (twenty-second pass)
HASH_PART = 1 << 20
# ids sampled to tell many distinct ids from a few often repeated (twentieth pass)
DISTINCT_SAMPLE = 1 << 16
# packed words built at once, so a part's passes stay in the cache (twenty-fifth pass)
WORDS_PART = 1 << 15
# rows arrange_rows sorts at once, past which it goes block by block (twenty-seventh pass)
SPLIT_BLOCK = 1 << 15
# parts arrange_rows splits block by block, at most: ~16 rows a part a block (twenty-seventh)
SPLIT_PARTS = 1 << 11
# merge_positions gives places as a mask from this length ratio on (tenth pass: merges)
MASK_RATIO = 16

# --- columns, keys and gathers ---
# values whose minimum and maximum are taken together in the cache (twenty-second pass)
MIN_MAX_PART = 1 << 16
# rows whose exact key ids are computed at once (twenty-second pass: part by part)
IDS_PART = 1 << 15
# positions gathered at once for every output column (twenty-fifth pass: gathered together)
GATHER_PART = 1 << 17
# positions past which each thread gathers a range of them (twenty-fifth pass)
THREADS_PAST = 1 << 16

# --- state stores kept as sorted runs (sessions, join sides) ---
# a run with fewer than 1/DEAD of its entries live is rewritten (eighth and eleventh passes)
DEAD = 4
# the newest run merges into the one before while that is at most RATIO times its size (same)
RATIO = 2
# a store of at most WHOLE times the batch's entries is one run, rewritten whole (same)
WHOLE = 8
# distinct keys counted by direct indexing up to this many ids (key_tally; ninth pass)
DIRECT_LIMIT = 1 << 20
# key indices spanning ≤ RANGE_FACTOR per index + RANGE_SLACK: one pass (key_tally; 9th pass)
RANGE_FACTOR = 8
RANGE_SLACK = 4096

# --- aggregations ---
# cells a state grid may hold beyond 4× the groups of the state and the batch (seventh pass)
GRID_FLOOR = 1 << 16
# rows per batch and key tuple below which windows are computed at once (eighteenth pass)
AT_ONCE_ROWS_PER_KEY = 4
# pairs a range of keys sorts at once, at most, else the run steps (twenty-ninth pass)
PAIRS_AT_ONCE = 1 << 24

# --- sessions at once (whole_run/session.py) ---
# rows of a key range, at least, when ranges are made smaller to pack (twenty-eighth pass)
MIN_RANGE = 1 << 15
# of a key range's rows left to stepping, at most, else the whole run steps (twelfth pass)
STEPPED_AT_MOST = 0.5

# --- joins at once (whole_run/join.py, whole_run/join_band.py) ---
# candidate pairs per admitted row, at most, before the run steps (thirteenth pass)
PAIRS_PER_ROW = 16
# candidate pairs allowed in any case (16 bytes a pair; thirteenth pass)
MIN_PAIRS = 1 << 22
# a row's matches counted word by word up to this many, then by binary search (24th pass)
STEPS = 4
# neighbours band_pairs reads of a row in each direction, at most (twenty-fourth pass)
STEPS_MAX = 32

# --- deduplication by one sort by event time (whole_run/time_sorted.py; thirtieth pass) ---
# rows whose event times tell whether rows share them
TIME_SAMPLE = 1 << 12
# of the sampled event times repeating another, past which rows get hashes
SHARED = 1 / 256
# of the rows, at most resolved exactly (else the key ids)
MOST_RESOLVED = 1 / 16

# --- memory and output ---
# blocks smaller than this come from the heap: the largest glibc takes (twentieth pass)
MMAP_THRESHOLD = 32 << 20
# freed heap memory kept for the next arrays (seventeenth pass: page faults)
TOP_PAD = 1 << 30
# rows per arrow chunk of emitted rows' JSON (32-bit offsets: 8 KB a row; fourteenth pass)
JSON_CHUNK = 1 << 18

# --- the one-pass sweep (semantics/sweep_once.py; docs/benchmarks.md, the one-pass sweep) ---
# entries of a block whose members a count by value scans (growing.Growing): chosen, not tuned
SWEEP_COUNT_BLOCK = 1 << 8
# values of a block whose members an order statistic scans (quantiles.Nested): chosen, not tuned
SWEEP_RANK_BLOCK = 1 << 12
# batches of a join sweep's delays the state-bytes model reads at once (memory: a frame of
# them; semantics/sweep_join.py): chosen, not tuned
SWEEP_BYTES_ROWS = 1 << 20
# cells of a join sweep's (points × delays) tables (state rows, evictions, keys), past which
# it counts them per delay (memory: about ten int64 tables; semantics/sweep_join.py): chosen,
# not tuned
SWEEP_POINT_DELAY_CELLS = 1 << 24
# rows a join sweep's key counts pair, on average per row, with the rows accepted under some
# delays before them, past which it counts them per delay (semantics/sweep_join_keys.py):
# chosen, not tuned
SWEEP_HELD_PAIRS_PER_ROW = 4
# rows of an outer join sweep's latency bracket partitioned at most per order statistic (the
# rest halved by counts; semantics/sweep_join_latency.py): chosen, not tuned
SWEEP_LATENCY_GATHER = 1 << 12
# cells (delays × points × partitions) of a dedup sweep's exact state bytes computed at once
# (memory: about twenty int64 tables; semantics/sweep_exact_bytes.py): chosen, not tuned
SWEEP_EXACT_CELLS = 1 << 20
# integers per value a join sweep's table of sorted values may span, past which it searches
# them (int32: 4 bytes an integer; semantics/sweep_join_latency.py): chosen, not tuned
SWEEP_SEARCH_TABLE_SPAN = 8
# input rows checkpoint_bytes encodes as its sample of state records (bench/state_bytes.py)
CHECKPOINT_SAMPLE_ROWS = 2048
# sample sizes of rows whose groups' buffers the checkpoint-bytes sample accumulates (same)
CHECKPOINT_HISTORY_ROWS = 64

# --- pipelines (semantics/pipeline/fast.py) ---
# table cells per row below which codes are renumbered and groups counted over a table of
# their range, not a hash table (archive: "pipelines' whole-run path", issue 47)
PIPELINE_TABLE_PER_ROW = 4
# rows a union's run (one source's rows of a batch) holds on average, from which the runs are
# copied as they are, not put row by row (issue 47: chains at 10 M events, A/B in one process)
UNION_PIECE_ROWS = 64

# --- key ranges on a cluster (semantics/key_ranges.py, jobs/predict_cluster.py) ---
# rows of history per key range past which a cluster prediction cuts more ranges than two per
# core (bench/cluster.py: chosen, not tuned; a task's memory is about a range's prediction's)
RANGE_ROWS = 1 << 20

# --- streamed outputs (semantics/output_chunks.py) ---
# emitted rows a plain ``wmbt predict`` builds, stores and prints at once: its peak holds one
# such chunk, ~350 B a row (the streamed emitted rows, issue 48: 2^16 against 2^14-2^20)
STREAM_CHUNK_ROWS = 1 << 16

# --- a plain `wmbt predict` in bounded memory (semantics/bounded.py; docs/benchmarks.md,
# "Memory per event": bench/memory.py) ---
# rows of history (Delta log statistics) from which a plain prediction takes the bounded route
BOUNDED_FROM_ROWS = 1 << 19
# peak bytes a key range's prediction takes per row of the range (bench/memory.py: about 330
# for the 10 M deduplication; a margin kept)
RANGE_PEAK_BYTES_PER_ROW = 400
# of issue 48's 100 bytes per event, what one range's prediction may take (bench/memory.py:
# at 50, 8 ranges, the 10 M join read 83-110 B/event from run to run: a margin kept)
RANGE_BYTES_PER_EVENT = 25
# rows of a bounded route's key range, at least (per-range costs: the carrier rows; chosen)
BOUNDED_MIN_RANGE_ROWS = 1 << 17

# --- a deduplication's exact memory figure (semantics/spark_hash.py; docs/benchmarks.md,
# "Memory per event": bench/memory.py, 10 M deduplication) ---
# key rows laid out and hashed at a time: each part's arrays stay in cache through the hashes'
# passes (2^16: 0.5-0.9 s of CPU for 10 M keys where one part of all read 1.2-2.2, under load)
KEY_PART = 1 << 16

# --- the session sweep's settled groups (semantics/sweep_session_settled.py) ---
# latency changes kept pending before a merge into the sorted set, at least (issue 46's pass,
# docs/benchmarks.md "Session windows in the sweep": chosen, not tuned; a quarter of the set)
SESSION_LATENCY_MERGE_AT = 256
