"""Where one traced request's time went, step by step, from a Triton trace file (TIMESTAMPS level).

``python scripts/trace_summary.py logs/trace.json.0`` prints, per traced request, a tree of the
models it ran (the captioner under ``caption_with_label``, whose BLS call carries the trace) with
request, queue and compute milliseconds. ``caption_with_label``'s compute includes its wait on the
captioner.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_traces(path: Path) -> dict[int, dict]:
    """Trace id -> {"model_name", "request_id", "parent_id" (0: a root), "ns": {timestamp name: ns}}."""
    traces: dict[int, dict] = {}
    for entry in json.loads(path.read_text()):
        trace = traces.setdefault(entry["id"], {"parent_id": 0, "ns": {}})
        trace.update((key, value) for key, value in entry.items() if key in ("model_name", "request_id", "parent_id"))
        trace["ns"].update((stamp["name"], stamp["ns"]) for stamp in entry.get("timestamps", []))
    return traces


def _ms(trace: dict, start: str, end: str) -> str:
    ns = trace["ns"]
    return f"{(ns[end] - ns[start]) / 1e6:9.1f}" if start in ns and end in ns else " " * 9


def summary_lines(traces: dict[int, dict]) -> list[str]:
    lines = [f"{'model (ms)':<24}{'request':>9}{'queue':>9}{'compute':>9}"]

    def show(trace_id: int, depth: int) -> None:
        trace = traces[trace_id]
        lines.append(
            f"{'  ' * depth + trace.get('model_name', '?'):<24}{_ms(trace, 'REQUEST_START', 'REQUEST_END')}"
            f"{_ms(trace, 'QUEUE_START', 'COMPUTE_START')}{_ms(trace, 'COMPUTE_START', 'COMPUTE_END')}"
        )
        children = [child for child, value in traces.items() if value["parent_id"] == trace_id]
        for child in sorted(children, key=lambda child: traces[child]["ns"].get("REQUEST_START", 0)):
            show(child, depth + 1)

    for root in [trace_id for trace_id, trace in traces.items() if trace["parent_id"] == 0]:
        show(root, 0)
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace_file", type=Path)
    args = parser.parse_args(argv)
    print("\n".join(summary_lines(read_traces(args.trace_file))))


if __name__ == "__main__":
    main()
