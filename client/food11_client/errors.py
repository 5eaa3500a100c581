"""The client's errors, and how a Triton (gRPC) error becomes one of them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tritonclient.utils import InferenceServerException

from pipeline_src import contract
from pipeline_src.contract import refused_under_load

RETRY_AFTER_S = 2  # a queue of a few batches drains in about that long on a CPU; sooner on a GPU

DEADLINE_EXCEEDED = "StatusCode.DEADLINE_EXCEEDED"


class PipelineError(RuntimeError):
    """The pipeline could not answer; ``status`` is the gRPC status Triton gave."""

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status


class InvalidImageError(PipelineError):
    """A photo was refused (INVALID_ARG); the message names the step, the image and the reason."""


class ServerUnavailableError(PipelineError):
    """Triton could not be reached, or the pipeline is not loaded."""


class DeadlineExceededError(PipelineError):
    """The call did not finish within its deadline. ``still_running``: the call itself, where Triton cannot
    cancel it (it runs to its end there, holding its place); None where it was cancelled."""

    still_running: asyncio.Future | None = None


class OverloadedError(ServerUnavailableError):
    """Triton refused the call at once because a step's queue is full (or it waited in it past the step's
    queue timeout): the server is over capacity. Retry later (``RETRY_AFTER_S``), or elsewhere."""


class StepUnavailableError(ServerUnavailableError):
    """A step's process died (Triton: "Stub process '<instance>' is not healthy"): the server's watchdog heals it
    in seconds (pipeline_src/serving/watchdog.py). Retry later."""


_ERRORS_BY_STATUS = {
    "StatusCode.INVALID_ARGUMENT": InvalidImageError,
    "StatusCode.UNAVAILABLE": ServerUnavailableError,
    "StatusCode.NOT_FOUND": ServerUnavailableError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
}


def translate(exc: InferenceServerException, deadline_spent: bool = False) -> PipelineError:
    """``deadline_spent``: the caller's time ran out before this came; a queue's timeout is then the request's
    own (the caller's deadline, which every call carries), not overload."""
    status, message = exc.status(), exc.message() or str(exc)
    # UNAVAILABLE also means "server down": Triton's queue refusal (forwarded by caption_with_label when the
    # captioner refused) is in the text.
    if status == "StatusCode.UNAVAILABLE" and refused_under_load(message):
        if deadline_spent and contract.QUEUE_TIMED_OUT in message:
            return DeadlineExceededError(f"no answer within the deadline: {message}", DEADLINE_EXCEEDED)
        return OverloadedError(message, status)
    if contract.STUB_DEAD in message:
        return StepUnavailableError(message, status)
    return _ERRORS_BY_STATUS.get(status, PipelineError)(message, status)


@contextmanager
def triton_errors(timeout_s: float | None = None, started: float | None = None) -> Iterator[None]:
    """Raise a Triton error of the block as a ``PipelineError``. ``timeout_s``: the call's deadline, counted from
    ``started`` (by default, from entering the block), which tells a queue's timeout by it from overload."""
    started = time.monotonic() if started is None else started
    try:
        yield
    except InferenceServerException as exc:
        spent = timeout_s is not None and time.monotonic() - started >= timeout_s
        raise translate(exc, spent) from exc


def given_up(timeout_s: float, server_version: str) -> DeadlineExceededError:
    """The error of a call whose deadline passed on a Triton that cannot cancel it (cancellation.py): it runs on."""
    return DeadlineExceededError(
        f"no answer within the deadline of {timeout_s:g} s; the call runs on inside Triton {server_version}, "
        "which cannot cancel it safely (it is answered and dropped)",
        DEADLINE_EXCEEDED,
    )
