#!/usr/bin/env python3
"""Write perf_analyzer --input-data JSON for the ensembles and each step from a folder of photos. See --help."""

from pipeline_src.profiling.perf_input import main

if __name__ == "__main__":
    main()
