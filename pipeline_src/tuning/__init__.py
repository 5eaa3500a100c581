"""``food11-tune`` (``make tune``): Triton Model Analyzer sweeps each step's configuration; the best under a latency
budget is written into a copy of the repository, checked, and its ensemble measured against the untuned one
(``cli.py`` runs it; docs/profiling.md, "Tuning each step with Model Analyzer")."""
