#!/usr/bin/env python3
"""``make bench-memory``: which process of the server holds the memory, idle and under load.

Starts tritonserver on the repository (default: model_repository/, the base stand-in that `make serve`
serves), measures the PSS of tritonserver and of each step's Python stub once every model is ready, then
drives ``--concurrency`` gRPC callers through the ensemble (``--rounds`` photos each) while sampling every
second, and measures again after the load. PSS shares each shared page out among the processes mapping it,
so the per-process figures add up to the server's total.

Figures to ``benchmarks/results/step_memory.{json,md}``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path

from benchmarks.lib.memory import MemorySampler, memory_by_model_mib
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.report import markdown_table
from benchmarks.lib.results import parse_benchmark_args, write_results
from food11_client import Food11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports


def measure(repository: Path, concurrency: int, rounds: int) -> dict:
    photos = varied_photos(8)
    with tempfile.TemporaryDirectory() as work, TritonServer(repository, Path(work), free_ports()) as server:
        at_start = memory_by_model_mib(server.pid)
        idle = {name: group["pss_mib"] for name, group in at_start.items()}
        instances = {name: group["processes"] for name, group in at_start.items()}

        def caller(index: int) -> None:
            with Food11Client(server.grpc_url) as client:
                for round_ in range(rounds):
                    client.caption([photos[(index + round_) % len(photos)]])

        callers = [threading.Thread(target=caller, args=(index,)) for index in range(concurrency)]
        with MemorySampler([server.pid], every_s=1.0, by_model=True) as sampler:
            for thread in callers:
                thread.start()
            for thread in callers:
                thread.join()
        after = {name: mib for name, mib in sampler.samples[-1].items() if name != "t_s"}
    return {"idle": idle, "peak": sampler.peaks(), "after": after, "instances": instances}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6, help="photos per caller")
    args = parse_benchmark_args(parser, argv)
    result = {
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "repository": args.model_repository.name,
        **measure(args.model_repository.resolve(), args.concurrency, args.rounds),
    }
    names = sorted(result["after"], key=lambda name: -result["after"][name])
    rows = [
        {
            "process": name,
            "instances": result["instances"].get(name, 1),
            **{f"{when} (MiB)": round(result[when].get(name, 0.0)) for when in ("idle", "peak", "after")},
        }
        for name in names
    ]
    rows.append(
        {
            "process": "total",
            **{f"{when} (MiB)": round(sum(result[when].values())) for when in ("idle", "peak", "after")},
        }
    )
    print(
        write_results(
            "step_memory",
            result,
            markdown_table(
                "Server memory by process (PSS)",
                [
                    f"Repository {result['repository']}.",
                    f"idle: every model ready; peak: the largest of 1 s samples while {args.concurrency} gRPC "
                    "callers sent "
                    f"{args.rounds} photos each through the ensemble (the total's peak is the sum of "
                    "per-process peaks); "
                    "after: once the load ended.",
                ],
                ["process", "instances", "idle (MiB)", "peak (MiB)", "after (MiB)"],
                rows,
            ),
        ).read_text()
    )


if __name__ == "__main__":
    main()
