"""Pure ASGI middlewares: a request id and Server-Timing on every request, caller keys (when the operator asks
for them), a cap on request bodies, admission (a limit on requests in flight that follows the measured capacity,
with each caller's share of it), refusing at once a request that needs a model that is not ready."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp

from food11_api.admission import AdaptiveLimit
from food11_api.callers import API_KEY_HEADER, BEARER_HEADER, CallerKeys, presented_key
from food11_api.ensemble_graph import EnsembleCall
from food11_api.step_health import StepHealth, refusal_detail

log = logging.getLogger("food11_api")

REQUEST_ID_HEADER = b"x-request-id"
# A caller's id goes into logs and headers: only a plain token is taken (no control characters, no
# terminal escapes, no newlines to forge log lines); anything else gets a fresh id.
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def error_response(status: int, detail: str, request_id: str, **headers: str) -> JSONResponse:
    """Every error body of the API: ``{"detail": ..., "request_id": ...}``. The X-Request-ID header
    is added by RequestIdMiddleware, which wraps everything."""
    return JSONResponse({"detail": detail, "request_id": request_id}, status_code=status, headers=headers)


def retry_later_response(detail: str, request_id: str, retry_after_s: int) -> JSONResponse:
    """503 for a request that may succeed later (overload, a model not ready), saying when to retry."""
    return error_response(503, detail, request_id, **{"Retry-After": str(retry_after_s)})


def over_capacity_response(reason: str, request_id: str, retry_after_s: int) -> JSONResponse:
    """The API's answer under overload, whoever refused: 503, the reason, and when to retry."""
    return retry_later_response(f"over capacity: {reason}; retry after {retry_after_s} s", request_id, retry_after_s)


def unauthorized_response(key_given: bool, request_id: str) -> JSONResponse:
    """401 for a request without a known caller key, answered before its body is read. The connection stays
    open: uvicorn discards what the client still sends, and the client reads its 401 (closing the socket with
    an upload arriving resets the connection, and the client never sees why)."""
    if key_given:
        detail, challenge = "unknown caller key", 'Bearer realm="food11_api", error="invalid_token"'
    else:
        detail = f"a caller key is required: send {BEARER_HEADER}: Bearer <key> or {API_KEY_HEADER}: <key>"
        challenge = 'Bearer realm="food11_api"'
    return error_response(401, detail, request_id, **{"WWW-Authenticate": challenge})


def _request_id(scope) -> str:
    return scope.setdefault("state", {}).get("request_id", "")


@dataclass
class RequestIdMiddleware:
    """Takes the caller's X-Request-ID if it is a plain token (else makes one), puts it in ``request.state``
    and the response. Adds ``app;dur=<ms>`` (request received to response started) to the Server-Timing
    header, beside the ``triton;dur=`` the endpoints set: together they split a request's time into pipeline,
    API and network."""

    app: ASGIApp

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER, b"").decode("latin-1")
        request_id = given if SAFE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id_and_timing(message):
            if message["type"] == "http.response.start":
                timing = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
                message.setdefault("headers", [])  # optional in ASGI (Starlette's responses always send them)
                headers = MutableHeaders(scope=message)
                earlier = headers.get("Server-Timing")  # the endpoint's triton;dur=
                headers["Server-Timing"] = timing if earlier is None else f"{earlier}, {timing}"
                message["headers"].append((REQUEST_ID_HEADER, request_id.encode()))
            await send(message)

        await self.app(scope, receive, send_with_id_and_timing)


@dataclass
class BodySizeLimitMiddleware:
    """413 for bodies over ``max_bytes``: at once from Content-Length, without reading the body;
    for chunked bodies, as soon as the bytes received pass the limit."""

    app: ASGIApp
    max_bytes: int

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = error_response(
            413, f"request body over the {self.max_bytes}-byte upload limit", _request_id(scope), connection="close"
        )
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await too_large(scope, receive, send)
        if length is not None:  # the server stops reading at Content-Length
            return await self.app(scope, receive, send)
        # Chunked: buffer up to the limit, then replay to the app.
        messages, received = [], 0
        while True:
            message = await receive()
            messages.append(message)
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                return await too_large(scope, receive, send)
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


@dataclass
class CallerKeyMiddleware:
    """Every request but those to ``open_paths`` (or under ``open_prefixes``) must present a known caller key
    (callers.py); without one, 401 before anything else looks at it, its body unread. The caller's name goes
    into ``request.state.caller``, where admission counts its share."""

    app: ASGIApp
    keys: CallerKeys
    open_paths: frozenset[str]
    open_prefixes: tuple[str, ...] = ()

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.open_paths or path.startswith(self.open_prefixes):
            return await self.app(scope, receive, send)
        key = presented_key(dict(scope["headers"]))
        caller = None if key is None else self.keys.caller(key)
        if caller is None:
            request_id, why = _request_id(scope), "unknown key" if key else "no key"
            log.info("request %s: %s %s -> 401: %s", request_id, scope["method"], path, why)
            return await unauthorized_response(key is not None, request_id)(scope, receive, send)
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


@dataclass
class AdmissionMiddleware:
    """Requests to ``paths`` up to the adaptive limit (admission.py); past it, 503 at once, before the body is
    read, with ``Retry-After`` the measured drain time: an API over capacity sheds load instead of queueing it
    until the deadline. A request given up at its deadline whose Triton call runs on (Triton 2.51 cannot cancel)
    keeps its place until that call ends.
    The time a request was let in goes into ``request.state.admitted_at``, where the deadline of its Triton
    call counts from. With caller keys, a caller past its share of the limit is refused the same way
    (``request.state.caller``, set by CallerKeyMiddleware).
    ``refused`` is called for each refusal with what was full (the metric's ``by``): ``api``, the limit;
    ``caller_share``, the caller's share of it."""

    app: ASGIApp
    limit: AdaptiveLimit
    paths: frozenset[str]
    refused: Callable[[str], None]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)
        caller = scope.setdefault("state", {}).get("caller")
        admitted = self.limit.try_admit(caller)
        if admitted is None:
            self.refused(self.limit.refused_by(caller))
            why = self.limit.why_full(caller)
            response = over_capacity_response(why, _request_id(scope), self.limit.retry_after_s())
            return await response(scope, receive, send)
        scope["state"]["admitted_at"] = admitted.at
        status = 0

        async def send_with_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            still_running = scope["state"].get("still_running")
            if still_running is not None and not still_running.done():
                # Past its deadline, but running on inside a Triton that cannot cancel it: it still takes
                # the pipeline's time, so it keeps its place until it ends, and counts as that slow.
                still_running.add_done_callback(lambda _: self.limit.finished(admitted, out_of_time=True))
            else:
                self.limit.finished(admitted, answered=status == 200, out_of_time=status == 504)


@dataclass
class StepHealthMiddleware:
    """A request to one of ``calls_by_path``'s routes that needs a model the last look found not ready
    (step_health.py; the ensemble the route calls and the outputs it names say which models it needs) gets 503 at
    once, before admission and before its body is read, naming the models, with ``Retry-After``: Triton could
    only fail it (an ensemble without a step) or answer it degraded (a caption without a captioner). A route that
    needs none of them is let through. ``refused`` is called with ``step_down`` for each refusal (the metric's
    ``by``)."""

    app: ASGIApp
    health: StepHealth
    calls_by_path: Mapping[str, EnsembleCall]
    retry_after_s: int
    refused: Callable[[str], None]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.calls_by_path:
            return await self.app(scope, receive, send)
        down = await self.health.confirmed_down(self.calls_by_path[scope["path"]])
        if not down:
            return await self.app(scope, receive, send)
        self.refused("step_down")
        response = retry_later_response(refusal_detail(down), _request_id(scope), self.retry_after_s)
        return await response(scope, receive, send)
