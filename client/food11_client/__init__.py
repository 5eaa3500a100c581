"""gRPC clients (sync and asyncio) and a CLI for the Food-11 captioning ensemble."""

from food11_client.client import (
    AsyncFood11Client,
    CaptionResult,
    DeadlineExceededError,
    Food11Client,
    InvalidImageError,
    OutputSpec,
    OverloadedError,
    PipelineError,
    ServedModel,
    ServerUnavailableError,
)

__all__ = [
    "AsyncFood11Client",
    "CaptionResult",
    "DeadlineExceededError",
    "Food11Client",
    "InvalidImageError",
    "OutputSpec",
    "OverloadedError",
    "PipelineError",
    "ServedModel",
    "ServerUnavailableError",
]
