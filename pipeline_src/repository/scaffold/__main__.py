"""``python -m pipeline_src.repository.scaffold``: the same as ``food11-new-step``."""

from pipeline_src.repository.scaffold.cli import main

main()
