"""The API's settings, from environment variables (``FOOD11_API_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from food11_client import RETRY_AFTER_S
from food11_client.connection import DEFAULT_CLASSIFY_MODEL, DEFAULT_MODEL, DEFAULT_URL


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FOOD11_API_")

    triton_url: str = Field(
        DEFAULT_URL,
        description="Triton's gRPC target: host:port, or dns:///host:port "
        "to reach every address a name resolves to (a Kubernetes headless Service)",
    )
    grpc_lb_policy: Literal["round_robin", "pick_first"] = Field(
        "round_robin", description="round_robin: each request to the next Triton the target resolves to"
    )
    model_name: str = Field(DEFAULT_MODEL, description="the ensemble /caption and /predict call")
    classify_model_name: str = Field(DEFAULT_CLASSIFY_MODEL, description="the ensemble /classify calls")
    deadline_s: float = Field(60.0, gt=0, description="per-request deadline of the Triton call, seconds")
    max_upload_bytes: int = Field(10 * 1024 * 1024, gt=0, description="larger request bodies get 413")
    # Admission (admission.py); the rest of the deadline is the margin (why 0.35: docs/reliability.md, "Overload").
    latency_target: float = Field(
        0.35, gt=0, lt=1, description="the share of the deadline admitted requests aim to be answered within"
    )
    min_in_flight: int = Field(1, gt=0, description="the adaptive in-flight limit never goes below this")
    max_in_flight: int = Field(
        64, gt=0, description="the adaptive in-flight limit never goes above this (memory, Triton's queues)"
    )
    retry_after_s: int = Field(
        RETRY_AFTER_S, ge=0, description="Retry-After of a 503 before any answer was measured; then the drain time"
    )
    # Step health (step_health.py): while the server's watchdog heals a step, Triton says its model is not ready.
    step_health_interval_s: float = Field(
        1.0,
        gt=0,
        description="seconds between the API's looks at whether each model the ensembles are built from is ready "
        "(GET /readyz, and the 503 at once for a request that needs a model that is not)",
    )
    step_down_retry_after_s: int = Field(
        5,
        ge=0,
        description="Retry-After of a 503 for a request that needs a model that is not ready (a heal is an unload "
        "and a load: seconds to tens of seconds)",
    )
    # Caller keys (callers.py): off by default, as the API listens on loopback only.
    keys_file: Path | None = Field(
        None,
        description="a file of caller keys, one a line (name:key, or a bare key; # comments), read at start-up: "
        "every route but /healthz, /readyz, /metrics and the docs then needs one. Unset: no keys",
    )
    caller_share: float = Field(
        0.5, gt=0, le=1, description="with keys: the share of the in-flight limit one caller may hold (at least 1)"
    )
    host: str = Field("127.0.0.1", description="bind address; 0.0.0.0 to serve other machines")
    port: int = Field(8080, description="bind port")
