"""The asyncio client: ``AsyncFood11Client``, over the shared connection, wire format and errors."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.utils import InferenceServerException

from food11_client import wire
from food11_client.cancellation import DRAIN_ON_CLOSE_S, cancels_safely
from food11_client.connection import Connection
from food11_client.errors import given_up, triton_errors
from food11_client.results import CaptionResult, Classification, OutputSpec
from pipeline_src.contract import MANIFESTS_MODEL


class AsyncFood11Client(Connection):
    """asyncio client: one channel, many concurrent ``await caption(...)`` calls. Cancelling a ``caption``
    (a deadline, a client that hung up) cancels its Triton call only where Triton survives that
    (cancellation.py); elsewhere the call runs to its end and its answer is dropped."""

    _grpc = grpcclient_aio
    _unanswered: set[asyncio.Task]

    async def server_version(self) -> str:
        if self._server_version is None:
            with triton_errors():
                self._server_version = (await self._client.get_server_metadata()).version
        return self._server_version

    async def extra_outputs(self) -> tuple[OutputSpec, ...]:
        """The outputs the ensemble declares beyond the core contract (Triton's model metadata, asked once)."""
        if self._extra is None:
            with triton_errors():
                self._extra = wire.extra_output_specs(await self._client.get_model_metadata(self.model))
        return self._extra

    async def cancels_calls(self) -> bool:
        """Whether giving up on a call cancels it inside Triton."""
        return cancels_safely(await self.server_version())

    async def caption(self, images: Sequence[bytes], timeout_s: float | None = None) -> list[CaptionResult]:
        extra = await self.extra_outputs()
        outputs = wire.requested_outputs(grpcclient_aio, extra)
        return wire.caption_results(await self._call(self.model, images, outputs, timeout_s or self.timeout_s), extra)

    async def classify(self, images: Sequence[bytes], timeout_s: float | None = None) -> list[Classification]:
        """Label and probability only, from ``classify_model``, which runs no captioning (milliseconds, not seconds)."""
        outputs = wire.classify_outputs(grpcclient_aio)
        return wire.classifications(await self._call(self.classify_model, images, outputs, timeout_s or self.timeout_s))

    async def _call(self, model: str, images: Sequence[bytes], outputs: list, timeout_s: float | None):
        if await self.cancels_calls():
            return await self._infer(model, images, outputs, timeout_s, cancel_at_deadline=True)
        call = asyncio.ensure_future(self._infer(model, images, outputs, timeout_s, cancel_at_deadline=False))
        self._unanswered.add(call)
        call.add_done_callback(self._forget)
        try:
            # shield: cancelling this coroutine (a client that hung up) must not cancel the gRPC call
            return await asyncio.wait_for(asyncio.shield(call), timeout_s)
        except asyncio.TimeoutError:
            assert timeout_s is not None  # only a deadline times out
            error = given_up(timeout_s, await self.server_version())
            error.still_running = call
            raise error from None

    async def _infer(
        self, model: str, images: Sequence[bytes], outputs: list, timeout_s: float | None, cancel_at_deadline: bool
    ):
        with triton_errors(timeout_s):
            return await self._client.infer(
                model,
                wire.image_inputs(grpcclient_aio, images),
                outputs=outputs,
                timeout=wire.triton_timeout_us(timeout_s),
                client_timeout=timeout_s if cancel_at_deadline else None,
            )

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
        with triton_errors():
            return wire.manifests_of(await self._client.infer(MANIFESTS_MODEL, [], client_timeout=self.timeout_s))

    async def model_config(self, name: str, timeout_s: float | None = None) -> dict:
        """One model's configuration, as Triton answers it in JSON (field names as in config.pbtxt)."""
        with triton_errors():
            return (await self._client.get_model_config(name, as_json=True, client_timeout=timeout_s))["config"]

    async def model_ready(self, name: str, timeout_s: float | None = None) -> bool:
        """Whether Triton says ``name`` is ready. Unlike ``is_ready``, raises a ``PipelineError`` when Triton
        cannot be asked (``ServerUnavailableError``: not reached; ``DeadlineExceededError``: no answer in time)."""
        with triton_errors():
            return await self._client.is_model_ready(name, client_timeout=timeout_s)

    async def model_state(self, name: str) -> dict:
        """One model's name, the versions Triton serves and its state (READY or UNAVAILABLE), from the health and
        metadata APIs, which every caller may use."""
        with triton_errors():
            if not await self._client.is_model_ready(name):
                return {"name": name, "state": "UNAVAILABLE", "reason": "not ready (Triton's log says why)"}
            metadata = await self._client.get_model_metadata(name, as_json=True)
        return {"name": name, "version": ",".join(metadata.get("versions", [])), "state": "READY"}

    async def cache_counts(self, name: str, timeout_s: float | None = None) -> dict[str, tuple[int, int]]:
        """By version of ``name`` Triton serves: (answers from its response cache, answers computed and stored), from
        Triton's statistics API."""
        with triton_errors():
            stats = await self._client.get_inference_statistics(name, as_json=True, client_timeout=timeout_s)
        counts = {}
        for entry in stats.get("model_stats", []):
            inference = entry.get("inference_stats", {})
            hits, misses = (int(inference.get(kind, {}).get("count", 0)) for kind in ("cache_hit", "cache_miss"))
            counts[entry["version"]] = (hits, misses)
        return counts

    async def close(self) -> None:
        if self._unanswered:
            await asyncio.wait(self._unanswered, timeout=DRAIN_ON_CLOSE_S)
        await self._client.close()

    async def __aenter__(self) -> AsyncFood11Client:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
