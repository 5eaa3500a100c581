"""Call the ``food11_pipeline`` ensemble over gRPC: raw image bytes in, one result per image out."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions
from tritonclient.utils import InferenceServerException

from food11_client.cancellation import DRAIN_ON_CLOSE_S, cancels_safely, gave_up
from pipeline_src import contract
from pipeline_src.contract import CORE_OUTPUTS, MANIFESTS_MODEL, refused_under_load

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_MODEL = contract.ENSEMBLE


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
class ServedModel:
    """One model whose weights took part in an answer, as its build's manifest describes it."""

    model: str
    version: str
    kind: str  # "real", "stand-in" or "unknown" (files not built by scripts/build_models.py)
    sha256: str  # the first 16 hex digits of the manifest's hash: tells builds apart
    source: str  # where the weights came from
    warning: str = ""  # a stand-in's, in plain words


@dataclass(frozen=True)
class OutputSpec:
    """An output the ensemble declares beyond the core contract (a step someone added), as Triton's model
    metadata describes it."""

    name: str
    datatype: str  # Triton's: BYTES, FP32, INT64, BOOL, ...
    shape: tuple[int, ...]  # one row's, without the batch dimension; -1: any size


@dataclass(frozen=True)
class CaptionResult:
    label: str
    probability: float
    caption: str
    caption_status: str  # "ok", "low_confidence", "captioner_timeout: ...", "captioner_error: ..."
    models: tuple[ServedModel, ...] = ()
    # Every output the ensemble declares beyond the core contract, by name: this photo's row as JSON values
    # (a one-element row as its value, others as lists; BYTES as text). Empty for the shipped ensemble.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """What a user must know about this answer (a stand-in's words), each once."""
        return list(dict.fromkeys(model.warning for model in self.models if model.warning))

    def to_dict(self) -> dict:
        return {**asdict(self), "models": [asdict(model) for model in self.models], "warnings": self.warnings}


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


RETRY_AFTER_S = 2  # a queue of a few batches drains in about that long on a CPU; sooner on a GPU


_ERRORS_BY_STATUS = {
    "StatusCode.INVALID_ARGUMENT": InvalidImageError,
    "StatusCode.UNAVAILABLE": ServerUnavailableError,
    "StatusCode.NOT_FOUND": ServerUnavailableError,
    "StatusCode.DEADLINE_EXCEEDED": DeadlineExceededError,
}


def _translate(exc: InferenceServerException, deadline_spent: bool = False) -> PipelineError:
    """``deadline_spent``: the caller's time ran out before this came; a queue's timeout is then the request's
    own (the caller's deadline, which every call carries), not overload."""
    status, message = exc.status(), exc.message() or str(exc)
    # UNAVAILABLE also means "server down": Triton's queue refusal (forwarded by label_and_caption when the
    # captioner refused) is in the text.
    if status == "StatusCode.UNAVAILABLE" and refused_under_load(message):
        if deadline_spent and contract.QUEUE_TIMED_OUT in message:
            return DeadlineExceededError(f"no answer within the deadline: {message}", "StatusCode.DEADLINE_EXCEEDED")
        return OverloadedError(message, status)
    return _ERRORS_BY_STATUS.get(status, PipelineError)(message, status)


def _inputs(module, images: Sequence[bytes]) -> list:
    if not images:
        raise ValueError("no images to caption")
    tensor = module.InferInput(contract.IMAGE, [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    return [tensor]


def _outputs(module, extra: Sequence[OutputSpec]) -> list:
    return [module.InferRequestedOutput(name) for name in (*CORE_OUTPUTS, *(spec.name for spec in extra))]


def _extra_outputs(metadata) -> tuple[OutputSpec, ...]:
    """The outputs of a batched model's metadata beyond the core contract (their shapes lose the batch axis)."""
    return tuple(
        OutputSpec(output.name, output.datatype, tuple(int(size) for size in output.shape[1:]))
        for output in metadata.outputs
        if output.name not in CORE_OUTPUTS
    )


def _json_rows(rows: np.ndarray) -> list:
    """Each photo's row of an output as JSON values: BYTES as text, a one-element row as its value."""
    if rows.dtype == np.object_:
        rows = np.vectorize(lambda value: value.decode("utf-8", "replace"), otypes=[object])(rows)
    one_element = rows.shape[1:] == (1,)
    return [row[0] if one_element else row for row in rows.tolist()]


@functools.lru_cache(maxsize=8)
def _served_models(models_json: bytes) -> tuple[ServedModel, ...]:
    """Every row of every answer of one server carries the same string: parsed once."""
    known = {field.name for field in fields(ServedModel)}
    return tuple(
        ServedModel(**{key: value for key, value in entry.items() if key in known}) for entry in json.loads(models_json)
    )


def _results(response, extra: Sequence[OutputSpec]) -> list[CaptionResult]:
    labels, probabilities, captions, statuses, models = (response.as_numpy(name).reshape(-1) for name in CORE_OUTPUTS)
    extras = {spec.name: _json_rows(response.as_numpy(spec.name)) for spec in extra}
    return [
        CaptionResult(
            label.decode(),
            float(probability),
            caption.decode(),
            status.decode(),
            _served_models(served),
            {name: rows[index] for name, rows in extras.items()},
        )
        for index, (label, probability, caption, status, served) in enumerate(
            zip(labels, probabilities, captions, statuses, models)
        )
    ]


def _spent(timeout_s: float | None, started: float) -> bool:
    return timeout_s is not None and time.monotonic() - started >= timeout_s


def triton_timeout_us(timeout_s: float | None) -> int | None:
    """The caller's time left, as the request's timeout in Triton: a step whose queue policy allows the
    override (the vision encoder's, the captioner's) refuses the request once it has waited that long in
    its queue, rather than start work nobody waits for any more. The ensemble hands it to every step."""
    return None if timeout_s is None else max(1, round(timeout_s * 1_000_000))


def _manifests(response) -> list[dict]:
    return json.loads(response.as_numpy(contract.MANIFESTS)[0])


class _Connection:
    """What both clients hold: the ensemble's name, the deadline, one gRPC channel (``_grpc``: tritonclient's
    blocking or asyncio module) and the calls given up on."""

    _grpc: Any

    def __init__(
        self,
        url: str = DEFAULT_URL,
        model: str = DEFAULT_MODEL,
        timeout_s: float | None = None,
        lb_policy: str = "round_robin",
    ):
        self.model = model
        self.timeout_s = timeout_s
        self._client = self._grpc.InferenceServerClient(url, channel_args=channel_args(lb_policy))
        self._server_version: str | None = None
        self._extra: tuple[OutputSpec, ...] | None = None  # from the model's metadata, once
        self._unanswered: set = set()

    @property
    def known_extra_outputs(self) -> tuple[OutputSpec, ...] | None:
        """The outputs beyond the core contract, once learnt from Triton (None before)."""
        return self._extra


class Food11Client(_Connection):
    """Blocking client. ``caption([jpeg_bytes, png_bytes])`` -> one ``CaptionResult`` per image, in order.
    ``url`` is any gRPC target: ``host:port``, ``dns:///host:port``, ``ipv4:a:port,b:port``.
    A deadline (``timeout_s``) never cancels a call on a Triton that cannot survive it (cancellation.py)."""

    _grpc = grpcclient
    _unanswered: set[threading.Event]  # calls given up on, still running in Triton

    def server_version(self) -> str:
        if self._server_version is None:
            try:
                self._server_version = self._client.get_server_metadata().version
            except InferenceServerException as exc:
                raise _translate(exc) from exc
        return self._server_version

    def extra_outputs(self) -> tuple[OutputSpec, ...]:
        """The outputs the ensemble declares beyond the core contract (Triton's model metadata, asked once)."""
        if self._extra is None:
            try:
                self._extra = _extra_outputs(self._client.get_model_metadata(self.model))
            except InferenceServerException as exc:
                raise _translate(exc) from exc
        return self._extra

    def caption(self, images: Sequence[bytes]) -> list[CaptionResult]:
        extra = self.extra_outputs()
        inputs, outputs = _inputs(grpcclient, images), _outputs(grpcclient, extra)
        started = time.monotonic()
        if self.timeout_s is None or cancels_safely(self.server_version()):
            try:
                response = self._client.infer(
                    self.model,
                    inputs,
                    outputs=outputs,
                    timeout=triton_timeout_us(self.timeout_s),
                    client_timeout=self.timeout_s,
                )
            except InferenceServerException as exc:
                raise _translate(exc, _spent(self.timeout_s, started)) from exc
            return _results(response, extra)
        answered, answer = threading.Event(), dict[str, Any]()
        # The deadline counts from the call, as gRPC's would, and an answer after it is late whenever it is
        # read: a thread kept off the CPU until after the answer came must not turn a late answer into a
        # timely one.
        deadline = started + self.timeout_s

        def done(result, error):
            answer.update(result=result, error=error, at=time.monotonic())
            answered.set()
            self._unanswered.discard(answered)

        self._unanswered.add(answered)
        self._client.async_infer(
            self.model, inputs, callback=done, outputs=outputs, timeout=triton_timeout_us(self.timeout_s)
        )
        if not answered.wait(max(0.0, deadline - time.monotonic())) or answer["at"] > deadline:
            raise DeadlineExceededError(gave_up(self.timeout_s, self.server_version()), "StatusCode.DEADLINE_EXCEEDED")
        if answer["error"] is not None:
            raise _translate(answer["error"]) from answer["error"]  # it came in time: not the caller's deadline
        return _results(answer["result"], extra)

    def manifests(self) -> list[dict]:
        """The whole manifest of each served model with one (what it is, source, file hashes, fidelity)."""
        try:
            return _manifests(self._client.infer(MANIFESTS_MODEL, [], client_timeout=self.timeout_s))
        except InferenceServerException as exc:
            raise _translate(exc) from exc

    def close(self) -> None:
        give_up_at = time.monotonic() + DRAIN_ON_CLOSE_S
        for call in list(self._unanswered):
            call.wait(max(0.0, give_up_at - time.monotonic()))
        self._client.close()

    def __enter__(self) -> Food11Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class AsyncFood11Client(_Connection):
    """asyncio client: one channel, many concurrent ``await caption(...)`` calls. Cancelling a ``caption``
    (a deadline, a client that hung up) cancels its Triton call only where Triton survives that
    (cancellation.py); elsewhere the call runs to its end and its answer is dropped."""

    _grpc = grpcclient_aio
    _unanswered: set[asyncio.Task]

    async def server_version(self) -> str:
        if self._server_version is None:
            try:
                self._server_version = (await self._client.get_server_metadata()).version
            except InferenceServerException as exc:
                raise _translate(exc) from exc
        return self._server_version

    async def extra_outputs(self) -> tuple[OutputSpec, ...]:
        """The outputs the ensemble declares beyond the core contract (Triton's model metadata, asked once)."""
        if self._extra is None:
            try:
                self._extra = _extra_outputs(await self._client.get_model_metadata(self.model))
            except InferenceServerException as exc:
                raise _translate(exc) from exc
        return self._extra

    async def cancels_calls(self) -> bool:
        """Whether giving up on a call cancels it inside Triton."""
        return cancels_safely(await self.server_version())

    async def caption(self, images: Sequence[bytes], timeout_s: float | None = None) -> list[CaptionResult]:
        timeout_s = timeout_s or self.timeout_s
        extra = await self.extra_outputs()
        if await self.cancels_calls():
            return _results(await self._infer(images, extra, timeout_s, cancel_at_deadline=True), extra)
        call = asyncio.ensure_future(self._infer(images, extra, timeout_s, cancel_at_deadline=False))
        self._unanswered.add(call)
        call.add_done_callback(self._forget)
        try:
            # shield: cancelling this coroutine (a client that hung up) must not cancel the gRPC call
            return _results(await asyncio.wait_for(asyncio.shield(call), timeout_s), extra)
        except asyncio.TimeoutError:
            assert timeout_s is not None  # only a deadline times out
            error = DeadlineExceededError(
                gave_up(timeout_s, await self.server_version()), "StatusCode.DEADLINE_EXCEEDED"
            )
            error.still_running = call
            raise error from None

    async def _infer(
        self, images: Sequence[bytes], extra: Sequence[OutputSpec], timeout_s: float | None, cancel_at_deadline: bool
    ):
        started = time.monotonic()
        try:
            return await self._client.infer(
                self.model,
                _inputs(grpcclient_aio, images),
                outputs=_outputs(grpcclient_aio, extra),
                timeout=triton_timeout_us(timeout_s),
                client_timeout=timeout_s if cancel_at_deadline else None,
            )
        except InferenceServerException as exc:
            raise _translate(exc, _spent(timeout_s, started)) from exc

    def _forget(self, call: asyncio.Task) -> None:
        self._unanswered.discard(call)
        if not call.cancelled():
            call.exception()  # an answer nobody waits for any more: retrieved, so asyncio does not warn

    async def is_ready(self) -> bool:
        try:
            return await self._client.is_model_ready(self.model)
        except InferenceServerException:
            return False

    async def manifests(self) -> list[dict]:
        """The whole manifest of each served model with one (what it is, source, file hashes, fidelity)."""
        try:
            return _manifests(await self._client.infer(MANIFESTS_MODEL, [], client_timeout=self.timeout_s))
        except InferenceServerException as exc:
            raise _translate(exc) from exc

    async def repository_index(self) -> list[dict]:
        """Every model Triton knows: name, version, state (READY, UNAVAILABLE, ...) and reason."""
        try:
            index = await self._client.get_model_repository_index(as_json=True)
        except InferenceServerException as exc:
            raise _translate(exc) from exc
        return index.get("models", [])

    async def close(self) -> None:
        if self._unanswered:
            await asyncio.wait(self._unanswered, timeout=DRAIN_ON_CLOSE_S)
        await self._client.close()

    async def __aenter__(self) -> AsyncFood11Client:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
