"""Measuring the pipeline: perf_analyzer input data and runs, Triton's per-step statistics, the
in-process baselines, and the reports ``make bench`` writes."""
