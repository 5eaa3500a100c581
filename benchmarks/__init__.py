"""Measuring the product, beside it and apart from its distribution (benchmarks/pyproject.toml): one module per
benchmark that a make target runs (``python -m benchmarks.<name>``), the library they share (``lib``), the
tuning sweep (``tuning``) and the figures (``results/``).

It imports the product (``pipeline_src``, ``food11_client``), its profiling tools included
(``pipeline_src.profiling``); the product never imports it, and neither its packages nor its images carry it
(tests/unit/test_layout.py keeps these rules)."""
