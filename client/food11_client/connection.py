"""The gRPC channel both clients hold: where it goes, how it is tuned, and the state the clients share."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

from food11_client.results import OutputSpec
from pipeline_src import contract

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_MODEL = contract.ENSEMBLE
DEFAULT_CLASSIFY_MODEL = contract.CLASSIFY_ENSEMBLE


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


class Connection:
    """What both clients hold: the ensembles' names (``model`` captions, ``classify_model`` labels alone), the
    deadline, one gRPC channel (``_grpc``: tritonclient's blocking or asyncio module) and the calls given up on."""

    _grpc: Any

    def __init__(
        self,
        url: str = DEFAULT_URL,
        model: str = DEFAULT_MODEL,
        timeout_s: float | None = None,
        lb_policy: str = "round_robin",
        classify_model: str = DEFAULT_CLASSIFY_MODEL,
    ):
        self.model = model
        self.classify_model = classify_model
        self.timeout_s = timeout_s
        self._client = self._grpc.InferenceServerClient(url, channel_args=channel_args(lb_policy))
        self._server_version: str | None = None
        self._extra: tuple[OutputSpec, ...] | None = None  # from the model's metadata, once
        self._unanswered: set = set()

    @property
    def known_extra_outputs(self) -> tuple[OutputSpec, ...] | None:
        """The outputs beyond the core contract, once learnt from Triton (None before)."""
        return self._extra
