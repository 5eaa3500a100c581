#!/usr/bin/env python3
"""Per-step request, queue and compute time of the requests in a Triton trace file. See --help."""

from pipeline_src.profiling.trace_summary import main

if __name__ == "__main__":
    main()
