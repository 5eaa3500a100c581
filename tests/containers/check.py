"""The container check (``make container-check``): both images built from Dockerfile.triton and Dockerfile.api
on stand-in bases, brought up by Docker Compose v2 from compose.yaml + compose.cpu.yaml (with
tests/containers/compose.check.yaml: the stand-in bases, the host network), and checked from outside:

1. a Docker engine answers (one already running is used; else, as root on Debian, docker.io is installed and
   a dockerd started without a bridge or iptables rules, and stopped at the end), and Compose v2 is there
   (else Debian's docker-compose 2.x package is installed);
2. the stand-in bases (tests/containers/standin-bases.sh) and a tiny stand-in model repository are built;
3. ``docker compose up -d --build --wait``: Docker reports both containers healthy (the API is started only
   once Triton is, by compose.yaml's depends_on);
4. tests/photos/apple.jpg is captioned through the API container (HTTP on 127.0.0.1:8080), and Triton's
   statistics show that the Triton container ran the ensemble; asked twice more, the same answer, counted as
   response-cache hits; the captioner's stub killed inside the Triton container heals by itself (a photo not
   asked before is captioned in full again);
5. Triton's admin APIs answer only the key this check made and handed to compose (FOOD11_TRITON_ADMIN_KEY):
   POST /v2/logging is refused (403) without the header and answered (200) with it, gRPC's repository index is
   refused (UNAVAILABLE) without it and answered with it; the key is in neither container's log;
6. both containers run as non-root users (every process of them), with a read-only root filesystem, no
   capabilities, no new privileges; the Triton image holds no tritonclient (NVIDIA's image has none);
7. ``docker compose down``, also when a step failed (the containers' log tails are printed first).

Prints what it checked; exits 1 at the first failure, naming it. Logs go to build/containers/.
Usage: .venv/bin/python tests/containers/check.py [--rebuild-bases]   (as root where Docker is not running)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from pipeline_src.contract import ENSEMBLE
from pipeline_src.serving import admin
from pipeline_src.serving.processes import spawn
from pipeline_src.steps.labels import FOOD11_CLASSES

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORK = ROOT / "build" / "containers"
PROJECT = "food11-check"
COMPOSE_FILES = ("compose.yaml", "compose.cpu.yaml", "tests/containers/compose.check.yaml")
PORTS = {8000: "Triton HTTP", 8001: "Triton gRPC", 8002: "Triton metrics", 8080: "the API"}
PHOTO = ROOT / "tests" / "photos" / "apple.jpg"
# Asked for the first time after the captioner's stub is killed: its answer cannot come from the response cache.
UNSEEN_PHOTO = ROOT / "tests" / "photos" / "orange.jpg"
API = "http://127.0.0.1:8080"
TRITON_HTTP = "http://127.0.0.1:8000"
TRITON_GRPC = "127.0.0.1:8001"
TRITON_USER = "triton-server"  # NVIDIA's image's user, uid 1000 (Dockerfile.triton runs the server as it)
TRITON_UID = 1000
# Debian's Compose v2: bookworm ships only Compose v1 (1.29, which does not read `!reset`); trixie's package is
# Compose 2.x, a Go program whose one dependency (libc6 >= 2.34) bookworm meets.
COMPOSE_SUITE = "trixie"
HEALTHY_TIMEOUT_S = 600  # compose.yaml gives Triton a 10-minute start period
# compose.yaml's real-weights settings (docs/models.md), which would make the image or its start another one.
MODEL_SETTINGS = ("FOOD11_BLIP", "FOOD11_CLASSIFIER", "FOOD11_MODEL_BUILD", "FOOD11_MODELS_MODE")
DAEMON_FLAGS = ("--bridge=none", "--iptables=false")  # host network only: no docker0, no 172.17.x, no rules


class CheckFailed(Exception):
    pass


STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"container check [{time.monotonic() - STARTED:4.0f} s]: {message}", flush=True)


PASSED: list[str] = []


def passed(message: str) -> None:
    PASSED.append(message)
    say(f"ok   {message}")


def run(
    command: list[str], log: Path | None = None, check: bool = True, timeout: float | None = None, env=None, cwd=ROOT
) -> subprocess.CompletedProcess[str]:
    """Run a command; its output to ``log`` (appended) or captured. CheckFailed with the output's tail."""
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as out:
            out.write(f"\n$ {' '.join(command)}\n")
            out.flush()
            result = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env, cwd=cwd
            )
        output = ""
    else:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
        output = result.stdout + result.stderr
    if check and result.returncode != 0:
        tail = output if log is None else log.read_text(errors="replace")
        tail = "\n".join(tail.strip().splitlines()[-40:])
        where = f" (whole log: {log})" if log else ""
        raise CheckFailed(f"`{' '.join(command)}` exited with {result.returncode}{where}:\n{tail}")
    return result


def is_root() -> bool:
    return os.geteuid() == 0


def debian_install(packages: list[str], log: Path) -> None:
    if not (is_root() and shutil.which("apt-get")):
        raise CheckFailed(f"{', '.join(packages)} missing, and this is not root on Debian: install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], log=log, env=env)
    run(["apt-get", "install", "-y", "-qq", *packages], log=log, env=env)


def docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


class Engine:
    """The Docker daemon: one already running, or one started here (and stopped by stop())."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if docker_answers():
            passed("a Docker daemon is running: using it")
            return
        if not shutil.which("dockerd"):
            say("installing docker.io from Debian")
            debian_install(["docker.io"], WORK / "apt.log")
        if not is_root():
            raise CheckFailed("no Docker daemon answers and this is not root: start dockerd (as root) first")
        log = open(WORK / "dockerd.log", "a")  # noqa: SIM115 (open as long as the daemon runs)
        # spawn: the daemon gets SIGTERM (a clean shutdown) if this check dies without reaching stop().
        self.process = spawn(["dockerd", *DAEMON_FLAGS], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not docker_answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join((WORK / "dockerd.log").read_text(errors="replace").splitlines()[-20:])
                raise CheckFailed(f"dockerd did not come up (log {WORK / 'dockerd.log'}):\n{tail}")
            time.sleep(0.5)
        passed(f"started dockerd {' '.join(DAEMON_FLAGS)} (pid {self.process.pid}; stopped at the end)")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        say(f"stopped the dockerd this check started (pid {self.process.pid})")


def ensure_compose() -> str:
    version = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, text=True)
    if version.returncode != 0:
        say(f"installing Compose v2 from Debian ({COMPOSE_SUITE}'s docker-compose package)")
        install_debian_compose()
        version = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, text=True)
        if version.returncode != 0:
            raise CheckFailed(f"`docker compose` still unknown after installing it: {version.stderr.strip()}")
    found = version.stdout.strip()
    if not found.lstrip("v").startswith("2."):
        raise CheckFailed(f"`docker compose` is {found}, not Compose v2")
    passed(f"Compose v2 ({found})")
    return found


def install_debian_compose() -> None:
    """Debian's docker-compose package from trixie, fetched with a private apt configuration (the system's
    sources are left as they are) and installed with apt-get, which checks its dependencies."""
    if not (is_root() and shutil.which("apt-get")):
        raise CheckFailed("`docker compose` (Compose v2) is missing and this is not root on Debian: install it")
    apt = WORK / "apt"
    for folder in ("lists/partial", "cache/archives/partial", "debs"):
        (apt / folder).mkdir(parents=True, exist_ok=True)
    sources = apt / "sources.list"
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    sources.write_text(f"deb [signed-by={keyring}] http://deb.debian.org/debian {COMPOSE_SUITE} main\n")
    options = [
        f"-oDir::Etc::SourceList={sources}",
        "-oDir::Etc::SourceParts=/nonexistent",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        "-oAPT::Sandbox::User=root",
    ]
    log = WORK / "apt.log"
    run(["apt-get", *options, "update", "-qq"], log=log)
    for old in (apt / "debs").glob("*.deb"):
        old.unlink()
    # apt-get download writes to the working directory.
    run(["apt-get", *options, "download", f"docker-compose/{COMPOSE_SUITE}"], log=log, cwd=apt / "debs")
    (deb,) = (apt / "debs").glob("docker-compose_*.deb")
    run(["apt-get", "install", "-y", "-qq", str(deb)], log=log, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def compose_command(*args: str) -> list[str]:
    files = [part for name in COMPOSE_FILES for part in ("-f", name)]
    return ["docker", "compose", "-p", PROJECT, *files, *args]


def check_ports_free() -> None:
    for port, role in PORTS.items():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise CheckFailed(
                    f"port {port} ({role}) on 127.0.0.1 is taken; the containers use the host network and need it "
                    f"(see who holds it: ss -ltnp 'sport = :{port}')"
                ) from None
    passed(f"ports {', '.join(map(str, PORTS))} on 127.0.0.1 are free for the containers")


def build_models(destination: Path) -> None:
    """The tiny stand-in repository (configs and model.py files from model_repository/, models built here)."""
    shutil.rmtree(destination, ignore_errors=True)
    code = (
        "import sys; from pathlib import Path; from pipeline_src.model_build.cli import build_repository_copy; "
        "build_repository_copy(Path(sys.argv[1]), 'tiny')"
    )
    run([sys.executable, "-c", code, str(destination)], log=WORK / "models.log")
    passed(f"built the tiny stand-in model repository in {destination.relative_to(ROOT)}")


def container_id(service: str, env) -> str:
    ids = run(compose_command("ps", "-a", "-q", service), env=env).stdout.split()
    if len(ids) != 1:
        raise CheckFailed(f"expected one {service} container, compose lists {ids}")
    return ids[0]


def inspect(container: str) -> dict:
    return json.loads(run(["docker", "inspect", container]).stdout)[0]


def up(env, timeout_s: float) -> None:
    """`compose up -d --build --wait`, watched: a Triton that restarts (a step failed to load) or a container
    reported unhealthy ends the wait at once, rather than after the 10-minute start period."""
    log = WORK / "up.log"
    with open(log, "a") as out:
        process = subprocess.Popen(
            compose_command("up", "-d", "--build", "--wait", "--wait-timeout", str(int(timeout_s))),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        deadline = time.monotonic() + timeout_s + 900  # the builds come first
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    raise CheckFailed(f"`compose up` still running after {timeout_s + 900:.0f} s")
                for service in ("triton", "api"):
                    ids = subprocess.run(
                        compose_command("ps", "-a", "-q", service), capture_output=True, text=True, env=env, cwd=ROOT
                    ).stdout.split()
                    for cid in ids:
                        container = inspect(cid)
                        state, restarts = container["State"], container["RestartCount"]
                        health = state.get("Health", {}).get("Status")
                        if restarts or health == "unhealthy" or state["Status"] in ("exited", "dead"):
                            raise CheckFailed(
                                f"the {service} container's process exited or failed its health check (state "
                                f"{state['Status']}, health {health}, restarted {restarts} times): its log is below"
                            )
                time.sleep(3)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(30)
    if process.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-30:])
        raise CheckFailed(f"`docker compose up` exited with {process.returncode} (log {log}):\n{tail}")


def multipart(field: str, path: Path, content_type: str) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{path.name}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n".encode()
        + path.read_bytes()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def ensemble_inferences() -> int:
    stats = get_json(f"{TRITON_HTTP}/v2/models/{ENSEMBLE}/stats")
    return sum(int(model["inference_count"]) for model in stats["model_stats"])


def ensemble_cache_hits() -> int:
    stats = get_json(f"{TRITON_HTTP}/v2/models/{ENSEMBLE}/stats")
    return sum(int(model["inference_stats"]["cache_hit"]["count"]) for model in stats["model_stats"])


def post_caption(photo: Path) -> dict:
    body, content_type = multipart("photo", photo, "image/jpeg")
    request = urllib.request.Request(f"{API}/caption", data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise CheckFailed(f"POST /caption answered {error.code}: {error.read()[:2000]!r}") from None


def caption_through_the_api() -> None:
    before = ensemble_inferences()
    answer = post_caption(PHOTO)
    problems = []
    if answer.get("label") not in FOOD11_CLASSES:
        problems.append(f"label {answer.get('label')!r} is not a Food-11 class")
    if not 0.0 <= float(answer.get("probability", -1)) <= 1.0:
        problems.append(f"probability {answer.get('probability')!r}")
    if not str(answer.get("caption", "")).startswith(f"a photo of {str(answer.get('label', '')).lower()}"):
        problems.append(f"caption {answer.get('caption')!r} is not conditioned on the label")
    if answer.get("caption_status") != "ok":
        problems.append(f"caption_status {answer.get('caption_status')!r}")
    if problems:
        raise CheckFailed(f"POST /caption with {PHOTO.name}: " + "; ".join(problems) + f"\n{answer}")
    # Triton counts a request once it has released it, which may come a moment after the answer: wait for it.
    deadline = time.monotonic() + 10
    while (after := ensemble_inferences()) <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    if after <= before:
        raise CheckFailed(f"Triton's {ENSEMBLE} statistics did not count the request ({before} -> {after})")
    passed(
        f"{PHOTO.name} captioned through the API container: {answer['label']} ({answer['probability']:.3f}), "
        f"caption_status {answer['caption_status']}, caption {answer['caption'][:60]!r}...; "
        f"Triton's {ENSEMBLE} inference count {before} -> {after}"
    )


def ask_again_from_the_cache() -> None:
    """The Triton container caches the ensembles' answers (FOOD11_RESPONSE_CACHE_MIB): the same photo again is
    the same answer, counted as a cache hit."""
    hits = ensemble_cache_hits()
    first, again = (
        {name: value for name, value in post_caption(PHOTO).items() if name != "elapsed_ms"} for _ in range(2)
    )
    if again != first:
        raise CheckFailed(f"{PHOTO.name} asked again got another answer: {first} then {again}")
    deadline = time.monotonic() + 10  # counted once released, as above
    while ensemble_cache_hits() < hits + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    if ensemble_cache_hits() < hits + 2:
        raise CheckFailed(f"Triton's {ENSEMBLE} statistics count no cache hits for {PHOTO.name} asked again")
    passed(f"{PHOTO.name} asked twice more: the same answer, from Triton's response cache (its statistics' cache hits)")


def check_a_killed_stub_heals(env) -> None:
    """The captioner's stub process killed inside the Triton container: its supervisor's watchdog heals it, and a
    photo is captioned in full again, with nobody's help (pipeline_src/serving/watchdog.py)."""
    triton = container_id("triton", env)
    find = (
        "import os\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        line = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
        "    except OSError:\n"
        "        continue\n"
        "    if line[0].endswith(b'triton_python_backend_stub') and b'/captioner/' in line[1]:\n"
        "        os.kill(int(pid), 9); print(pid); break\n"
    )
    killed = run(["docker", "exec", triton, "python3", "-c", find]).stdout.strip()
    if not killed:
        raise CheckFailed("no captioner stub process found in the Triton container")
    started, deadline, answer = time.monotonic(), time.monotonic() + 180, {}
    body, content_type = multipart("photo", UNSEEN_PHOTO, "image/jpeg")
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"{API}/caption", data=body, headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                answer = json.loads(response.read())
        except (urllib.error.URLError, OSError):
            answer = {}
        if answer.get("caption_status") == "ok" and answer.get("caption"):
            break
        time.sleep(1)
    else:
        raise CheckFailed(f"no complete caption within 180 s of killing the captioner's stub: {answer}")
    healed = time.monotonic() - started
    # The watchdog says so on its next poll after the load, which can come after the first full caption.
    said_by = time.monotonic() + 30
    while "watchdog: captioner: healed in" not in run(compose_command("logs", "--no-color", "triton"), env=env).stdout:
        if time.monotonic() > said_by:
            raise CheckFailed("the Triton container's log does not say the captioner was healed (30 s after a caption)")
        time.sleep(1)
    passed(
        f"the captioner's stub killed (pid {killed}) in the Triton container: healed by its supervisor, a full "
        f"caption again {healed:.0f} s later"
    )


def http_status(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def check_admin_key(key: str, env) -> None:
    """The admin groups (admin.RESTRICTED) answer only a caller with the key compose passed to the container."""
    url = f"{TRITON_HTTP}/v2/logging"
    refused, refusal = http_status(url, b"{}", {})
    if refused != 403 or admin.HEADER not in refusal:
        raise CheckFailed(f"POST /v2/logging without {admin.HEADER} answered {refused}, not 403: {refusal[:300]!r}")
    wrong, _ = http_status(url, b"{}", admin.http_headers("not-" + key))
    answered, settings = http_status(url, b"{}", admin.http_headers(key))
    if wrong != 403 or answered != 200 or "log_info" not in settings:
        raise CheckFailed(f"POST /v2/logging: a wrong key {wrong}, the key {answered} (not 403, 200): {settings!r}")

    with grpcclient.InferenceServerClient(TRITON_GRPC) as client:
        try:
            client.get_model_repository_index()
        except InferenceServerException as error:
            if admin.HEADER not in str(error):
                raise CheckFailed(f"gRPC RepositoryIndex without the key failed, but not on the key: {error}") from None
        else:
            raise CheckFailed("gRPC RepositoryIndex answered without the key")
        index = client.get_model_repository_index(headers=admin.grpc_headers(key), as_json=True)
        if ENSEMBLE not in {model["name"] for model in index.get("models", [])}:
            raise CheckFailed(f"gRPC RepositoryIndex with the key does not list {ENSEMBLE}: {index}")
    for service in ("triton", "api"):
        logs = run(compose_command("logs", "--no-color", service), env=env).stdout
        if key in logs:
            raise CheckFailed(f"the {service} container's log holds the admin key")
    passed(
        f"Triton's admin APIs need the key compose passed ({admin.KEY_ENV}): POST /v2/logging without "
        f"{admin.HEADER} 403, with a wrong key 403, with the key 200; gRPC RepositoryIndex without it refused, with "
        "it answered; statistics answered without it (above); the key in neither container's log"
    )


def process_report(container: dict, python: str) -> list[tuple[int, str, int, int, int, int]]:
    """(pid, command, uid, effective, bounding capability sets, no_new_privs) of every process in a container."""
    code = (
        "import os\n"
        "for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):\n"
        "    try:\n"
        "        status = dict(line.split(':', 1) for line in open(f'/proc/{pid}/status') if ':' in line)\n"
        "    except OSError:\n"
        "        continue\n"
        "    print(pid, status['Name'].strip(), status['Uid'].split()[1], int(status['CapEff'], 16),"
        " int(status['CapBnd'], 16), status['NoNewPrivs'].strip())\n"
    )
    report = run(["docker", "exec", container["Id"], python, "-c", code]).stdout.split("\n")
    rows = [line.split() for line in report if line.strip()]
    return [(int(pid), name, int(uid), int(eff), int(bnd), int(nnp)) for pid, name, uid, eff, bnd, nnp in rows]


def check_unprivileged(name: str, container: dict, python: str, want_user: str, first: str | None = None) -> str:
    """Every process of a container (the probe's own python too) non-root, with no capabilities and no new
    privileges; a read-only root with /tmp writable; compose's cap_drop and no-new-privileges in its config."""
    config, host = container["Config"], container["HostConfig"]
    if config.get("User") != want_user:
        raise CheckFailed(f"the {name} container's user is {config.get('User') or 'root'!r}, not {want_user!r}")
    processes = process_report(container, python)
    (init,) = [row for row in processes if row[0] == 1]
    if first is not None and init[1] != first:
        raise CheckFailed(f"the {name} container's process 1 is {init[1]}, not {first}")
    privileged = [row for row in processes if row[2] == 0 or row[3] or row[4] or not row[5]]
    if privileged:
        raise CheckFailed(
            f"{name}: processes as root, with capabilities or without no_new_privs "
            f"(pid, name, uid, CapEff, CapBnd, NoNewPrivs): {privileged}"
        )
    # /var/tmp is writable by anyone in a Debian image: only a read-only root refuses it; /tmp is compose's tmpfs.
    probe = "import sys; open(sys.argv[1], 'w').write('x')"
    write = run(["docker", "exec", container["Id"], python, "-c", probe, "/var/tmp/probe"], check=False).stderr.strip()
    if not host.get("ReadonlyRootfs") or "Read-only file system" not in write:
        raise CheckFailed(f"the {name} root is not read-only (ReadonlyRootfs {host.get('ReadonlyRootfs')}): {write!r}")
    run(["docker", "exec", container["Id"], python, "-c", probe, "/tmp/probe"])
    if host.get("CapDrop") != ["ALL"] or "no-new-privileges:true" not in (host.get("SecurityOpt") or []):
        raise CheckFailed(f"{name} keeps capabilities or privileges: {host.get('CapDrop')}, {host.get('SecurityOpt')}")
    names = sorted({row[1] for row in processes})
    return f"{len(processes)} processes ({', '.join(names)}) as uid {sorted({row[2] for row in processes})}"


def image_holds(container: dict, python: str, module: str) -> bool:
    """Whether ``module`` can be imported in the container (found, not imported)."""
    probe = f"import importlib.util as u, sys; sys.exit(u.find_spec({module!r}) is None)"
    return run(["docker", "exec", container["Id"], python, "-c", probe], check=False).returncode == 0


def listening(port: int) -> set[str]:
    """The addresses something listens on at ``port`` on this host (the containers' network too)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    raw = bytes.fromhex(address)
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host byte order
                    family = socket.AF_INET if width == 8 else socket.AF_INET6
                    found.add(socket.inet_ntop(family, words).removeprefix("::ffff:"))  # IPv4 on an IPv6 socket
    return found


def check_containers(env) -> None:
    api, triton = (inspect(container_id(service, env)) for service in ("api", "triton"))
    for name, container in (("triton", triton), ("api", api)):
        if container["HostConfig"]["NetworkMode"] != "host":
            raise CheckFailed(f"{name} is on network {container['HostConfig']['NetworkMode']}, not the host's")
    addresses = {port: listening(port) for port in PORTS}
    if any(found != {"127.0.0.1"} for found in addresses.values()):
        raise CheckFailed(f"the servers should listen on 127.0.0.1 only: {addresses}")
    passed(
        f"both containers on the host network only, listening on 127.0.0.1 only (ports {', '.join(map(str, PORTS))})"
    )

    processes = check_unprivileged("API", api, "python", "nobody")
    passed(
        f"the API runs as {api['Config']['User']}: {processes}, on a read-only root (writing /var/tmp fails: "
        "Read-only file system; /tmp, a tmpfs, takes a file), no capabilities, no new privileges"
    )
    processes = check_unprivileged("Triton", triton, "python3", f"{TRITON_UID}:{TRITON_UID}", first="python3")
    named = run(["docker", "exec", triton["Id"], "id", "-un"]).stdout.strip()
    if named != TRITON_USER:
        raise CheckFailed(f"uid {TRITON_UID} in the Triton image is {named!r}, not {TRITON_USER} (NVIDIA's image's)")
    passed(
        f"Triton runs as {TRITON_USER} ({triton['Config']['User']}): {processes}, process 1 its supervisor, on a "
        "read-only root (writing /var/tmp fails; /tmp, a tmpfs, takes a file), no capabilities, no new privileges"
    )

    if image_holds(triton, "python3", "tritonclient"):
        raise CheckFailed("the Triton image holds tritonclient (NVIDIA's image has none: the steps must not need it)")
    passed("the Triton image holds no tritonclient; its steps loaded without it")

    # The images carry the product alone: the measurement package stays in the checkout.
    for name, python, container in (("Triton", "python3", triton), ("API", "python", api)):
        if image_holds(container, python, "benchmarks"):
            raise CheckFailed(f"the {name} image holds the benchmarks package: the images carry the product alone")
    passed("neither image holds the benchmarks package")


def health_report(env) -> None:
    for service in ("triton", "api"):
        state = inspect(container_id(service, env))["State"]
        health = state.get("Health", {}).get("Status")
        if health != "healthy":
            raise CheckFailed(f"Docker reports {service} {health}, not healthy")
    passed("Docker reports both containers healthy (Triton's /v2/health/ready, the API's /readyz)")


def leftovers() -> list[str]:
    """The check's containers that still exist (by Compose's project label, whatever the compose files say)."""
    command = ["docker", "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"]
    return run(command, check=False).stdout.split()


def logs_tail(env) -> None:
    for service in ("triton", "api"):
        result = subprocess.run(
            compose_command("logs", "--no-color", "--tail", "40", service),
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        print(f"----- {service}: the last lines of its log -----", file=sys.stderr)
        print((result.stdout + result.stderr).rstrip() or "(no container, no log)", file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rebuild-bases", action="store_true", help="debootstrap the Debian base again")
    args = parser.parse_args(argv)

    # SIGTERM (a CI timeout, kill) ends the check through the same clean-up as a failure.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    WORK.mkdir(parents=True, exist_ok=True)
    for stale in ("up.log", "models.log", "apt.log", "bases.log"):
        (WORK / stale).unlink(missing_ok=True)
    started = time.monotonic()
    engine = Engine()
    models = WORK / "models"
    key = admin.new_key()  # the operator's key, as compose reads it from `.env` or the environment
    env = dict(os.environ, FOOD11_CHECK_MODELS=str(models), **{admin.KEY_ENV: key})
    for setting in MODEL_SETTINGS:  # the check runs the default (serve the tiny stand-in), whatever this shell sets
        env.pop(setting, None)
    brought_up = False
    failed = True
    try:
        engine.start()
        ensure_compose()
        run(compose_command("down", "--remove-orphans"), env=env)  # what an interrupted run left
        say("building the stand-in bases (tests/containers/standin-bases.sh)")
        run(
            ["bash", str(HERE / "standin-bases.sh"), *(["--rebuild"] if args.rebuild_bases else [])],
            log=WORK / "bases.log",
            env=dict(os.environ, PYTHON=sys.executable),  # reads pyproject.toml with tomllib
        )
        passed("stand-in bases local/python:3.11-slim-standin and local/tritonserver-standin")
        build_models(models)
        check_ports_free()
        say("docker compose up -d --build --wait (compose.yaml + compose.cpu.yaml + compose.check.yaml)")
        step = time.monotonic()
        brought_up = True
        up(env, HEALTHY_TIMEOUT_S)
        passed(f"both images built from Dockerfile.triton and Dockerfile.api and up in {time.monotonic() - step:.0f} s")
        health_report(env)
        caption_through_the_api()
        ask_again_from_the_cache()
        check_admin_key(key, env)
        check_containers(env)
        check_a_killed_stub_heals(env)
        failed = False
    except KeyboardInterrupt:
        print("container check: interrupted", file=sys.stderr, flush=True)
    except Exception as failure:
        kind = "" if isinstance(failure, CheckFailed) else f"{type(failure).__name__}: "
        print(f"container check: FAILED: {kind}{failure}", file=sys.stderr, flush=True)
        if brought_up:
            logs_tail(env)
    finally:
        if brought_up:
            down = compose_command("down", "--remove-orphans", "--timeout", "30")
            if run(down, check=False, log=WORK / "down.log", env=env).returncode == 0 and not leftovers():
                say("containers removed (docker compose down)")
            else:
                failed = True
                print(f"container check: FAILED: containers left: see {WORK / 'down.log'}", file=sys.stderr, flush=True)
        shutil.rmtree(models, ignore_errors=True)
        if docker_answers():  # only this check's superseded (untagged) images
            subprocess.run(["docker", "image", "prune", "-f", "--filter", "label=food11.check"], capture_output=True)
        engine.stop()
    elapsed = time.monotonic() - started
    if failed:
        say(f"FAILED after {elapsed:.0f} s (logs in {WORK.relative_to(ROOT)}/)")
    else:
        say(f"PASSED in {elapsed:.0f} s")
    print(f"containers: {len(PASSED)} passed, {int(failed)} failed", flush=True)  # a closing line CI reads
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
