"""The supervisor's bookkeeping without servers: reading a stub's command line, naming how a process ended,
the restart budget that turns a crash loop into a stop with its reason (at once, under a limit of 0: the Triton
container's), and the shared memory a killed server's stubs leave behind."""

from pathlib import Path

import pytest

from pipeline_src.serving.launcher import TritonServer, remove_shared_memory
from pipeline_src.serving.stubs import parse_stub
from pipeline_src.serving.supervisor import CrashLoop, NotRestarted, RestartBudget, exit_cause

# As /proc/<pid>/cmdline gives a Python-backend stub of tritonserver 2.51 (NUL-separated).
STUB_ARGUMENTS = [
    "/work/backends/python/triton_python_backend_stub",
    "/models/captioner/1/model.py",
    "triton_python_backend_shm_region_6b0c",
    "1048576",
    "1048576",
    "4242",
    "/work/backends/python",
    "336",
    "captioner_0_1",
    "DEFAULT",
]


def test_a_stub_is_read_from_its_command_line():
    stub = parse_stub(77, STUB_ARGUMENTS, "S")
    assert (stub.pid, stub.model, stub.instance, stub.alive) == (77, "captioner", "captioner_0_1", True)
    assert not parse_stub(77, STUB_ARGUMENTS, "T").alive and not parse_stub(77, STUB_ARGUMENTS, "Z").alive


def test_other_processes_are_not_stubs():
    assert parse_stub(1, ["/usr/bin/python3", "-m", "food11_api"], "S") is None
    assert parse_stub(1, [], "S") is None
    # The stub Triton starts while loading a model, to complete its config: named after the model, no instance's.
    autocomplete = [argument if argument != "captioner_0_1" else "captioner" for argument in STUB_ARGUMENTS]
    assert parse_stub(1, autocomplete, "S") is None


@pytest.mark.parametrize(
    "returncode, cause",
    [(-9, "killed by SIGKILL"), (-11, "killed by SIGSEGV"), (1, "exited with status 1"), (None, "still running")],
)
def test_exit_causes_are_named(returncode, cause):
    assert exit_cause(returncode) == cause


def test_the_budget_allows_its_limit_in_a_row_then_stops_with_the_reason():
    clock = [0.0]
    budget = RestartBudget("tritonserver", limit=2, now=lambda: clock[0])
    assert budget.spend("killed by SIGKILL") == 1
    budget.came_back()
    clock[0] = 30  # dies again 30 s after coming back: in a row
    assert budget.spend("killed by SIGKILL") == 2
    budget.came_back()
    clock[0] = 91  # up 61 s: a new fault, not the same loop
    assert budget.spend("killed by SIGKILL") == 1
    budget.came_back()
    clock[0] = 92
    assert budget.spend("exited with status 1") == 2  # did not come back since: still in a row
    with pytest.raises(CrashLoop, match=r"tritonserver died 3 times in a row, each within 60 s .*last: exited"):
        budget.spend("exited with status 1")


def test_a_limit_of_zero_restarts_nothing_and_says_why():
    budget = RestartBudget("tritonserver", limit=0)
    with pytest.raises(NotRestarted, match=r"^tritonserver killed by SIGKILL; restart limit 0: not restarted here$"):
        budget.spend("killed by SIGKILL")


def test_each_server_names_its_stubs_shared_memory_and_removes_what_a_kill_left(tmp_path):
    server, other = (TritonServer(tmp_path / "models", tmp_path / "work", binary=Path("tritonserver")) for _ in "ab")
    assert server.shm_prefix != other.shm_prefix
    assert f"--backend-config=python,shm-region-prefix-name={server.shm_prefix}" in server.command()
    shm = tmp_path / "shm"
    shm.mkdir()
    left = [shm / f"{server.shm_prefix}{n}b09d-41c3" for n in range(3)]
    kept = [shm / f"{other.shm_prefix}77a1", shm / "triton_python_backend_shm_region_5e0f", shm / "sem.other"]
    for region in left + kept:
        region.write_bytes(b"\0" * 16)
    assert remove_shared_memory(server.shm_prefix, shm) == 3
    assert sorted(shm.iterdir()) == sorted(kept)


def test_a_prefix_the_flags_name_is_left_to_the_caller(tmp_path):
    flag = "--backend-config=python,shm-region-prefix-name=mine_"
    server = TritonServer(tmp_path / "models", tmp_path / "work", binary=Path("tritonserver"), extra_args=(flag,))
    assert server.shm_prefix is None
    assert [a for a in server.command() if "shm-region-prefix-name" in a] == [flag]
