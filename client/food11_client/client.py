"""Call the ``food11_pipeline`` ensemble over gRPC: raw image bytes in, one result per image out."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions
from tritonclient.utils import InferenceServerException

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_MODEL = "food11_pipeline"
OUTPUTS = ("LABEL", "PROBABILITY", "CAPTION", "CAPTION_STATUS")


def channel_args(lb_policy: str = "round_robin") -> list[tuple[str, object]]:
    """tritonclient's own channel defaults, plus two choices for a service that must keep answering.

    - ``round_robin``: each request goes to the next address the target resolves to. With one address it
      changes nothing; with a Kubernetes headless Service (``dns:///food11-triton:8001``, one address per
      Triton pod) it balances per request, where a ClusterIP Service would pin the one connection to a pod.
    - A short reconnect backoff: gRPC waits up to 120 s between reconnect attempts by default, so a
      Triton that comes back would go unused for minutes; here within about a second.
    """
    keepalive = KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.lb_policy_name", lb_policy),
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]


@dataclass(frozen=True)
class CaptionResult:
    label: str
    probability: float
    caption: str
    caption_status: str  # "ok", "low_confidence", "captioner_timeout: ...", "captioner_error: ..."

    def to_dict(self) -> dict:
        return asdict(self)


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
    """The call did not finish within its deadline."""


_ERRORS_BY_STATUS = {
    "StatusCode.INVALID_ARGUMENT": InvalidImageError,
    "StatusCode.UNAVAILABLE": ServerUnavailableError,
    "StatusCode.NOT_FOUND": ServerUnavailableError,
    "StatusCode.DEADLINE_EXCEEDED": DeadlineExceededError,
}


def _translate(exc: InferenceServerException) -> PipelineError:
    status = exc.status()
    return _ERRORS_BY_STATUS.get(status, PipelineError)(exc.message() or str(exc), status)


def _inputs(module, images: Sequence[bytes]) -> list:
    if not images:
        raise ValueError("no images to caption")
    tensor = module.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    return [tensor]


def _outputs(module) -> list:
    return [module.InferRequestedOutput(name) for name in OUTPUTS]


def _results(response) -> list[CaptionResult]:
    labels, probabilities, captions, statuses = (response.as_numpy(name).reshape(-1) for name in OUTPUTS)
    return [
        CaptionResult(label.decode(), float(probability), caption.decode(), status.decode())
        for label, probability, caption, status in zip(labels, probabilities, captions, statuses)
    ]


class Food11Client:
    """Blocking client. ``caption([jpeg_bytes, png_bytes])`` -> one ``CaptionResult`` per image, in order.
    ``url`` is any gRPC target: ``host:port``, ``dns:///host:port``, ``ipv4:a:port,b:port``."""

    def __init__(self, url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, timeout_s: float | None = None,
                 lb_policy: str = "round_robin"):
        self.model = model
        self.timeout_s = timeout_s
        self._client = grpcclient.InferenceServerClient(url, channel_args=channel_args(lb_policy))

    def caption(self, images: Sequence[bytes]) -> list[CaptionResult]:
        try:
            response = self._client.infer(self.model, _inputs(grpcclient, images), outputs=_outputs(grpcclient),
                                          client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise _translate(exc) from exc
        return _results(response)

    def is_ready(self) -> bool:
        try:
            return self._client.is_model_ready(self.model)
        except InferenceServerException:
            return False

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Food11Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class AsyncFood11Client:
    """asyncio client: one channel, many concurrent ``await caption(...)`` calls."""

    def __init__(self, url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, timeout_s: float | None = None,
                 lb_policy: str = "round_robin"):
        self.model = model
        self.timeout_s = timeout_s
        self._client = grpcclient_aio.InferenceServerClient(url, channel_args=channel_args(lb_policy))

    async def caption(self, images: Sequence[bytes], timeout_s: float | None = None) -> list[CaptionResult]:
        try:
            response = await self._client.infer(self.model, _inputs(grpcclient_aio, images),
                                                outputs=_outputs(grpcclient_aio),
                                                client_timeout=timeout_s or self.timeout_s)
        except InferenceServerException as exc:
            raise _translate(exc) from exc
        return _results(response)

    async def is_ready(self) -> bool:
        try:
            return await self._client.is_model_ready(self.model)
        except InferenceServerException:
            return False

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> "AsyncFood11Client":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
