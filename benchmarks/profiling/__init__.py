"""The profiling tools users run against a served repository: perf_analyzer (installed and run with the
libraries it needs: ``food11-perf-analyzer``), its input data for each step (``scripts/perf_input.py``) and a
summary of Triton's traces (``scripts/trace_summary.py``)."""
