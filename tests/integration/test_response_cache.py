"""Triton's response cache on the ensembles, against a real tritonserver that caches (``--cache-config local``, as
``make serve`` starts it), on a copy of the test repository: a photo asked again is answered from the cache with
the same answer (Triton's statistics count the hit); a step reloaded by the watcher never lets the cache answer
what the old step computed; a caption that failed is refused, not cached; perf_analyzer is not pointed at the
cache by mistake."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request

import httpx
import pytest
from helpers import QUICK_EXIT, running

from food11_client import Food11Client
from food11_client.errors import ServerUnavailableError
from pipeline_src.contract import ENSEMBLE
from pipeline_src.profiling.perf_analyzer import cache_refusal
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.serving.reload import StepReloader
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.response_cache import local_cache_args, repository_revision


@pytest.fixture(scope="module")
def cached_server(model_repository, tmp_path_factory):
    repository = tmp_path_factory.mktemp("cached") / "model_repository"
    shutil.copytree(model_repository, repository, symlinks=True)
    lines: list[str] = []
    server = TritonServer(
        repository,
        tmp_path_factory.mktemp("cached_triton"),
        free_ports(),
        extra_args=("--model-control-mode=explicit", "--load-model=*", QUICK_EXIT, *local_cache_args(16)),
        report=lines.append,
    )
    with running(server):
        server.reported = lines  # type: ignore[attr-defined]
        yield server


@pytest.fixture
def client(cached_server):
    with Food11Client(cached_server.grpc_url) as client:
        yield client


def cache_counts(server: TritonServer, model: str = ENSEMBLE) -> dict[str, tuple[int, int]]:
    """By loaded version: (cache hits, cache misses), from Triton's statistics API."""
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as response:
        stats = json.loads(response.read())["model_stats"]
    return {
        entry["version"]: (
            entry["inference_stats"]["cache_hit"]["count"],
            entry["inference_stats"]["cache_miss"]["count"],
        )
        for entry in stats
    }


def served_version(server: TritonServer, model: str = ENSEMBLE) -> str:
    (version,) = TritonRepositoryApi(server.http_url, server.admin_http_headers).ready_versions()[model]
    return version


def test_every_ensemble_is_cached_at_the_repository_revision(cached_server):
    version = str(repository_revision(cached_server.model_repository).version)
    assert served_version(cached_server) == version
    assert any(
        line.startswith(f"response cache: {ENSEMBLE} cached, at version {version}") for line in cached_server.reported
    )


def test_a_photo_asked_again_is_answered_from_the_cache_with_the_same_answer(cached_server, client, photos):
    version = served_version(cached_server)
    hits, misses = cache_counts(cached_server)[version]
    (first,) = client.caption([photos["fruits.jpg"]])
    (again,) = client.caption([photos["fruits.jpg"]])
    assert again == first and first.caption_status == "ok"
    assert cache_counts(cached_server)[version] == (hits + 1, misses + 1)


def test_a_reloaded_captioner_never_answers_from_the_old_cache(cached_server, client, photos):
    repository = cached_server.model_repository
    triton = TritonRepositoryApi(cached_server.http_url, cached_server.admin_http_headers)
    cached = cached_server.cached_ensembles
    reloader = StepReloader(
        repository, triton, report=cached_server.report, before_reload=cached.uncache, after_reload=cached.refresh
    )
    (before,) = client.caption([photos["orange.jpg"]])
    (cached_answer,) = client.caption([photos["orange.jpg"]])
    assert cached_answer == before
    old_version = served_version(cached_server)

    config = repository / "captioner" / "config.pbtxt"
    text = config.read_text()
    assert 'key: "max_new_tokens"\n  value: { string_value: "20" }' in text
    config.write_text(text.replace('value: { string_value: "20" }', 'value: { string_value: "3" }', 1))
    while not reloader.poll():  # a change is reloaded once two looks agree on it
        pass

    (after,) = client.caption([photos["orange.jpg"]])
    assert after.caption != before.caption and len(after.caption.split()) < len(before.caption.split())
    new_version = served_version(cached_server)
    assert new_version != old_version
    assert cache_counts(cached_server)[new_version] == (0, 1)
    (after_again,) = client.caption([photos["orange.jpg"]])
    assert after_again == after and cache_counts(cached_server)[new_version] == (1, 1)


def test_a_failed_caption_is_refused_not_cached(cached_server, client, photos):
    triton = TritonRepositoryApi(cached_server.http_url, cached_server.admin_http_headers)
    assert triton.unload("captioner") is None  # a real fault: the BLS call finds no captioner
    try:
        with pytest.raises(ServerUnavailableError, match=r"caption_with_label.*no caption \(captioner_error: "):
            client.caption([photos["apple.jpg"]])
    finally:
        assert triton.load("captioner") is None
    (recovered,) = client.caption([photos["apple.jpg"]])
    assert recovered.caption_status == "ok" and recovered.caption


def test_through_the_api_a_repeated_photo_is_the_same_answer_counted_as_a_cache_hit(cached_server, photos):
    api = ApiProcess("127.0.0.1", free_port(), cached_server.grpc_url)
    try:
        api.wait_until_alive()
        with httpx.Client(base_url=api.url, timeout=120) as http:

            def caption() -> dict:
                response = http.post("/caption", files={"photo": ("photo.jpg", photos["fruits.jpg"], "image/jpeg")})
                assert response.status_code == 200, response.text
                return {name: value for name, value in response.json().items() if name != "elapsed_ms"}

            assert caption() == caption()
            version = served_version(cached_server)
            hits = f'food11_response_cache_hits_total{{model="{ENSEMBLE}",version="{version}"}}'
            deadline = time.monotonic() + 60  # the API reads Triton's statistics every 2 s
            while hits not in (metrics := http.get("/metrics").text) and time.monotonic() < deadline:
                time.sleep(0.5)
            (count,) = [float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(hits)]
            assert count >= 1
    finally:
        api.stop()


def test_perf_analyzer_refuses_a_cached_model_saying_how_to_profile_it_and_takes_an_uncached_one(cached_server):
    command = [
        sys.executable,
        "-m",
        "pipeline_src.profiling.perf_analyzer",
        "-m",
        ENSEMBLE,
        "-u",
        cached_server.grpc_url,
    ]
    done = subprocess.run([*command, "-i", "grpc"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{ENSEMBLE} is served with Triton's response cache on" in done.stderr
    assert "make serve CACHE_MIB=0" in done.stderr and "--include-cache-hits" in done.stderr
    assert cache_refusal(["-m", ENSEMBLE, "-u", cached_server.http_url]) is not None  # perf_analyzer's default: HTTP
    assert cache_refusal(["-m", "label", "-u", cached_server.grpc_url, "-i", "grpc"]) is None  # a step: not cached
