#!/usr/bin/env python3
"""One step parameter changed in a repository, typically a copy made to measure a setting against the shipped
one (docs/gpu.md: ``cp -al model_repository /tmp/copy`` hard-links the model files; this writes the config anew,
so that the original, linked, is untouched):

    python scripts/set_parameter.py /tmp/copy/model_repository captioner mode fast

The parameter must exist in the step's config.pbtxt (a typo would otherwise measure the default).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def set_parameter(repository: Path, model: str, key: str, value: str) -> None:
    config = repository / model / "config.pbtxt"
    text = config.read_text()
    pattern = re.compile(r'(key: "' + re.escape(key) + r'"\s*value: \{ string_value: ")([^"]*)(" \})')
    changed, count = pattern.subn(lambda match: f"{match[1]}{value}{match[3]}", text)
    if count != 1:
        raise SystemExit(f"set_parameter: {config} has {count} parameters '{key}', not one")
    config.unlink()  # a hard link to the original's: a new file, not the shared one rewritten
    config.write_text(changed)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository", type=Path)
    parser.add_argument("model")
    parser.add_argument("key")
    parser.add_argument("value")
    args = parser.parse_args(argv)
    set_parameter(args.repository, args.model, args.key, args.value)
    print(f"set_parameter: {args.model}'s {args.key} = {args.value!r} in {args.repository}")


if __name__ == "__main__":
    main()
