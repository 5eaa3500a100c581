#!/usr/bin/env python3
"""Build every model file model_repository/ needs. See --help."""

from pipeline_src.model_build.cli import main

if __name__ == "__main__":
    main()
