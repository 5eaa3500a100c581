"""scripts/serve.py: Triton (and the API) ready on the ports asked for, on loopback only, Triton's admin APIs
behind a key written for this user alone; a quiet, clean
stop on Ctrl-C, SIGTERM or SIGHUP; no server outliving serve.py, even SIGKILLed; taken ports named; a repeated photo
answered from the response cache."""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import urllib.request

import psutil
import pytest
from helpers import CLASSIFY_ONLY, post_json_status, serve_command

from food11_client import Food11Client
from pipeline_src.serving import admin
from pipeline_src.serving.ports import free_port, free_ports


@contextlib.contextmanager
def serving(model_repository, tmp_path, *extra):
    """scripts/serve.py running until it says it is ready; killed afterwards if a test left it running."""
    ports = free_ports()
    command = serve_command(model_repository, tmp_path, ports, *extra)
    # A session of its own, as a terminal gives a foreground job: Ctrl-C is then SIGINT to the whole group.
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        said = []
        for line in process.stdout:
            said.append(line)
            if "Ctrl-C stops everything" in line or "error" in line.lower() or "exited" in line:
                break
        assert "Ctrl-C stops everything" in line, line
        yield ports, process, "".join(said)
    finally:
        if process.poll() is None:
            process.kill()


def servers_of(process) -> list[psutil.Process]:
    """tritonserver, its backend stubs and the API: everything serve.py started."""
    return psutil.Process(process.pid).children(recursive=True)


def listening_addresses(servers) -> set[str]:
    return {
        conn.laddr.ip
        for server in servers
        for conn in server.net_connections("inet")
        if conn.status == psutil.CONN_LISTEN
    }


def get_status(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status


@pytest.fixture(scope="module")
def triton_alone(model_repository, tmp_path_factory):
    """serve.py without the API, its response cache on, for the tests below; then SIGTERM stops it cleanly: status
    0, its models unloaded, nothing listening any more."""
    tmp_path = tmp_path_factory.mktemp("triton_alone")
    with serving(model_repository, tmp_path, "--no-api", "--response-cache-mib", "8") as (ports, process, said):
        yield tmp_path, ports, said
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    assert "successfully unloaded 'food11_pipeline'" in (tmp_path / "server.log").read_text()
    with pytest.raises(OSError):  # nothing listens any more
        get_status(f"http://127.0.0.1:{ports.http}/v2/health/live")


def test_triton_alone_serves_the_ensemble_on_the_port_asked_for(triton_alone):
    _, ports, _ = triton_alone
    assert get_status(f"http://127.0.0.1:{ports.http}/v2/models/food11_pipeline/ready") == 200


def test_make_serve_closes_tritons_admin_apis_and_leaves_the_key_to_this_user(triton_alone):
    def set_log_level(http_port: int, headers: dict) -> int:
        return post_json_status(f"http://127.0.0.1:{http_port}/v2/logging", {"log_verbose_level": 0}, headers)

    tmp_path, ports, _ = triton_alone
    key_file = tmp_path / "work" / "admin-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert set_log_level(ports.http, {}) == 403
    assert set_log_level(ports.http, admin.http_headers(key_file.read_text().strip())) == 200


def test_make_serve_answers_a_repeated_photo_from_the_response_cache(triton_alone, photos):
    """serve.py's default cache (the helpers turn it off for the fault tests: a later flag wins)."""
    _, ports, said = triton_alone
    (version,) = re.findall(r"response cache: food11_pipeline cached, at version (\d+)", said)
    with Food11Client(f"127.0.0.1:{ports.grpc}") as client:
        (first,) = client.caption([photos["apple.jpg"]])
        (again,) = client.caption([photos["apple.jpg"]])
    assert again == first
    with urllib.request.urlopen(
        f"http://127.0.0.1:{ports.http}/v2/models/food11_pipeline/versions/{version}/stats"
    ) as response:
        (stats,) = json.loads(response.read())["model_stats"]
    assert stats["inference_stats"]["cache_hit"]["count"] == 1


def test_triton_and_api_listen_on_loopback_only_and_stop_quietly_on_ctrl_c(model_repository, tmp_path):
    api_port = free_port()
    with serving(model_repository, tmp_path, "--api-port", str(api_port)) as (ports, process, _):
        assert get_status(f"http://127.0.0.1:{api_port}/readyz") == 200
        servers = servers_of(process)
        # Triton's gRPC listens on an IPv6 socket bound to the IPv4-mapped loopback address.
        assert listening_addresses(servers) <= {"127.0.0.1", "::ffff:127.0.0.1"}
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0
    assert "Traceback" not in output and "CancelledError" not in output, output
    assert "SIGINT: stopping" in output
    for url in (f"http://127.0.0.1:{api_port}/healthz", f"http://127.0.0.1:{ports.http}/v2/health/live"):
        with pytest.raises(OSError):
            get_status(url)
    assert not [server for server in servers if server.is_running()]


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGKILL])
def test_no_server_outlives_serve_py(model_repository, tmp_path, signum):
    """SIGHUP (the terminal closed) stops the servers in order; SIGKILL leaves serve.py no say, so the
    kernel's parent-death signal stops them."""
    with serving(model_repository, tmp_path, "--api-port", str(free_port()), "--", *CLASSIFY_ONLY) as (
        ports,
        process,
        _,
    ):
        servers = servers_of(process)
        assert {server.name() for server in servers} >= {"tritonserver", "triton_python_backend_stub"}
        process.send_signal(signum)
        process.wait(timeout=120)
        _, alive = psutil.wait_procs(servers, timeout=120)
    assert not alive, [server.cmdline()[:2] for server in alive]
    with pytest.raises(OSError):
        get_status(f"http://127.0.0.1:{ports.http}/v2/health/live")


def test_a_port_in_use_is_named_before_anything_starts(model_repository, tmp_path):
    ports = free_ports()
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", ports.grpc))  # e.g. a Triton left over from an earlier run, on every interface
        squatter.listen()
        result = subprocess.run(
            serve_command(model_repository, tmp_path, ports, "--no-api"), capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1
    assert f"error: port {ports.grpc} (Triton gRPC, --grpc-port) on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "server.log").exists()  # tritonserver never ran


def test_a_broken_repository_is_refused_before_tritonserver_starts(model_repository, tmp_path):
    broken = shutil.copytree(model_repository, tmp_path / "model_repository")
    ensemble = broken / "food11_pipeline" / "config.pbtxt"
    wiring = 'key: "input", value: "classifier_pixels"'
    assert ensemble.read_text().count(wiring) == 1
    ensemble.write_text(ensemble.read_text().replace(wiring, 'key: "input", value: "classifier_pixelz"'))
    ports = free_ports()
    result = subprocess.run(
        serve_command(broken, tmp_path, ports, "--no-api"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert (
        "(classifier) consumes tensor 'classifier_pixelz', which no step produces and is not an ensemble input"
    ) in result.stderr
    assert "tritonserver not started" in result.stderr
    assert not (tmp_path / "server.log").exists()  # tritonserver never ran: it would have written its log
    with pytest.raises(OSError):
        get_status(f"http://127.0.0.1:{ports.http}/v2/health/live")
