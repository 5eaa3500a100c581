"""gRPC clients (sync and asyncio) and a CLI for the Food-11 captioning ensemble."""

from food11_client.async_client import AsyncFood11Client
from food11_client.errors import (
    RETRY_AFTER_S,
    DeadlineExceededError,
    InvalidImageError,
    OverloadedError,
    PipelineError,
    ServerUnavailableError,
    StepUnavailableError,
)
from food11_client.results import CaptionResult, Classification, OutputSpec, ServedModel
from food11_client.sync_client import Food11Client

__all__ = [
    "RETRY_AFTER_S",
    "AsyncFood11Client",
    "CaptionResult",
    "Classification",
    "DeadlineExceededError",
    "Food11Client",
    "InvalidImageError",
    "OutputSpec",
    "OverloadedError",
    "PipelineError",
    "ServedModel",
    "ServerUnavailableError",
    "StepUnavailableError",
]
