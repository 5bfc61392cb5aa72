"""The environment variables that configure the bench app (bench.app), read at its import in
the bench's process and in its workers'."""

#: Where a bench puts the fair store when not on the broker's Redis (bench.memory, and
#: bench.scale_out's clusters through bench.app), and bench.app's ``fairqueue_shards``.
STORE_URL_ENV = "FQ_BENCH_STORE_URL"
SHARDS_ENV = "FQ_BENCH_SHARDS"
#: Set (to anything): the bench app's workers log no line per task (bench.recording's store at
#: its best pace, as a user's worker at its default level, WARNING, runs it).
QUIET_TASKS_ENV = "FQ_BENCH_QUIET_TASKS"
