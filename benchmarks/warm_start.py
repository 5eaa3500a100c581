"""Is a ready server a warm one? The first request after tritonserver reports ready, against steady ones,
with the steps' warm-up at load (the default: ``model_warmup`` in the configs, the captioner's ``warm_up``)
and without it, in one run.

Each round starts a fresh tritonserver on the repository (default: model_repository/, the base stand-in of
`make models`; without warm-up: a hard-linked copy under build/warm_start/ with every warm-up off), waits
until it is ready, then times one single-photo request through the gRPC client, then ``--steady`` more of
the same photo, one after another (no response cache is configured). The figure that matters is the first
request's latency over the steady median.

Figures to ``benchmarks/results/warm_start.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.lib.percentiles import percentile
from benchmarks.lib.photos import base_photos
from benchmarks.lib.report import markdown_table
from benchmarks.lib.results import parse_benchmark_args, write_results
from food11_client import Food11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

# Triton warms these up from their config's model_warmup, the captioner in the step (its warm_up setting).
CONFIG_WARMED_STEPS = ("preprocess", "classifier", "vision_encoder")
NO_CAPTIONER_WARM_UP = '\nparameters {\n  key: "warm_up"\n  value: { string_value: "false" }\n}\n'


def rewrite_config(config: Path, change) -> None:
    text = config.read_text()
    config.unlink()  # a hard link: writing through it would change the original
    config.write_text(change(text))


def without_warm_up(repository: Path, destination: Path) -> Path:
    """The repository with every warm-up off: hard links (no copy of the weights) but for the configs,
    which are rewritten: model_warmup (each config's last entry) cut, the captioner's warm_up false."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(repository, destination, copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__"))
    for step in CONFIG_WARMED_STEPS:
        rewrite_config(destination / step / "config.pbtxt", lambda text: text[: text.index("model_warmup [")])
    rewrite_config(destination / "captioner" / "config.pbtxt", lambda text: text + NO_CAPTIONER_WARM_UP)
    return destination


def timed_caption(client: Food11Client, photo: bytes) -> float:
    started = time.perf_counter()
    client.caption([photo])
    return time.perf_counter() - started


def one_round(repository: Path, steady: int) -> dict:
    with tempfile.TemporaryDirectory() as work_dir:
        started = time.perf_counter()
        with TritonServer(repository, Path(work_dir), free_ports()) as server:
            ready_s = time.perf_counter() - started
            with Food11Client(server.grpc_url, timeout_s=300) as client:
                photo = base_photos()[0]  # one photo throughout: a caption's length sets its cost
                client.server_version()  # the client's own first-call costs (channel, metadata) are not the server's
                first_s = timed_caption(client, photo)
                steady_s = [timed_caption(client, photo) for _ in range(steady)]
    median = percentile(steady_s, 50)
    return {
        "ready_s": ready_s,
        "first_s": first_s,
        "steady_median_s": median,
        "steady_s": steady_s,
        "first_over_steady": first_s / median,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per variant, alternating (default: 3)")
    parser.add_argument("--steady", type=int, default=8)
    args = parse_benchmark_args(parser, argv)

    variants = {
        "warm-up at load (default)": args.repository,
        "no warm-up": without_warm_up(args.repository, PROJECT_ROOT / "build" / "warm_start" / "cold"),
    }
    rows = []
    for index in range(args.rounds):
        for variant, repository in variants.items():
            measured = one_round(repository, args.steady)
            rows.append({"variant": variant, "round": index + 1, **measured})
            print(
                f"{variant}, round {index + 1}: first {measured['first_s']:.2f} s, steady median "
                f"{measured['steady_median_s']:.2f} s ({measured['first_over_steady']:.2f}x)",
                flush=True,
            )
    document = {"repository": args.repository.name, "rounds": rows}
    columns = ["variant", "round", "ready after (s)", "first request (ms)", "steady median (ms)", "first / steady"]
    table = [
        {
            "variant": row["variant"],
            "round": row["round"],
            "ready after (s)": row["ready_s"],
            "first request (ms)": row["first_s"] * 1000,
            "steady median (ms)": row["steady_median_s"] * 1000,
            "first / steady": f"{row['first_over_steady']:.2f}x",
        }
        for row in rows
    ]
    print(
        write_results(
            "warm_start",
            document,
            markdown_table(
                "First request after ready",
                [
                    f"Repository {document['repository']}; one photo (OpenCV's apple) through the gRPC client, "
                    "one request at "
                    f"a time, the first right after tritonserver reports ready, then {args.steady} steady ones."
                ],
                columns,
                table,
            ),
        ).read_text()
    )


if __name__ == "__main__":
    main()
