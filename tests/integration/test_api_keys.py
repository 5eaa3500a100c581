"""Caller keys (FOOD11_API_KEYS_FILE) against the real servers: off by default; on, every route but the
probes, /metrics and the docs needs a key, a request without a known one gets 401 before its body is read,
and one caller flooding the API is refused past its share of the in-flight limit while another's request is
answered. The keys file itself is checked at start-up."""

import asyncio
import hmac
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import Request
from helpers import post_photo

from food11_api import callers
from food11_api.app import create_app
from food11_api.callers import CallerKeys, CallerKeysError, presented_key
from food11_api.dependencies import get_client
from food11_api.settings import ApiSettings

KEYS = {"alice": secrets.token_urlsafe(24), "bob": secrets.token_urlsafe(24)}
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/swagger-ui/swagger-ui.css", "/")


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "api-keys"
    path.write_text("# who may call this API\n" + "".join(f"{name}:{key}\n" for name, key in KEYS.items()))
    return path


@pytest.fixture(scope="module")
def keyed_api(api_factory, keys_file):
    return api_factory(keys_file=keys_file)


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def metric(api_url: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", httpx.get(f"{api_url}/metrics").text, re.MULTILINE)
    assert match, f"no {sample} in /metrics"
    return float(match.group(1))


def announce_an_upload_and_send_none_of_it(api_url: str, headers: dict[str, str]) -> tuple[int, dict, dict]:
    """POST /caption announcing a 5 MB body (under the upload limit) and sending only the headers: an answer
    can only come from what the API decided before reading the body; reading it would wait until the
    socket's timeout. (status, headers, JSON body)."""
    address = urlsplit(api_url)
    lines = [
        "POST /caption HTTP/1.1",
        f"Host: {address.netloc}",
        "Content-Type: multipart/form-data; boundary=photo",
        "Content-Length: 5000000",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    with socket.create_connection((address.hostname, address.port), timeout=30) as connection:
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        received = b""
        while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < _length(received):
            chunk = connection.recv(65536)
            assert chunk, f"the API closed the connection after {received!r}"
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    answered = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), answered, json.loads(body)


def _length(received: bytes) -> int:
    match = re.search(rb"\r\ncontent-length: *(\d+)", received.partition(b"\r\n\r\n")[0], re.IGNORECASE)
    return int(match.group(1)) if match else 0


def test_with_keys_off_a_caption_needs_no_key_and_the_schema_asks_for_none(api, photos):
    response = post_photo(api.url, photos["apple.jpg"])
    assert response.status_code == 200 and response.json()["caption"]
    spec = httpx.get(f"{api.url}/openapi.json").json()
    assert "securitySchemes" not in spec.get("components", {})
    assert "401" not in spec["paths"]["/caption"]["post"]["responses"]


NO_KEY = "a caller key is required: send Authorization: Bearer <key> or X-API-Key: <key>"


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, NO_KEY),
        ({"Authorization": "Bearer not-a-known-key-at-all"}, "unknown caller key"),
        ({"X-API-Key": "not-a-known-key-at-all"}, "unknown caller key"),
        ({"Authorization": f"Basic {KEYS['alice']}"}, NO_KEY),  # a known key, but not as a Bearer token
    ],
    ids=["no key", "wrong bearer", "wrong X-API-Key", "not bearer"],
)
def test_without_a_known_key_captioning_is_401_before_the_body_is_read(keyed_api, headers, detail):
    status, answered, body = announce_an_upload_and_send_none_of_it(keyed_api.url, headers)
    assert status == 401 and body["detail"] == detail
    challenge = 'Bearer realm="food11_api"' + (', error="invalid_token"' if detail != NO_KEY else "")
    assert answered["www-authenticate"] == challenge
    assert body["request_id"] == answered["x-request-id"]


def test_the_right_key_gets_a_caption_by_either_header(keyed_api, photos, client):
    (direct,) = client.caption([photos["apple.jpg"]])
    by_bearer = post_photo(keyed_api.url, photos["apple.jpg"], headers=bearer("alice"))
    by_header = post_photo(keyed_api.url, photos["apple.jpg"], headers={"X-API-Key": KEYS["bob"]})
    assert by_bearer.status_code == by_header.status_code == 200
    assert by_bearer.json()["caption"] == by_header.json()["caption"] == direct.caption
    # /models needs a key too (what it answers past the key is test_api's)
    assert httpx.get(f"{keyed_api.url}/models", headers=bearer("bob"), timeout=60).status_code != 401
    assert httpx.get(f"{keyed_api.url}/models", timeout=60).status_code == 401


def test_probes_metrics_and_docs_stay_open_and_the_schema_declares_the_key(keyed_api):
    for path in OPEN_PATHS:
        assert httpx.get(f"{keyed_api.url}{path}", timeout=60).status_code == 200, path
    spec = httpx.get(f"{keyed_api.url}/openapi.json").json()
    assert set(spec["components"]["securitySchemes"]) == {"CallerKeyBearer", "CallerKeyHeader"}  # Authorize
    for path, method in (("/caption", "post"), ("/predict", "post"), ("/models", "get")):
        operation = spec["paths"][path][method]
        assert operation["security"] == [{"CallerKeyBearer": []}, {"CallerKeyHeader": []}], path
        assert "401" in operation["responses"], path
    assert "security" not in spec["paths"]["/healthz"]["get"]
    exposed = httpx.get(f"{keyed_api.url}/metrics").text
    assert 'food11_caller_requests_in_flight{caller="alice"}' in exposed
    assert not any(key in exposed for key in KEYS.values())  # names, never keys


class Gate:
    """Holds one caller's requests inside the API, admitted and in flight, until the test opens it: real
    load cannot promise to keep a request in flight for as long as a test needs."""

    def __init__(self, caller: str):
        self.caller = caller
        self.reached, self.opened = threading.Event(), threading.Event()

    async def client(self, request: Request):
        """The ``get_client`` override: the API's real client, after the gate for the held caller."""
        if request.state.caller == self.caller:
            self.reached.set()
            await asyncio.to_thread(self.opened.wait, 60)
        return request.app.state.client


def test_a_flooding_caller_is_refused_past_its_share_while_another_is_answered(api_factory, keys_file, photos):
    """A limit pinned at 2 and a share of 0.5: alice may hold 1. Eight of hers at once: the one let in is
    held, the other seven are refused at once; bob is still answered."""
    gate = Gate("alice")
    api = api_factory(
        keys_file=keys_file,
        min_in_flight=2,
        max_in_flight=2,
        caller_share=0.5,
        retry_after_s=3,
        dependency_overrides={get_client: gate.client},
    )
    with ThreadPoolExecutor(8) as pool:
        flood = [pool.submit(post_photo, api.url, photos["apple.jpg"], headers=bearer("alice")) for _ in range(8)]
        finished = []
        for future in as_completed(flood, timeout=120):
            finished.append(future)
            if len(finished) == 7:
                break
        assert gate.reached.is_set()
        assert metric(api.url, 'food11_caller_requests_in_flight{caller="alice"}') == 1
        steady = post_photo(api.url, photos["orange.jpg"], headers=bearer("bob"))
        gate.opened.set()
        (held,) = [future.result() for future in flood if future not in finished]
    refused = [future.result() for future in finished]
    assert [response.status_code for response in refused] == [503] * 7
    assert {response.headers["retry-after"] for response in refused} == {"3"}
    assert refused[0].json()["detail"] == (
        "over capacity: this caller's share is full: alice has 1 requests in flight, its share (0.5) of this "
        "API's limit of 2; retry after 3 s"
    )
    assert steady.status_code == 200 and steady.json()["caption"]
    assert held.status_code == 200 and held.json()["caption"]
    assert metric(api.url, 'food11_refused_total{by="caller_share"}') == 7
    assert metric(api.url, 'food11_refused_total{by="api"}') == 0


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read the caller keys file .*: No such file or directory"),
        ("# nobody yet\n\n", "holds no key"),
        ("alice:short\n", "line 1: alice's key must be at least 16"),
        (f"al ice:{KEYS['alice']}\n", "line 1: the name must be"),
        (f"alice:{KEYS['alice']}\nalice:{KEYS['bob']}\n", "line 2: the name alice is given twice"),
        (f"alice:{KEYS['alice']}\nbob:{KEYS['alice']}\n", "line 2: bob's key is another caller's too"),
    ],
    ids=["missing", "empty", "short key", "bad name", "name twice", "key twice"],
)
def test_a_keys_file_that_cannot_be_used_stops_the_api_at_start_up(tmp_path, content, reason):
    path = tmp_path / "api-keys"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CallerKeysError, match=reason):
        create_app(ApiSettings(keys_file=path))


def test_the_api_process_says_why_it_does_not_start(tmp_path):
    missing = tmp_path / "no-such-file"
    done = subprocess.run(
        [sys.executable, "-m", "food11_api"],
        env={**os.environ, "FOOD11_API_KEYS_FILE": str(missing)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: cannot read the caller keys file {missing}: No such file or directory"


def test_a_bare_key_is_named_by_its_line_and_every_key_is_compared(monkeypatch):
    keys = CallerKeys.parse(f"# comment\n{KEYS['alice']}\nbob:{KEYS['bob']}\n")
    assert keys.names == ("caller-2", "bob")
    compared, compare = [], hmac.compare_digest

    def counting_compare(a, b):
        compared.append(b)
        return compare(a, b)

    monkeypatch.setattr(callers.hmac, "compare_digest", counting_compare)
    assert keys.caller(KEYS["alice"]) == "caller-2"  # the first key matches, and the second is compared too
    assert keys.caller("a wrong key") is None
    assert len(compared) == 4


def test_the_key_is_read_from_a_bearer_token_or_the_api_key_header():
    assert presented_key({b"authorization": b"Bearer abc"}) == "abc"
    assert presented_key({b"authorization": b"bearer  abc "}) == "abc"
    assert presented_key({b"x-api-key": b"def"}) == "def"
    assert presented_key({b"authorization": b"Basic abc"}) is None
    assert presented_key({}) is None
