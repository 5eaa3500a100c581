"""The blocking client: ``Food11Client``, over the shared connection, wire format and errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import tritonclient.grpc as grpcclient

from food11_client import wire
from food11_client.cancellation import DRAIN_ON_CLOSE_S, cancels_safely
from food11_client.connection import Connection
from food11_client.errors import given_up, translate, triton_errors
from food11_client.results import CaptionResult, Classification, OutputSpec
from pipeline_src.contract import MANIFESTS_MODEL


class Food11Client(Connection):
    """Blocking client. ``caption([jpeg_bytes, png_bytes])`` -> one ``CaptionResult`` per image, in order.
    ``url`` is any gRPC target: ``host:port``, ``dns:///host:port``, ``ipv4:a:port,b:port``.
    A deadline (``timeout_s``) never cancels a call on a Triton that cannot survive it (cancellation.py)."""

    _grpc = grpcclient
    _unanswered: set[threading.Event]  # calls given up on, still running in Triton

    def server_version(self) -> str:
        if self._server_version is None:
            with triton_errors():
                self._server_version = self._client.get_server_metadata().version
        return self._server_version

    def extra_outputs(self) -> tuple[OutputSpec, ...]:
        """The outputs the ensemble declares beyond the core contract (Triton's model metadata, asked once)."""
        if self._extra is None:
            with triton_errors():
                self._extra = wire.extra_output_specs(self._client.get_model_metadata(self.model))
        return self._extra

    def caption(self, images: Sequence[bytes]) -> list[CaptionResult]:
        extra = self.extra_outputs()
        return wire.caption_results(self._call(self.model, images, wire.requested_outputs(grpcclient, extra)), extra)

    def classify(self, images: Sequence[bytes]) -> list[Classification]:
        """Label and probability only, from ``classify_model``, which runs no captioning (milliseconds, not seconds)."""
        return wire.classifications(self._call(self.classify_model, images, wire.classify_outputs(grpcclient)))

    def _call(self, model: str, images: Sequence[bytes], outputs: list):
        inputs = wire.image_inputs(grpcclient, images)
        started = time.monotonic()
        if self.timeout_s is None or cancels_safely(self.server_version()):
            with triton_errors(self.timeout_s, started):
                return self._client.infer(
                    model,
                    inputs,
                    outputs=outputs,
                    timeout=wire.triton_timeout_us(self.timeout_s),
                    client_timeout=self.timeout_s,
                )
        return self._infer_without_cancelling(model, inputs, outputs, self.timeout_s, started)

    def _infer_without_cancelling(self, model: str, inputs: list, outputs: list, timeout_s: float, started: float):
        """Wait for the call until its deadline, then give up on it without cancelling it (it runs on in Triton)."""
        answered, answer = threading.Event(), dict[str, Any]()
        # The deadline counts from the call, as gRPC's would, and an answer after it is late whenever it is
        # read: a thread kept off the CPU until after the answer came must not turn a late answer into a
        # timely one.
        deadline = started + timeout_s

        def done(result, error):
            answer.update(result=result, error=error, at=time.monotonic())
            answered.set()
            self._unanswered.discard(answered)

        self._unanswered.add(answered)
        self._client.async_infer(
            model, inputs, callback=done, outputs=outputs, timeout=wire.triton_timeout_us(timeout_s)
        )
        if not answered.wait(max(0.0, deadline - time.monotonic())) or answer["at"] > deadline:
            raise given_up(timeout_s, self.server_version())
        if answer["error"] is not None:
            raise translate(answer["error"]) from answer["error"]  # it came in time: not the caller's deadline
        return answer["result"]

    def manifests(self) -> list[dict]:
        """The whole manifest of each served model with one (what it is, source, file hashes, fidelity)."""
        with triton_errors():
            return wire.manifests_of(self._client.infer(MANIFESTS_MODEL, [], client_timeout=self.timeout_s))

    def close(self) -> None:
        give_up_at = time.monotonic() + DRAIN_ON_CLOSE_S
        for call in list(self._unanswered):
            call.wait(max(0.0, give_up_at - time.monotonic()))
        self._client.close()

    def __enter__(self) -> Food11Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
