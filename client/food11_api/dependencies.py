"""What the routes take from the app through ``Depends``: the Triton client, the settings and the answers
counter, all made once by ``create_app``. Tests override ``get_client`` to put a fake behind the routes.
``async def``: FastAPI runs a plain ``def`` dependency in a worker thread, a hop per request for an attribute."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from food11_api.metrics import ModelAnswers
from food11_api.settings import ApiSettings
from food11_client import AsyncFood11Client


async def get_client(request: Request) -> AsyncFood11Client:
    return request.app.state.client


async def get_settings(request: Request) -> ApiSettings:
    return request.app.state.settings


async def get_model_answers(request: Request) -> ModelAnswers:
    return request.app.state.model_answers


Client = Annotated[AsyncFood11Client, Depends(get_client)]
Settings = Annotated[ApiSettings, Depends(get_settings)]
Answers = Annotated[ModelAnswers, Depends(get_model_answers)]
