"""Triton's model repository API over HTTP (load, unload, the ready models), with the admin key: what the
reload watcher and the stub watchdog call. Standard library only."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping


class TritonRepositoryApi:
    """Triton's model repository API over HTTP, with the admin key (TritonServer.admin_http_headers)."""

    def __init__(self, http_url: str, headers: Mapping[str, str], timeout_s: float = 600.0):
        self.base_url = http_url if "://" in http_url else f"http://{http_url}"
        self.headers = {"Content-Type": "application/json", **headers}
        self.timeout_s = timeout_s  # a load answers when it is done: a large model takes a while

    def _post(self, path: str, body: dict) -> bytes:
        request = urllib.request.Request(self.base_url + path, json.dumps(body).encode(), self.headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read()

    def ready_models(self) -> set[str]:
        return {entry["name"] for entry in json.loads(self._post("/v2/repository/index", {"ready": True}))}

    def load(self, model: str) -> str | None:
        """None when loaded, else Triton's reason."""
        return self._model_action(model, "load")

    def unload(self, model: str) -> str | None:
        """None when unloaded (its stubs stopped, a dead or stopped one killed), else Triton's reason."""
        return self._model_action(model, "unload")

    def _model_action(self, model: str, action: str) -> str | None:
        try:
            self._post(f"/v2/repository/models/{urllib.parse.quote(model)}/{action}", {})
        except urllib.error.HTTPError as refused:
            try:
                return first_line_and_frame(str(json.loads(refused.read())["error"]))
            except (ValueError, KeyError, TypeError):
                return f"HTTP {refused.code}"
        except OSError as unreachable:
            return f"Triton unreachable: {unreachable}"
        return None


def first_line_and_frame(reason: str) -> str:
    """Triton's reason on one line: its first line, and where a Python error was raised (the innermost frame
    of the traceback that follows "At:"; the whole one is in Triton's log)."""
    lines = [line.strip() for line in reason.strip().splitlines()] or ["no reason given"]
    frames = [line for line in lines[lines.index("At:") + 1 :] if line] if "At:" in lines else []
    return f"{lines[0]} (at {frames[0]})" if frames else lines[0]
