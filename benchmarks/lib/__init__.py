"""What the benchmarks share: load generation and latency percentiles, process memory, Triton's per-step
statistics, the in-process pipeline they compare the server with, the photos, and the results writer that
stamps every figure with its commit and machine."""
