"""Stop working for a client that has gone: the awaited caption is cancelled, and with it the Triton request
where Triton survives a cancellation (food11_client/cancellation.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that closed the connection before the answer


class ClientDisconnected(Exception):
    """The HTTP client closed its connection while the pipeline was working for it."""


async def _until_disconnected(request: Request) -> None:
    """Returns once the client has closed its connection. The endpoint runs after its body was read, so the
    next ASGI message is ``http.disconnect``, which the server delivers as soon as it sees the close (a poll
    of ``is_disconnected`` every 0.25 s missed a client that left before a short call ended)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``await work``, unless the client disconnects first: then ``work`` is cancelled and
    ClientDisconnected raised. A caption takes seconds on a CPU; nobody should wait on it for no one."""
    call = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        done, _ = await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not call.done():
            call.cancel()
    if call in done:
        return call.result()
    raise ClientDisconnected
