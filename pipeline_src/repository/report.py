"""What a repository check found: problems, each an error or a warning about one model."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path


class Severity(str, Enum):
    ERROR = "ERROR"  # Triton would refuse the model, or the pipeline would fail at run time
    WARNING = "WARNING"  # worth a look, but serving works


@dataclass(frozen=True)
class Problem:
    severity: Severity
    model: str  # the model whose folder holds the fault ("<repository>" for the repository itself)
    message: str

    def __str__(self) -> str:
        return f"{self.severity.value} {self.model}: {self.message}"


@dataclass
class Report:
    repository: Path
    problems: list[Problem] = field(default_factory=list)
    models: list[str] = field(default_factory=list)  # the model folders found

    def error(self, model: str, message: str) -> None:
        self.problems.append(Problem(Severity.ERROR, model, message))

    def warning(self, model: str, message: str) -> None:
        self.problems.append(Problem(Severity.WARNING, model, message))

    @property
    def errors(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.severity is Severity.WARNING]

    @property
    def ok(self) -> bool:
        """No error (warnings allowed): Triton can load the repository."""
        return not self.errors

    def summary(self) -> str:
        warnings = f"{len(self.warnings)} warning(s)"
        if self.ok:
            return f"OK: {len(self.models)} model(s) in {self.repository} are consistent, {warnings}"
        return f"INVALID: {len(self.errors)} error(s), {warnings} in {len(self.models)} model(s) of {self.repository}"

    def text(self) -> str:
        """Every problem on its own line, then the summary."""
        return "\n".join([*map(str, self.problems), self.summary()])
