"""Measuring the product, beside it: one module per benchmark (``python -m benchmarks.<name>``), the library
they share (``lib``), the profiling tools users run against a server (``profiling``: perf_analyzer, its input
data, trace summaries) and the figures (``results/``).

It imports the product (``pipeline_src``, ``food11_client``); the product never imports it, and neither image
carries it (tests/unit/test_layout.py keeps both rules)."""
