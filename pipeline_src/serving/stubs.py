"""The Python-backend stub processes of a running tritonserver, read from /proc: one per model instance, a child
of the server, its command line naming the model's ``model.py`` and the instance (``captioner_0_0``).

Triton 2.51 neither restarts a stub that died nor marks its model unready (python_backend r24.10, and r25.08
alike: every request to it fails after a second with "Stub process '<instance>' is not healthy"), so the
watchdog reads them here: cheap (no request), and it sees a stopped stub (SIGSTOP) as well as a gone one.
Linux only, as Triton is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
STUB_BINARY = "triton_python_backend_stub"
# /proc/<pid>/stat states: R running, S sleeping, D disk sleep, T stopped, t traced, Z zombie, X dead
STOPPED, ZOMBIE = ("T", "t"), ("Z", "X")


@dataclass(frozen=True)
class Stub:
    pid: int
    model: str  # the model folder's name: <repository>/<model>/<version>/model.py
    instance: str  # Triton's instance name, e.g. captioner_0_0
    state: str  # /proc/<pid>/stat's state letter

    @property
    def alive(self) -> bool:
        return self.state not in STOPPED + ZOMBIE


def parse_stub(pid: int, arguments: list[str], state: str) -> Stub | None:
    """A model instance's stub from its command line, or None: another process, or the short-lived stub Triton
    starts while loading a model to complete its config (python_backend's AUTOCOMPLETE_STUB, named after the
    model alone, stub_launcher.cc), which is nobody's instance."""
    if not arguments or not arguments[0].endswith(STUB_BINARY) or len(arguments) < 2:
        return None
    model = Path(arguments[1]).parent.parent.name  # <repository>/<model>/<version>/model.py
    instance = next((a for a in arguments[2:] if re.fullmatch(rf"{re.escape(model)}_\d+_\d+", a)), None)
    return Stub(pid, model, instance, state) if instance else None


def _children(parent_pid: int, proc: Path) -> Iterator[tuple[Path, str]]:
    """(its /proc folder, its state) for each child of ``parent_pid``, as they are now."""
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            text = (pid_dir / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
        state, parent = text[text.rindex(")") + 2 :].split()[:2]
        if int(parent) == parent_pid:
            yield pid_dir, state


def zombie_children(parent_pid: int, proc: Path = PROC) -> list[int]:
    """The children of ``parent_pid`` that have exited and wait to be collected."""
    return [int(pid_dir.name) for pid_dir, state in _children(parent_pid, proc) if state in ZOMBIE]


def stubs_of(server_pid: int, proc: Path = PROC) -> list[Stub]:
    """The stub processes whose parent is ``server_pid``, as they are now."""
    found = []
    for pid_dir, state in _children(server_pid, proc):
        try:
            arguments = (pid_dir / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if stub := parse_stub(int(pid_dir.name), [a for a in arguments if a], state):
            found.append(stub)
    return found
