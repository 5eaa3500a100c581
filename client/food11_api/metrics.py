"""The API's own Prometheus metrics at GET /metrics, beside Triton's on its metrics port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from functools import partial

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_fastapi_instrumentator import Instrumentator, metrics

from food11_api.admission import AdaptiveLimit
from food11_api.step_health import StepHealth
from food11_client import AsyncFood11Client
from food11_client.errors import PipelineError

log = logging.getLogger("food11_api")

# A caption takes well under a second on a GPU and seconds on a loaded CPU (benchmarks/results/gpu_serve.md,
# bench.md): buckets that tell those apart.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60)
METRICS_PATH = "/metrics"


def instrument(app: FastAPI) -> CollectorRegistry:
    """http_requests_total{handler,method,status}, http_request_duration_seconds{handler,method} (histogram),
    request and response sizes. Call it after every other middleware is added: it must be the outermost
    to count what they answer themselves (413 from the body limit)."""
    registry = CollectorRegistry()  # one per app: tests run several apps in one process
    Instrumentator(
        should_group_status_codes=False,  # 400, 413, 503 and 504 mean different things here
        excluded_handlers=[METRICS_PATH],
        registry=registry,
    ).add(
        metrics.default(
            latency_lowr_buckets=LATENCY_BUCKETS_S, latency_highr_buckets=LATENCY_BUCKETS_S, registry=registry
        )
    ).instrument(app).expose(app, endpoint=METRICS_PATH, include_in_schema=False)
    return registry


class ModelAnswers:
    """food11_model_answers_total{model,version,kind,sha256}: the answers each model build took part in. Its
    labels are the identity every answer carries, so a dashboard tells replicas and builds apart, and sees
    when a stand-in (kind="stand-in") answers in production."""

    def __init__(self, registry: CollectorRegistry):
        self.counter = Counter(
            "food11_model_answers",
            "answers each model build took part in",
            ["model", "version", "kind", "sha256"],
            registry=registry,
        )

    def count(self, models: Iterable) -> None:
        for served in models:
            self.counter.labels(served.model, served.version, served.kind, served.sha256).inc()


class Refusals:
    """food11_refused_total{by}: requests refused at once, under overload by this API (``api``: its in-flight
    cap; ``caller_share``: the caller's share of it, with caller keys on) or by Triton (``triton``: a step's
    queue policy), or because a model the request needs is not ready (``step_down``: step_health.py). All
    answer 503 with Retry-After."""

    BY = ("api", "caller_share", "triton", "step_down")

    def __init__(self, registry: CollectorRegistry):
        self.counter = Counter(
            "food11_refused",
            "requests refused at once (overload, or a model they need not ready)",
            ["by"],
            registry=registry,
        )
        for by in self.BY:
            self.counter.labels(by)  # present at 0 from the start, so a rate() sees the first refusal

    def count(self, by: str) -> None:
        self.counter.labels(by).inc()


def observe_admission(registry: CollectorRegistry, admission: AdaptiveLimit) -> None:
    """food11_admission_limit, food11_requests_in_flight and food11_answer_rate (per second, 0 before the
    first answer): what the adaptive limit settled on, and why. Read at each scrape."""
    for name, description, read in (
        ("food11_admission_limit", "captioning requests admitted at once, now", lambda: admission.limit),
        ("food11_requests_in_flight", "captioning requests in flight", lambda: admission.in_flight),
        ("food11_answer_rate", "requests answered per second, measured", lambda: admission.rate_per_s or 0.0),
    ):
        Gauge(name, description, registry=registry).set_function(read)


def observe_callers(registry: CollectorRegistry, admission: AdaptiveLimit, names: Iterable[str]) -> None:
    """food11_caller_requests_in_flight{caller}: with caller keys on, whose requests hold the limit (the
    names from the keys file, never a key)."""
    gauge = Gauge(
        "food11_caller_requests_in_flight", "captioning requests in flight, by caller", ["caller"], registry=registry
    )
    for name in names:
        gauge.labels(name).set_function(partial(admission.in_flight_by_caller.__getitem__, name))


class ModelReadiness(Collector):
    """food11_model_ready{model}: 1 when the API's last look found the model ready in Triton, 0 when not, for
    the ensembles the API calls and every model they are built from; none before the first look, or while Triton
    does not answer (that is not a model's state: the 503s of the captioning routes and /readyz say so)."""

    def __init__(self, health: StepHealth):
        self.health = health

    def collect(self):
        family = GaugeMetricFamily(
            "food11_model_ready", "the model is ready in Triton (the API's last look)", labels=["model"]
        )
        last = self.health.last
        if last is not None and last.reachable:
            for model in last.needed():
                family.add_metric([model], 0.0 if model in last.not_ready else 1.0)
        yield family


class ResponseCacheStats(Collector):
    """food11_response_cache_hits_total and food11_response_cache_misses_total{model,version}: the answers Triton's
    response cache gave (and the ones computed and stored in it) for the ensembles the API calls, beside the API's
    own metrics. From Triton's statistics API, read every ``interval_s`` in the background (a scrape must not wait
    on Triton); none while the server has no cache, as its statistics then count nothing. Each cached ensemble is
    served at a version named after the repository's revision (pipeline_src/serving/response_cache.py): a new revision
    is a new label set, starting at 0."""

    def __init__(self, models: Iterable[str], interval_s: float = 2.0):
        self.models = tuple(dict.fromkeys(models))
        self.interval_s = interval_s
        self.counts: dict[tuple[str, str], tuple[int, int]] = {}  # (model, version) -> (hits, misses)
        self._task: asyncio.Task | None = None

    def start(self, client: AsyncFood11Client) -> None:
        self._task = asyncio.create_task(self._run(client))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, client: AsyncFood11Client) -> None:
        while True:
            await self.refresh(client)
            await asyncio.sleep(self.interval_s)

    async def refresh(self, client: AsyncFood11Client) -> None:
        for model in self.models:
            try:
                by_version = await client.cache_counts(model, timeout_s=self.interval_s)
            except PipelineError as exc:  # Triton down or the model not loaded: the last counts stay
                log.debug("response cache statistics of %s not read: %s", model, exc)
                continue
            for version, counts in by_version.items():
                if any(counts):
                    self.counts[(model, version)] = counts

    def collect(self):
        hits = CounterMetricFamily(
            "food11_response_cache_hits", "answers from Triton's response cache", labels=["model", "version"]
        )
        misses = CounterMetricFamily(
            "food11_response_cache_misses",
            "answers computed and stored in Triton's response cache",
            labels=["model", "version"],
        )
        for (model, version), (hit, miss) in sorted(self.counts.items()):
            hits.add_metric([model, version], hit)
            misses.add_metric([model, version], miss)
        yield hits
        yield misses
