"""The chaos run's figures: per fault (and per kind) time to detect, time to recover, requests failed, answered
wrongly and unanswered while it lasted; the done criteria; the markdown.

A fault's window runs from its injection to the next one's (the last: to the end of the load); a request
belongs to the window its end falls in (an unanswered one: its sending). Recovery is the first correct answer
after the window's last request that did not end well (after the injection when none failed): the service
answering right *again*, not a request that happened to reach a live instance of the step just before the
watchdog unloaded it. A request the killed stub held, which Triton 2.51 then never ends, is read past and
noted (``owed_by_the_dead_stub``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from benchmarks.lib.chaos_faults import GRPC_CANCEL, STUB_KILL, STUB_STOP, TRITON_HEALED, TRITON_KILL, Injection
from benchmarks.lib.load import FAILED, OK, UNANSWERED, WRONG, Outcome
from pipeline_src.profiling.report import markdown_table

STUB_RECOVERY_S, API_RECOVERY_S, AFTER_RESTART_S = 30.0, 10.0, 30.0
READY_AGAIN = re.compile(r"ready again in ([0-9.]+) s")


def restart_s(injection: Injection) -> float | None:
    """tritonserver's restart time as serve.py measured it (its "ready again in X s" line)."""
    found = READY_AGAIN.search(injection.healed.text) if injection.healed else None
    return float(found.group(1)) if found else None


def recovery_limit_s(injection: Injection) -> float | None:
    """What the issue allows: 30 s after a stub's death, the API's 10 s, tritonserver's measured restart + 30 s
    (None: it restarted without saying how long it took, which fails; also for a stub whose death took
    tritonserver down); a burst that did not crash Triton, 30 s."""
    triton_restarted = injection.healed is not None and injection.healed.text.startswith(TRITON_HEALED)
    if (injection.kind.startswith(STUB_KILL) and not triton_restarted) or injection.kind == STUB_STOP:
        return STUB_RECOVERY_S
    if injection.kind == TRITON_KILL or (injection.kind == GRPC_CANCEL and injection.detected) or triton_restarted:
        restarted = restart_s(injection)
        return None if restarted is None else restarted + AFTER_RESTART_S
    if injection.kind == GRPC_CANCEL:
        return STUB_RECOVERY_S
    return API_RECOVERY_S


def in_window(outcomes: Sequence[Outcome], start: float, end: float) -> list[Outcome]:
    """The requests that ended in [start, end); an unanswered one by when it was sent (its "end" is only its
    deadline, which may fall in a later fault's window)."""
    return [o for o in outcomes if start <= (o.sent if o.verdict == UNANSWERED else o.ended) < end]


def owed_by_the_dead_stub(injection: Injection, outcome: Outcome) -> bool:
    """A request in the killed stub when it died that then ran into the API's deadline (504): Triton 2.51 never ends
    a request whose answer a dead stub's response sender owed (the captioner's loop answers that way), so the API
    ends it at its deadline. It says nothing of the heal: recovery is read past it, and it is counted apart."""
    return injection.kind.startswith(STUB_KILL) and outcome.sent < injection.at and outcome.failure == "504"


def fault_figures(injection: Injection, window: Sequence[Outcome], started: float) -> dict:
    bad = [o for o in window if o.verdict != OK]
    owed = [o for o in bad if owed_by_the_dead_stub(injection, o)]
    last_bad = max((o.ended for o in bad if o not in owed), default=injection.at)
    notes = list(injection.notes)
    if owed:
        notes.append(f"{len(owed)} request(s) in the stub when it died ended at the API's deadline (504)")
    recovered = min((o.ended for o in window if o.verdict == OK and o.ended > last_bad), default=None)
    first_correct = min((o.ended for o in window if o.verdict == OK and o.sent >= injection.at), default=None)
    limit = recovery_limit_s(injection)
    recovery = None if recovered is None else recovered - injection.at
    return {
        "kind": injection.kind,
        "round": injection.round,
        "at_s": injection.at - started,
        "target": injection.target,
        "skipped": injection.skipped,
        "detected_s": None if injection.detected is None else injection.detected.at - injection.at,
        "detected_line": injection.detected.text if injection.detected else "",
        "healed_line": injection.healed.text if injection.healed else "",
        "healed_s": None if injection.healed is None else injection.healed.at - injection.at,
        "restart_s": restart_s(injection) if injection.healed and "tritonserver" in injection.healed.text else None,
        "recovery_s": recovery,
        "first_correct_s": None if first_correct is None else first_correct - injection.at,
        "limit_s": limit,
        "recovered": bool(not injection.skipped and recovery is not None and limit is not None and recovery <= limit),
        "requests": len(window),
        "failed_by_status": dict(sorted(Counter(o.failure for o in window if o.verdict == FAILED).items())),
        "failure_examples": {o.failure: o.detail for o in reversed(window) if o.verdict == FAILED},
        "wrong": sum(o.verdict == WRONG for o in window),
        "unanswered": sum(o.verdict == UNANSWERED for o in window),
        "notes": notes,
    }


def kind_summary(kind: str, faults: Sequence[dict]) -> dict:
    failed: Counter = Counter()
    for fault in faults:
        failed.update(fault["failed_by_status"])

    def worst(key: str) -> float | None:
        values = [f[key] for f in faults if f[key] is not None]
        return max(values) if values else None

    return {
        "kind": kind,
        "rounds": len(faults),
        "detected": sum(f["detected_s"] is not None for f in faults),
        "detected_s_max": worst("detected_s"),
        "recovery_s_max": worst("recovery_s"),
        "limit_s_min": min((f["limit_s"] for f in faults if f["limit_s"] is not None), default=None),
        "failed_by_status": dict(sorted(failed.items())),
        "wrong": sum(f["wrong"] for f in faults),
        "unanswered": sum(f["unanswered"] for f in faults),
        "recovered": sum(f["recovered"] for f in faults),
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _statuses(failed: dict) -> str:
    return ", ".join(f"{status}: {count}" for status, count in failed.items()) or "none"


def markdown(result: dict) -> str:
    paragraphs = [
        f"{result['repository']}. scripts/serve.py ({' '.join(result['serve_args']) or 'its defaults'}) under "
        f"{result['requests']} uploads through the API at concurrency {result['concurrency']} over "
        f"{result['photos']} photos (the API's deadline {result['api_deadline_s']:.0f} s, the client's "
        f"{result['deadline_s']:.0f} s, a pause of "
        f"{result['retry_pause_s']} s after a request that did not end well), {result['wall_s']:.0f} s, while "
        f"{len(result['faults'])} faults were injected in a seeded random order (seed {result['seed']}), at least "
        f"{result['rounds']} of each kind, each after the last one's recovery and a quiet {result['gap_s']:.0f} s.",
        "Detected: injection to the serve.py line saying it saw the fault. Recovered: injection to the first "
        "correct answer after the last request that did not end well (the limit: 30 s for a stub, tritonserver's "
        "restart as serve.py measured it + 30 s, 10 s for the API). Wrong: a 200 with another photo's answer. "
        "Unanswered: neither an answer nor an error within the client deadline.",
        "**All checks passed.**" if result["passed"] else "**FAILED**: " + "; ".join(result["failures"]),
    ]
    kinds = [
        {
            "fault": k["kind"],
            "rounds": k["rounds"],
            "detected": f"{k['detected']} of {k['rounds']}",
            "detected in (max, s)": _seconds(k["detected_s_max"]),
            "recovered in (max, s)": _seconds(k["recovery_s_max"]),
            "limit (s)": _seconds(k["limit_s_min"]),
            "failed": _statuses(k["failed_by_status"]),
            "wrong": k["wrong"],
            "unanswered": k["unanswered"],
            "recovered within limit": f"{k['recovered']} of {k['rounds']}",
        }
        for k in result["kinds"]
    ]
    sections = [
        markdown_table(
            "Chaos: faults injected while serving", paragraphs, ["check", "goal", "value"], result["checks"]
        ),
        markdown_table("Per fault kind", [], list(kinds[0]), kinds, level=2),
    ]
    for kind in result["kinds"]:
        rows = [
            {
                "round": f["round"],
                "at (s)": f"{f['at_s']:.0f}",
                "target": f"skipped: {f['skipped']}" if f["skipped"] else f["target"],
                "detected (s)": _seconds(f["detected_s"]),
                "healed (s)": _seconds(f["healed_s"]),
                "recovered (s)": _seconds(f["recovery_s"]),
                "limit (s)": _seconds(f["limit_s"]),
                "requests": f["requests"],
                "failed": _statuses(f["failed_by_status"]),
                "wrong": f["wrong"],
                "unanswered": f["unanswered"],
                "notes": "; ".join(f["notes"]).replace("|", "/"),
            }
            for f in result["faults"]
            if f["kind"] == kind["kind"]
        ]
        if rows:  # none when serve.py ended before this kind's turn
            sections.append(markdown_table(kind["kind"], [], list(rows[0]), rows, level=3))
    timeline = "\n".join(f"    [{line['at_s']:7.1f} s] {line['text']}" for line in result["serve_lines"])
    sections.append(
        f"## What serve.py said\n\nIts own lines (not the API's request logs), from its start:\n\n{timeline}\n"
    )
    return "\n".join(sections)
