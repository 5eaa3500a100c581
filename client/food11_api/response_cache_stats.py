"""food11_response_cache_hits_total and food11_response_cache_misses_total{model,version}: the answers Triton's
response cache gave (and the ones computed and stored in it) for the ensembles the API calls, beside the API's
own metrics. From Triton's statistics API, read every ``interval_s`` in the background (a scrape must not wait
on Triton); none while the server has no cache, as its statistics then count nothing. Each cached ensemble is
served at a version named after the repository's revision (pipeline_src/serving/response_cache.py): a new revision
is a new label set, starting at 0."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from food11_client import AsyncFood11Client
from food11_client.errors import PipelineError

logger = logging.getLogger("food11_api")


class ResponseCacheStats(Collector):
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
                logger.debug("response cache statistics of %s not read: %s", model, exc)
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
