"""Whether the models the API's calls need are ready in Triton: a monitor that looks about once a second,
and what ``/readyz`` and admission read from its last look (docs/api.md, "A model not ready").

Triton 2.51 keeps a Python step READY when its stub dies; while the watchdog beside Triton heals it (an unload and
a load), Triton says it is not ready. The monitor asks Triton's open health API (``is_model_ready``) about every
model the API's ensembles are built from (ensemble_graph.py): the repository index is an admin API the API has no
key for, and the manifests ``GET /models`` reads come from an inference call, which a deadline or a shutdown would
cancel (a cancelled inference can crash Triton 2.51: food11_client/cancellation.py). An ensemble's graph is read
again when it was incomplete, every ``rediscover_s``, and whenever the ensemble comes back ready (a reload may
have changed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from food11_api.ensemble_graph import EnsembleCall, EnsembleGraph, bls_callees, output_names, steps_of
from food11_client import AsyncFood11Client, PipelineError
from food11_client.errors import DEADLINE_EXCEEDED

log = logging.getLogger("food11_api")

NOT_READY = "not ready in Triton"
UNREACHABLE_STATUSES = {"StatusCode.UNAVAILABLE", DEADLINE_EXCEEDED}


@dataclass(frozen=True)
class Readiness:
    """One look: ``at`` (time.monotonic), whether Triton answered (else ``error`` says why), and each model of
    ``graphs`` (one per ensemble the API calls) that is not ready, with why."""

    at: float
    graphs: tuple[EnsembleGraph, ...]
    reachable: bool = True
    error: str = ""
    not_ready: Mapping[str, str] = field(default_factory=dict)

    def needed(self, call: EnsembleCall | None = None) -> tuple[str, ...]:
        """The models ``call`` needs. None: every call the API makes, so every model the ensembles are built from,
        and the ensembles: what ``/readyz`` needs ready."""
        if call is None:
            return models_of(self.graphs)
        graph = next((graph for graph in self.graphs if graph.ensemble == call.ensemble), None)
        return (graph or EnsembleGraph.alone(call.ensemble)).needed(call.outputs)

    def down(self, call: EnsembleCall | None = None) -> list[str]:
        """The models that ``call`` (None: every call) needs and that are not ready; none when Triton did not
        answer (that is not a model's state). Triton unloads an ensemble with any of its steps, whether the call
        would run that step or not: an ensemble not ready comes after its steps that are not (a call of
        food11_pipeline naming only the label's outputs cannot be answered without the vision encoder, and its
        refusal says so)."""
        if not self.reachable:
            return []
        graphs = {graph.ensemble: graph for graph in self.graphs}
        down: list[str] = []
        for model in self.needed(call):
            if model in self.not_ready:
                steps = graphs[model].steps if model in graphs else ()
                down += [*(step.model for step in steps if step.model in self.not_ready), model]
        return list(dict.fromkeys(down))

    def why_not_ready(self, triton_url: str, call: EnsembleCall | None = None) -> str | None:
        """``/readyz``'s 503 detail, or None when ready."""
        if not self.reachable:
            ensembles = [call.ensemble] if call else [graph.ensemble for graph in self.graphs]
            kind = "ensemble" if len(ensembles) == 1 else "ensembles"
            return f"{kind} {_listed(ensembles)} not ready at {triton_url}: Triton not reachable ({self.error})"
        down = self.down(call)
        if not down:
            return None
        return "not ready: " + ", ".join(f"{model} ({self.not_ready[model]})" for model in down)


def models_of(graphs: Iterable[EnsembleGraph]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(model for graph in graphs for model in graph.models))


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def refusal_detail(models: list[str]) -> str:
    """The 503 detail of a request refused because ``models`` it needs are not ready."""
    return f"{_listed(models)} {'is' if len(models) == 1 else 'are'} not ready (healing or down): retry later"


class StepHealth:
    """The monitor of one API process: ``start(client)`` in the lifespan, ``stop()`` at shutdown.

    ``interval_s``: between looks. A look older than ``stale_after_s`` is not trusted: admission then lets
    requests through (as before this monitor), ``/readyz`` looks itself."""

    def __init__(self, ensembles: Iterable[str], interval_s: float = 1.0, rediscover_s: float = 30.0):
        self.ensembles = tuple(dict.fromkeys(ensembles))
        self.interval_s = interval_s
        self.rediscover_s = rediscover_s
        self.timeout_s = max(2.0, 2 * interval_s)  # one gRPC call of a look
        self.stale_after_s = self.timeout_s + 5 * interval_s
        self.last: Readiness | None = None
        self._client: AsyncFood11Client | None = None
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._graphs: dict[str, EnsembleGraph] = {}  # by ensemble, as last read
        self._read_at: dict[str, float] = {}
        self._callees: dict[str, tuple[str, ...]] = {}  # by step, the last read (a step unloaded keeps its own)
        self._down_since: dict[str, float] = {}
        self._stopping = asyncio.Event()

    def start(self, client: AsyncFood11Client) -> None:
        self._client = client
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="step-health")

    async def stop(self) -> None:
        """After the look under way, if any (at most ``timeout_s`` a call): its calls are let finish."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None

    def fresh(self) -> Readiness | None:
        """The last look, unless it is too old to trust (or there was none)."""
        last = self.last
        if last is None or time.monotonic() - last.at > self.stale_after_s:
            return None
        return last

    async def current(self) -> Readiness:
        """The last look if fresh, else a look now (``/readyz`` before the monitor's first look)."""
        return self.fresh() or await self.refresh()

    def down(self, call: EnsembleCall | None = None) -> list[str]:
        """What admission refuses a route for: the models its call needs that the last fresh look found not ready."""
        last = self.fresh()
        return [] if last is None else last.down(call)

    async def confirmed_down(self, call: EnsembleCall | None = None) -> list[str]:
        """``down``, confirmed by a look at most a quarter interval old before a request is refused: a model
        loaded since the last look (a heal just done) must not refuse it."""
        if not self.down(call):
            return []
        try:
            return (await self.refresh()).down(call)
        except Exception:  # Triton not answering the look: the last look stands
            return self.down(call)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.refresh()
            except Exception:  # a defect here must not end the monitor: its looks would go stale
                log.exception("step health: the look at Triton failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval_s)

    async def refresh(self) -> Readiness:
        """Look now: the graphs (those due), then every model of them. Concurrent callers share one look."""
        if self._client is None:
            raise RuntimeError("StepHealth.start(client) was not called")
        async with self._lock:
            if (last := self.last) is not None and time.monotonic() - last.at < self.interval_s / 4:
                return last  # a look that finished while this caller waited for the lock
            graphs = await self._read_due_graphs(self._client)
            readiness = await self._look(self._client, graphs)
            self._log_changes(readiness)
            self.last = readiness
            return readiness

    async def _read_due_graphs(self, client: AsyncFood11Client) -> tuple[EnsembleGraph, ...]:
        """Each ensemble's graph, read again where due."""
        due = [ensemble for ensemble in self.ensembles if self._due(ensemble)]
        for ensemble, graph in zip(due, await asyncio.gather(*(self._read_graph(client, e) for e in due))):
            self._graphs[ensemble], self._read_at[ensemble] = graph, time.monotonic()
        return tuple(self._graphs[ensemble] for ensemble in self.ensembles)

    def _due(self, ensemble: str) -> bool:
        graph = self._graphs.get(ensemble)
        if graph is None or not graph.complete or time.monotonic() - self._read_at[ensemble] > self.rediscover_s:
            return True
        # While an ensemble is not ready its config cannot be read; once it is back, a reload may have changed it.
        return self.last is not None and ensemble in self.last.not_ready

    async def _read_graph(self, client: AsyncFood11Client, ensemble: str) -> EnsembleGraph:
        try:
            config = await client.model_config(ensemble, self.timeout_s)
        except PipelineError:  # unloaded (or Triton away): what was read before, else the ensemble alone
            return self._graphs.get(ensemble) or EnsembleGraph.alone(ensemble)
        steps = steps_of(config)
        names = list(dict.fromkeys(step.model for step in steps))
        answers = await asyncio.gather(
            *(client.model_config(name, self.timeout_s) for name in names), return_exceptions=True
        )
        # The models that call others by BLS: the steps, or a model that is no ensemble itself.
        read: dict[str, dict | BaseException] = dict(zip(names, answers)) if steps else {ensemble: config}
        for name, answer in read.items():
            if not isinstance(answer, BaseException):  # an unloaded step keeps its callees as last read
                self._callees[name] = bls_callees(answer)
        callees = {name: self._callees[name] for name in read if name in self._callees}
        complete = not any(isinstance(answer, BaseException) for answer in read.values())
        return EnsembleGraph(ensemble, output_names(config), steps, callees, complete)

    async def _look(self, client: AsyncFood11Client, graphs: tuple[EnsembleGraph, ...]) -> Readiness:
        models = models_of(graphs)
        answers = await asyncio.gather(
            *(client.model_ready(name, self.timeout_s) for name in models), return_exceptions=True
        )
        not_ready: dict[str, str] = {}
        for name, answer in zip(models, answers):
            if isinstance(answer, PipelineError) and (answer.status in UNREACHABLE_STATUSES or answer.status is None):
                return Readiness(time.monotonic(), graphs, reachable=False, error=str(answer))
            if isinstance(answer, PipelineError):  # Triton answered, with an error (an unknown model is not one)
                not_ready[name] = f"{NOT_READY}: {answer}"
            elif isinstance(answer, BaseException):
                raise answer
            elif not answer:  # unloaded, loading, failed to load, or unknown: only the admin index tells which
                not_ready[name] = NOT_READY
        return Readiness(time.monotonic(), graphs, not_ready=not_ready)

    def _log_changes(self, now: Readiness) -> None:
        before = self.last
        if not now.reachable and (before is None or before.reachable):
            log.warning("step health: Triton not reachable: %s", now.error)
        elif now.reachable and before is not None and not before.reachable:
            log.info("step health: Triton answers again")
        if not now.reachable:
            return
        for model, why in now.not_ready.items():
            if model not in self._down_since:
                self._down_since[model] = now.at
                log.warning("step health: %s is %s", model, why)
        for model in [m for m in self._down_since if m not in now.not_ready]:
            log.info("step health: %s is ready again, after %.1f s", model, now.at - self._down_since.pop(model))
