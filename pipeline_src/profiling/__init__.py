"""The profiling tools users run against a served repository: perf_analyzer (installed and run with the
libraries it needs: ``food11-perf-analyzer``, the ``client`` extra), its input data for each step
(``scripts/perf_input.py``: the ``client`` and ``steps`` extras, as it runs the steps' own code) and a summary of
Triton's traces (``scripts/trace_summary.py``: the standard library alone). The benchmarks build on them."""
