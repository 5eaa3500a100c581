"""``make chaos``'s short version: scripts/serve.py on the tiny stand-in under load while a stub, tritonserver and
the API are killed, one round each: no wrong answer, none unanswered, every fault recovered within the issue's
limit, serve.py still running and leaving no process behind (the full run: make chaos). Then the run's
bookkeeping without a server: how an answer is judged, when a fault counts as recovered, the schedule."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading

import pytest

from benchmarks.chaos import schedule
from benchmarks.lib.chaos_faults import KINDS, STUB_KILL, TRITON_HEALED, TRITON_KILL, Injection, took_triton_down
from benchmarks.lib.chaos_report import fault_figures, recovery_limit_s
from benchmarks.lib.chaos_serve import Line, Served
from benchmarks.lib.load import FAILED, OK, UNANSWERED, WRONG, Expected, Outcome, judge
from pipeline_src import PROJECT_ROOT

SHORT_RUN = ("stub-kill:captioner", "tritonserver-kill", "api-kill")


@pytest.mark.integration
def test_a_short_chaos_run_heals_every_fault_with_no_wrong_or_lost_answer(model_repository, tmp_path):
    command = [
        *(sys.executable, "-m", "benchmarks.chaos", "--allow-dirty", "--repository", str(model_repository)),
        *("--rounds", "1", "--kinds", *SHORT_RUN, "--concurrency", "2", "--photos", "6"),
        *("--warmup", "2", "--gap", "1", "--cap", "120"),
        # A request the killed stub owed ends at the API's deadline (docs/reliability.md): 15 s, not 60, so that
        # even with both workers held a correct answer follows within the stub's 30 s recovery limit.
        *("--api-deadline", "15", "--deadline", "30"),
        *("--scratch", str(tmp_path / "scratch"), "--output-dir", str(tmp_path / "results")),
    ]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results" / "chaos.json").read_text())
    assert (result["wrong"], result["unanswered"], result["not_correct_before_first_fault"]) == (0, 0, 0)
    assert sorted(f["kind"] for f in result["faults"]) == sorted(SHORT_RUN)
    for fault in result["faults"]:
        assert fault["detected_s"] is not None and fault["healed_line"], fault
        assert fault["recovered"] and fault["recovery_s"] <= fault["limit_s"], fault
        assert (fault["wrong"], fault["unanswered"]) == (0, 0), fault
    assert result["answered_correctly"] > 0
    assert (result["serve_running_at_end"], result["serve_exit_code"], result["leftovers"]) == (True, 0, [])
    assert result["passed"] and (tmp_path / "results" / "chaos.md").read_text().count("### ") == len(SHORT_RUN)


APPLE = Expected("Vegetable/Fruit", 0.998, "a photo of vegetable/fruit, x")


def answer(**changes) -> dict:
    right = {"label": APPLE.label, "probability": APPLE.probability, "caption": APPLE.caption, "caption_status": "ok"}
    return right | changes


def test_an_answer_is_judged_against_its_own_photo_and_request():
    assert judge(200, answer(), "r1", "r1", APPLE)[0] == OK
    assert judge(200, answer(caption_status="low_confidence"), "r1", "r1", APPLE)[0] == OK  # still captioned
    assert judge(200, answer(label="Soup"), "r1", "r1", APPLE)[0] == WRONG
    assert judge(200, answer(probability=0.5), "r1", "r1", APPLE)[0] == WRONG
    assert judge(200, answer(caption="a photo of soup, y"), "r1", "r1", APPLE)[0] == WRONG
    assert judge(200, answer(), "r2", "r1", APPLE)[0] == WRONG  # another request's answer
    # Its own label, told that its caption failed: an error the caller sees, not a wrong answer.
    error = "captioner_error: Stub process 'captioner_0_0' is not healthy."
    assert judge(200, answer(caption="", caption_status=error), "r1", "r1", APPLE)[:2] == (
        FAILED,
        "200 captioner_error",
    )
    assert judge(503, {"detail": "not ready"}, "r1", "r1", APPLE)[:2] == (FAILED, "503")


def test_a_fault_is_recovered_at_the_first_correct_answer_after_the_last_failure():
    injection = Injection(TRITON_KILL, 1, 100.0, detected=Line(100.5, "d"))
    injection.healed = Line(106.0, "supervisor: tritonserver ready again in 5.5 s")
    window = [
        Outcome("a", 0, 99.0, 100.2, OK),  # in flight before the kill: not a recovery
        Outcome("b", 0, 100.1, 100.3, FAILED, "503"),
        Outcome("c", 0, 100.4, 104.0, FAILED, "503"),
        Outcome("d", 0, 104.5, 107.0, OK),
        Outcome("e", 0, 107.0, 108.0, OK),
    ]
    figures = fault_figures(injection, window, started=0.0)
    assert figures["recovery_s"] == pytest.approx(7.0) and figures["limit_s"] == pytest.approx(35.5)
    assert figures["recovered"] and figures["failed_by_status"] == {"503": 2}
    hung = Outcome("f", 0, 100.0, 175.0, UNANSWERED, "no answer")
    assert not fault_figures(injection, [*window, hung], started=0.0)["recovered"]  # past the limit
    slow_stub = Injection(STUB_KILL + "label", 1, 100.0)
    assert not fault_figures(slow_stub, [Outcome("g", 0, 100.0, 131.0, OK)], started=0.0)["recovered"]  # over 30 s


def test_a_request_the_killed_stub_held_until_the_deadline_is_noted_and_read_past():
    # Triton 2.51 never ends a request whose answer a dead stub's response sender owed: the API ends it at its deadline.
    injection = Injection(STUB_KILL + "captioner", 1, 100.0, detected=Line(100.5, "d"))
    window = [
        Outcome("a", 0, 99.5, 160.0, FAILED, "504"),  # in the stub's loop when it died
        Outcome("b", 0, 100.6, 101.0, FAILED, "503"),  # refused while it healed
        Outcome("c", 0, 103.0, 104.0, OK),
    ]
    figures = fault_figures(injection, window, started=0.0)
    assert figures["recovered"] and figures["recovery_s"] == pytest.approx(4.0)
    assert (
        figures["failed_by_status"] == {"503": 1, "504": 1}
        and "ended at the API's deadline (504)" in figures["notes"][0]
    )
    sent_after = Outcome("d", 0, 101.0, 161.0, FAILED, "504")  # sent after the kill: counts against the heal
    assert not fault_figures(injection, [*window, sent_after], started=0.0)["recovered"]


def test_a_stub_whose_death_took_tritonserver_down_is_healed_by_its_restart():
    # Triton 2.51's python backend may abort when a stub dies holding their shared lock (now and then, under load).
    served = Served.__new__(Served)  # its lines alone: no serve.py
    served._lock = threading.Lock()
    served.lines = [
        Line(99.0, "watchdog: captioner: stub captioner_0_0 gone: unloaded, loading it again"),  # an earlier fault
        Line(100.8, "supervisor: tritonserver killed by SIGABRT; restarting it (1 in a row of at most 5)"),
        Line(106.0, "supervisor: tritonserver ready again in 5.2 s"),
    ]
    injection = Injection(STUB_KILL + "captioner", 1, 100.0, detect=("watchdog: captioner: ", "stub "))
    took_triton_down(injection, served)
    assert injection.detected == served.lines[1] and injection.heal == (TRITON_HEALED,)
    assert "lock_exception" in injection.notes[0]
    injection.healed = served.lines[2]
    assert recovery_limit_s(injection) == 5.2 + 30


def test_the_schedule_has_every_kind_its_rounds_in_a_seeded_order():
    first, again = schedule(list(KINDS), 3, random.Random(7)), schedule(list(KINDS), 3, random.Random(7))
    assert first == again and len(first) == 3 * len(KINDS)
    assert all(sorted(r for k, r in first if k == kind) == [1, 2, 3] for kind in KINDS)
    assert first != schedule(list(KINDS), 3, random.Random(8))
