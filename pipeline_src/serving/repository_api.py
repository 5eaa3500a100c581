"""Triton's model repository API over HTTP (load, unload, the ready models, a model's config), with the admin key:
what the reload watcher, the stub watchdog and the response cache's loader call. Standard library only."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping


class TritonRepositoryApi:
    """Triton's model repository API over HTTP, with the admin key (TritonServer.admin_http_headers)."""

    def __init__(self, http_url: str, headers: Mapping[str, str], timeout_s: float = 600.0):
        self.base_url = f"http://{http_url}"  # host:port, as TritonServer.http_url
        self.headers = {"Content-Type": "application/json", **headers}
        self.timeout_s = timeout_s  # a load answers when it is done: a large model takes a while

    def _request(self, path: str, body: dict | None = None) -> bytes:
        """A POST of ``body`` as JSON, or a GET without one."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data, self.headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read()

    def ready_models(self) -> set[str]:
        return set(self.ready_versions())

    def ready_versions(self) -> dict[str, set[str]]:
        """The ready models, each with its ready versions."""
        versions: dict[str, set[str]] = {}
        for entry in json.loads(self._request("/v2/repository/index", {"ready": True})):
            versions.setdefault(entry["name"], set()).add(str(entry.get("version", "")))
        return versions

    def unavailable_reasons(self) -> dict[str, str]:
        """Why each model that is not ready is not (Triton's repository index: a failed load's own reason, where the
        load's answer may be generic); empty when the index does not answer."""
        try:
            index = json.loads(self._request("/v2/repository/index", {}))
        except (OSError, ValueError):
            return {}
        return {
            entry["name"]: first_line_and_frame(entry["reason"])
            for entry in index
            if entry.get("state") != "READY" and entry.get("reason")
        }

    def model_config(self, model: str) -> dict:
        """The loaded model's config as Triton answers it in JSON (config.pbtxt's field names)."""
        return json.loads(self._request(f"/v2/models/{urllib.parse.quote(model)}/config"))

    def load(self, model: str, config: str | None = None, files: dict[str, bytes] | None = None) -> str | None:
        """None when loaded, else Triton's reason. ``config`` (JSON) overrides the config.pbtxt; ``files`` (path in
        the model folder -> content), given with ``config``, stand for the model folder's files."""
        parameters: dict[str, str] = {} if config is None else {"config": config}
        for path, content in (files or {}).items():
            parameters[f"file:{path}"] = base64.b64encode(content).decode()
        return self._model_action(model, "load", {"parameters": parameters} if parameters else {})

    def unload(self, model: str) -> str | None:
        """None when unloaded (its stubs stopped, a dead or stopped one killed), else Triton's reason."""
        return self._model_action(model, "unload")

    def _model_action(self, model: str, action: str, body: dict | None = None) -> str | None:
        try:
            self._request(f"/v2/repository/models/{urllib.parse.quote(model)}/{action}", body or {})
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
