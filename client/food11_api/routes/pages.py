"""The pages a person opens: / (the photo page) and /docs (Swagger UI, its assets served by this API from
the swagger-ui-py wheel, not from a CDN: /docs works offline). Not in the OpenAPI schema, and open without a
caller key: they hold no data, and Swagger's Authorize button is where a person enters the key."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

INDEX_HTML = files("food11_api").joinpath("index.html").read_text(encoding="utf-8")
SWAGGER_UI_PATH = "/swagger-ui"
SWAGGER_UI_DIR = Path(str(files("swagger_ui").joinpath("static")))  # an installed wheel: a real folder

router = APIRouter(include_in_schema=False)
router.mount(SWAGGER_UI_PATH, StaticFiles(directory=SWAGGER_UI_DIR), name="swagger-ui")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{SWAGGER_UI_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_UI_PATH}/swagger-ui.css",
        swagger_favicon_url="data:,",
    )


@router.get("/", response_class=HTMLResponse)
async def index() -> str:
    return INDEX_HTML


# Open without a caller key: the pages and the assets under the mount.
PAGE_PATHS = frozenset(route.path for route in router.routes if isinstance(route, APIRoute))
ASSETS_PREFIX = SWAGGER_UI_PATH + "/"
