"""Whole-job analyses: pure functions over small per-rank tables (collective calls matched across ranks, clock
offsets between ranks, the timing and bandwidth of each collective instance). No I/O: the job driver computes
the per-rank tables in workers and hands the combining process only these."""
