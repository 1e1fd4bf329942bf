"""Hardware perf counters (cache hit ratios, memory bandwidth) through perf_event_open."""
