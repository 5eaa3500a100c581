"""How a failure becomes an HTTP answer (the exception handlers), and how those answers are documented
(``ERROR_RESPONSES``, the routes' ``responses=``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from food11_api.middleware import error_response, over_capacity_response, retry_later_response
from food11_api.schemas import ErrorResponse
from food11_client import (
    DeadlineExceededError,
    InvalidImageError,
    OverloadedError,
    PipelineError,
    ServerUnavailableError,
    StepUnavailableError,
)

log = logging.getLogger("food11_api")

REQUEST_ID_EXAMPLE = "3f2b9c0d6e1a4b7c8d9e0f1a2b3c4d5e"
STATUS_BY_ERROR = {InvalidImageError: 400, ServerUnavailableError: 503, DeadlineExceededError: 504}
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that closed the connection before the answer


class ClientDisconnected(Exception):
    """The HTTP client closed its connection while the pipeline was working for it."""


def _error_doc(description: str, detail: str) -> dict:
    example = {"detail": detail, "request_id": REQUEST_ID_EXAMPLE}
    return {"model": ErrorResponse, "description": description, "content": {"application/json": {"example": example}}}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error_doc(
        "the photo is empty, undecodable, unsupported or too large in pixels",
        "in ensemble 'food11_pipeline', preprocess: image 1 of 1: cannot decode: not a JPEG, PNG, WebP, "
        "BMP or GIF image",
    ),
    413: _error_doc("the request body is over the upload limit", "request body over the 10485760-byte upload limit"),
    422: {"description": "malformed request body"},
    500: _error_doc(
        "unexpected failure; the request id is in the log", f"internal error (request id {REQUEST_ID_EXAMPLE})"
    ),
    503: _error_doc(
        "over capacity (this API's adaptive in-flight limit, or a Triton step's queue; the Retry-After header "
        "says when to retry: the measured time to drain the requests in flight), or a model this route needs is "
        "not ready in Triton (healing or down: refused at once, naming it, with Retry-After), or Triton is "
        "unreachable or the ensemble is not loaded",
        "over capacity: this API serves 8 requests, as many as it answers within 30 s at the measured "
        "0.281 per second; retry after 29 s",
    ),
    504: _error_doc("the pipeline did not answer within the deadline", "Deadline Exceeded"),
}
# What the routes that only ask Triton can answer besides 200.
TRITON_DOWN: dict[int | str, dict[str, Any]] = {503: ERROR_RESPONSES[503]}
# /readyz's 503.
NOT_READY: dict[int | str, dict[str, Any]] = {
    503: _error_doc(
        "Triton is unreachable, or the ensemble or a model it is built from is not ready: the detail names each",
        "not ready: captioner (not ready in Triton)",
    )
}
# With caller keys on (FOOD11_API_KEYS_FILE), every route that needs one.
UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: _error_doc(
        "no caller key, or not a known one (Authorization: Bearer <key>, or X-API-Key: <key>); answered before "
        "the body is read, with a WWW-Authenticate header",
        "unknown caller key",
    )
}


def _where(request: Request) -> str:
    return f"request {request.state.request_id}: {request.method} {request.url.path}"


async def pipeline_error(request: Request, exc: PipelineError) -> JSONResponse:
    status = next((code for kind, code in STATUS_BY_ERROR.items() if isinstance(exc, kind)), 500)
    if isinstance(exc, OverloadedError):  # Triton's queue refused it: the same answer as our own cap
        request.app.state.refusals.count("triton")
        log.info("%s -> 503 (Triton over capacity): %s", _where(request), exc)
        return over_capacity_response(str(exc), request.state.request_id, request.app.state.admission.retry_after_s())
    if isinstance(exc, StepUnavailableError):  # a step's process died: the server's watchdog is healing it
        request.app.state.refusals.count("step_down")
        retry_after = request.app.state.settings.step_down_retry_after_s
        log.warning("%s -> 503 (a step is healing): %s", _where(request), exc)
        detail = f"{exc}: the step is being restarted, retry later"
        return retry_later_response(detail, request.state.request_id, retry_after)
    if isinstance(exc, DeadlineExceededError) and exc.still_running is not None:
        request.state.still_running = exc.still_running  # admission holds the request's place until it ends
    log_call = log.warning if status < 500 else log.error
    log_call("%s -> %d: %s", _where(request), status, exc)
    return error_response(status, str(exc), request.state.request_id)


async def client_disconnected(request: Request, _exc: ClientDisconnected) -> Response:
    fate = (
        "was cancelled"
        if await request.app.state.client.cancels_calls()
        else "runs to its end (this Triton cannot cancel it safely) and its answer is dropped"
    )
    log.info("%s: the client disconnected; its Triton call %s", _where(request), fate)
    return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody reads it; it is what logs and metrics count


async def unexpected_error(request: Request, _exc: Exception) -> JSONResponse:
    log.exception("%s -> 500", _where(request))
    request_id = request.state.request_id
    return error_response(500, f"internal error (request id {request_id})", request_id)


EXCEPTION_HANDLERS: dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]] = {
    PipelineError: pipeline_error,
    ClientDisconnected: client_disconnected,
    Exception: unexpected_error,
}
