#!/usr/bin/env python3
"""Start Triton (the nvidia-pytriton wheel's tritonserver) and the FastAPI front; Ctrl-C stops both.
See --help; --no-api starts Triton alone."""

from pipeline_src.serving.serve import main

if __name__ == "__main__":
    main()
