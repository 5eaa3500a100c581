"""scripts/start_triton.py: ready on the ports asked for, log in a file, clean stop on SIGTERM/SIGINT."""

import signal
import subprocess
import sys
import urllib.request

import pytest

from pipeline_src.launcher import PROJECT_ROOT

from conftest import free_ports

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_starts_serves_and_stops_cleanly(model_repository, tmp_path, signum):
    ports = free_ports()
    log_file = tmp_path / "server.log"
    process = subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "scripts" / "start_triton.py"), "--model-repository", str(model_repository),
         "--http-port", str(ports.http), "--grpc-port", str(ports.grpc), "--metrics-port", str(ports.metrics),
         "--work-dir", str(tmp_path / "work"), "--log-file", str(log_file)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        for line in process.stdout:
            if "tritonserver ready" in line or "exited" in line:
                break
        assert "tritonserver ready" in line, line
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/models/food11_pipeline/ready") as response:
            assert response.status == 200
        process.send_signal(signum)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert "successfully unloaded 'food11_pipeline'" in log_file.read_text()
    with pytest.raises(OSError):  # nothing listens any more
        urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/health/live", timeout=2)
