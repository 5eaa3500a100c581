"""``food11-caption photo.jpg [more ...]``: label, probability and caption for each photo, as JSON, with the
models that answered (``--classify-only``: no caption, milliseconds instead of seconds); a stand-in's warning
also goes to stderr, where a person at a terminal reads it."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from food11_client.connection import DEFAULT_CLASSIFY_MODEL, DEFAULT_MODEL, DEFAULT_URL
from food11_client.errors import (
    RETRY_AFTER_S,
    InvalidImageError,
    OverloadedError,
    PipelineError,
    ServerUnavailableError,
)
from food11_client.results import CaptionResult, Classification
from food11_client.sync_client import Food11Client

EXIT_BAD_PHOTO, EXIT_SERVER_DOWN, EXIT_FAILED, EXIT_OVERLOADED = 1, 2, 3, 4


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="food11-caption", description=__doc__)
    parser.add_argument("photos", nargs="+", type=Path, help="image files (JPEG, PNG, WebP, BMP, GIF)")
    parser.add_argument("-u", "--url", default=DEFAULT_URL, help="Triton gRPC address (default: %(default)s)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="ensemble name (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before giving up (default: %(default)s)")
    parser.add_argument(
        "--classify-only", action="store_true", help="label and probability only: the server runs no captioning"
    )
    parser.add_argument(
        "--classify-model",
        default=DEFAULT_CLASSIFY_MODEL,
        help="the ensemble --classify-only calls (default: %(default)s)",
    )
    return parser.parse_args(argv)


def _name_the_photo(message: str, photos: list[Path]) -> str:
    """The pipeline says "image 2 of 3"; say which file that is."""
    match = re.search(r"image (\d+) of \d+", message)
    if match and 1 <= int(match.group(1)) <= len(photos):
        return f"{photos[int(match.group(1)) - 1]}: {message}"
    return message


def _fail(message: str, exit_code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return exit_code


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        images = [photo.read_bytes() for photo in args.photos]
    except OSError as exc:
        return _fail(f"cannot read {exc.filename}: {exc.strerror}", EXIT_BAD_PHOTO)
    called = args.classify_model if args.classify_only else args.model
    with Food11Client(args.url, args.model, timeout_s=args.timeout, classify_model=args.classify_model) as client:
        try:
            results: Sequence[CaptionResult | Classification] = (
                client.classify(images) if args.classify_only else client.caption(images)
            )
        except InvalidImageError as exc:
            return _fail(f"bad photo: {_name_the_photo(str(exc), args.photos)}", EXIT_BAD_PHOTO)
        except OverloadedError as exc:
            return _fail(
                "the server is over capacity and refused the photos at once (nothing was answered); "
                f"retry in {RETRY_AFTER_S} s or more: {exc}",
                EXIT_OVERLOADED,
            )
        except ServerUnavailableError as exc:
            return _fail(
                f"Triton is not serving {called} at {args.url} (is the server up? `make serve` starts it): {exc}",
                EXIT_SERVER_DOWN,
            )
        except PipelineError as exc:
            return _fail(f"the pipeline failed: {exc}", EXIT_FAILED)
    output = [{"file": str(photo), **result.to_dict()} for photo, result in zip(args.photos, results)]
    print(json.dumps(output, indent=2, ensure_ascii=False))
    for warning in dict.fromkeys(warning for result in results for warning in result.warnings):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
