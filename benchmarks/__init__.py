"""Measuring the product, beside it and apart from its distribution (benchmarks/pyproject.toml): one module per
benchmark a make target runs (``python -m benchmarks.<name>``), the library they share (``lib``) and the figures
(``results/``). It may import all of the product; the product imports none of it (tests/unit/test_layout.py)."""
