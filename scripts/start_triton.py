#!/usr/bin/env python3
"""Start the real tritonserver (from the nvidia-pytriton wheel) on the model repository. See --help."""

from pipeline_src.serve import main

if __name__ == "__main__":
    main()
