"""Does tritonserver survive calls that are given up on? Raw gRPC deadlines against this project's clients.

For each deadline, a fresh tritonserver gets ``--rounds`` rounds of ``--concurrency`` calls, each with
that deadline, then one call without; the server survived if it is still running and answers. "raw gRPC"
is tritonclient's ``client_timeout`` (a gRPC deadline, i.e. a cancellation); "food11_client" is
``AsyncFood11Client``, which on a Triton older than 2.53 stops waiting instead (food11_client/cancellation.py).
Default repository: the tiny stand-ins, built once under build/cancellation/.

Figures to ``benchmarks/results/cancellation.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.utils import InferenceServerException

from benchmarks.lib.report import markdown_table
from benchmarks.lib.results import parse_benchmark_args, write_results
from food11_client import AsyncFood11Client, Food11Client, PipelineError
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

APPLE = (PROJECT_ROOT / "tests" / "photos" / "apple.jpg").read_bytes()


async def raw_call(url: str, deadline_s: float | None) -> None:
    from food11_client.wire import image_inputs, requested_outputs

    async with grpcclient_aio.InferenceServerClient(url) as client:
        await client.infer(
            ENSEMBLE,
            image_inputs(grpcclient_aio, [APPLE]),
            outputs=requested_outputs(grpcclient_aio, ()),
            client_timeout=deadline_s,
        )


async def storm(url: str, way: str, deadline_s: float, rounds: int, concurrency: int) -> None:
    async with AsyncFood11Client(url) as client:

        async def one():
            try:
                if way == "raw gRPC":
                    await raw_call(url, deadline_s)
                else:
                    await client.caption([APPLE], timeout_s=deadline_s)
            except (InferenceServerException, PipelineError):
                pass  # the deadline, or the server already gone: survival is judged below

        for _ in range(rounds):
            await asyncio.gather(*(one() for _ in range(concurrency)))


def trial(repository: Path, way: str, deadline_s: float, rounds: int, concurrency: int, seen: dict) -> bool:
    with tempfile.TemporaryDirectory() as work_dir, TritonServer(repository, Path(work_dir), free_ports()) as server:
        with Food11Client(server.grpc_url) as client:
            seen["triton"] = client.server_version()
        asyncio.run(storm(server.grpc_url, way, deadline_s, rounds, concurrency))
        try:
            asyncio.run(raw_call(server.grpc_url, None))
        except InferenceServerException:
            return False
        return server.is_running


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repository", type=Path)
    parser.add_argument("--deadlines-ms", type=float, nargs="+", default=[3, 10, 30, 100])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parse_benchmark_args(parser, argv)
    repository = args.model_repository
    if repository is None:
        from pipeline_src.model_build.cli import build_repository_copy

        repository = PROJECT_ROOT / "build" / "cancellation" / "model_repository"
        if not (repository / "captioner" / "1" / "text_decoder").exists():
            build_repository_copy(repository, blip_standin="tiny")
    seen: dict[str, Any] = {}
    rows = [
        {
            "way": way,
            "deadline_ms": deadline_ms,
            "survived": trial(repository, way, deadline_ms / 1000, args.rounds, args.concurrency, seen),
        }
        for way in ("raw gRPC", "food11_client")
        for deadline_ms in args.deadlines_ms
    ]
    version = seen["triton"]
    table = markdown_table(
        "Calls given up on: does tritonserver survive?",
        [
            f"tritonserver {version}. Per deadline a fresh server, "
            f"{args.rounds} rounds of {args.concurrency} concurrent calls with that deadline (tiny stand-ins), "
            "then one call without: survived = still running and answering."
        ],
        ["way", "deadline (ms)", "survived"],
        [
            {**row, "deadline (ms)": f"{row['deadline_ms']:g}", "survived": "yes" if row["survived"] else "**no**"}
            for row in rows
        ],
    )
    result = {"triton": version, "rounds": args.rounds, "concurrency": args.concurrency, "rows": rows}
    print(write_results("cancellation", result, table).read_text())


if __name__ == "__main__":
    main()
