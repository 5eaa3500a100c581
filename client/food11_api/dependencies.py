"""What the routes take from the app through ``Depends``: the Triton client, made once by ``create_app``, and the
caller a key named. Tests override ``get_client`` to put a fake behind the routes.
``async def``: FastAPI runs a plain ``def`` dependency in a worker thread, a hop per request for an attribute."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from food11_api.callers import API_KEY_HEADER
from food11_client import AsyncFood11Client


async def get_client(request: Request) -> AsyncFood11Client:
    return request.app.state.client


Client = Annotated[AsyncFood11Client, Depends(get_client)]


# The two ways to present a caller key, as OpenAPI security schemes: Swagger UI's Authorize button fills
# either. auto_error=False: CallerKeyMiddleware has checked the key already, before the body was read.
bearer_key = HTTPBearer(scheme_name="CallerKeyBearer", description="Authorization: Bearer <key>", auto_error=False)
header_key = APIKeyHeader(
    name=API_KEY_HEADER, scheme_name="CallerKeyHeader", description=f"{API_KEY_HEADER}: <key>", auto_error=False
)


async def get_caller(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_key)],
    _header: Annotated[str | None, Security(header_key)],
) -> str | None:
    """The name of the caller whose key the request presented; None with keys off. Routes that need a key
    (with keys on) depend on it, which is what documents the key in their OpenAPI operations."""
    return getattr(request.state, "caller", None)
