"""What the tests share besides fixtures: the photos, small builders of image bytes, and an upload
to the API. Imported as ``helpers`` (pytest's ``pythonpath`` puts tests/ on sys.path); fixtures live in
the conftest.py files, which no test module imports."""

from __future__ import annotations

import contextlib
import io
import struct
import sys
import zlib
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

from pipeline_src import PROJECT_ROOT, contract
from pipeline_src.repository.loading import parse_config
from pipeline_src.serving.launcher import TritonServer

PHOTOS_DIR = Path(__file__).parent / "photos"
FRUIT_PHOTOS = ("apple.jpg", "orange.jpg", "fruits.jpg")
APPLE = (PHOTOS_DIR / "apple.jpg").read_bytes()
# A test's tritonserver stops within 3 s rather than Triton's 30: after a failed load or a cancelled call,
# Triton 2.51 counts a model as still live and waits out its whole exit timeout.
QUICK_EXIT = "--exit-timeout-secs=3"
# Tritonserver's flags for a test that needs no caption: the classify ensemble's steps alone (preprocess, classifier,
# label: every kind of process the whole pipeline has) start and stop in half its time. serve.py takes them after "--".
CLASSIFY_ONLY = ("--model-control-mode=explicit", f"--load-model={contract.CLASSIFY_ENSEMBLE}")


@contextlib.contextmanager
def running(server: TritonServer, ready_timeout_s: float = 300.0):
    """The server started, then killed: its graceful stop (3-4 s of unloading) has tests of its own
    (test_serve.py), and a kill leaves nothing behind (stop() frees its stubs' shared memory)."""
    server.start(ready_timeout_s)
    try:
        yield server
    finally:
        server.stop(timeout_s=0)


def extra_outputs(repository: Path, ensemble: str = contract.ENSEMBLE) -> list[str]:
    """The outputs ``ensemble`` declares beyond the wire contract, in its config's order: what every surface
    answers under ``extra`` (none for the shipped food11_pipeline; a newcomer's step adds some)."""
    config = parse_config(repository / ensemble / "config.pbtxt")
    return [output.name for output in config.output if output.name not in contract.CORE_OUTPUTS]


def post_photo(
    base_url: str, data: bytes, filename: str = "photo.jpg", content_type: str = "image/jpeg", **kwargs
) -> httpx.Response:
    """Upload one photo to the API's /caption, as the photo page does."""
    return httpx.post(f"{base_url}/caption", files={"photo": (filename, data, content_type)}, timeout=120, **kwargs)


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def gradient(width: int = 64, height: int = 48) -> Image.Image:
    """An RGB image whose content is not symmetric, so rotations and crops are detectable."""
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    red = np.broadcast_to(x, (height, width))
    green = np.broadcast_to(y, (height, width))
    blue = np.full((height, width), 64, dtype=np.float32)
    return Image.fromarray(np.stack([red, green, blue], axis=-1).astype(np.uint8))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height but carries almost no pixel data (a decompression-bomb
    shape): refusing it must not need decoding it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def serve_command(model_repository, tmp_path, ports, *extra) -> list[str]:
    """scripts/serve.py on ``ports``, its state and log under ``tmp_path``; ``extra``: more of its options."""
    return [
        sys.executable,
        str(PROJECT_ROOT / "scripts" / "serve.py"),
        "--model-repository",
        str(model_repository),
        "--http-port",
        str(ports.http),
        "--grpc-port",
        str(ports.grpc),
        "--metrics-port",
        str(ports.metrics),
        "--work-dir",
        str(tmp_path / "work"),
        "--log-file",
        str(tmp_path / "server.log"),
        # No response cache unless a test asks (a later --response-cache-mib in ``extra`` wins): a fault test's
        # repeated photo must meet the steps, not the cache (test_serve.py and test_response_cache.py test it).
        "--response-cache-mib",
        "0",
        *extra,
    ]


def post_json_status(url: str, body: dict, headers: dict | None = None) -> int:
    """The HTTP status of a JSON POST, an error status included (Triton's admin APIs answer 403 without the key)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


# Triton's admin calls (pipeline_src/serving/admin.py): refused without the server's key.
ADMIN_CALLS = (
    "load_model",
    "unload_model",
    "get_model_repository_index",
    "get_trace_settings",
    "update_trace_settings",
    "get_log_settings",
    "update_log_settings",
    "register_system_shared_memory",
    "unregister_system_shared_memory",
    "get_system_shared_memory_status",
)


def admin_client(server):
    """A tritonclient.grpc client of ``server`` (a TritonServer) presenting its admin key on the admin calls."""
    import functools

    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    for name in ADMIN_CALLS:
        setattr(client, name, functools.partial(getattr(client, name), headers=server.admin_grpc_headers))
    return client
