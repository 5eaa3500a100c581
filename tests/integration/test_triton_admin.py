"""Triton's admin APIs answer only the operator's key (pipeline_src/serving/admin.py), over HTTP and gRPC, on the
session's server as every path through TritonServer starts it (make serve, the tests, the benchmarks): loading
and unloading models, shared memory (the Python backend's own regions included), trace and log settings.
Inference, health, metadata and statistics stay open, and a caption is answered either way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from helpers import APPLE, admin_client, post_json_status
from tritonclient.utils import InferenceServerException
from tritonclient.utils import shared_memory as shm

from food11_client import Food11Client
from pipeline_src.serving import admin

BACKEND_REGION_PREFIX = "triton_python_backend_shm_region_"  # the Python backend's regions, in /dev/shm


def http(triton, path: str, body: dict, headers: dict | None = None) -> int:
    return post_json_status(f"http://{triton.http_url}{path}", body, headers)


def backend_region() -> str:
    """The key of one of the Python backend's own shared-memory regions, through which steps' tensors pass."""
    regions = sorted(path.name for path in Path("/dev/shm").glob(f"{BACKEND_REGION_PREFIX}*"))
    assert regions, "the session's tritonserver runs Python-backend steps: their regions are in /dev/shm"
    return "/" + regions[0]


def admin_calls_over_http(region: str) -> dict[str, tuple[str, dict]]:
    return {
        "register shared memory": (
            "/v2/systemsharedmemory/region/probe/register",
            {"key": region, "offset": 0, "byte_size": 64},
        ),
        "log settings": ("/v2/logging", {"log_verbose_level": 1}),
        "trace settings": ("/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]}),
        "repository index": ("/v2/repository/index", {}),
        "load a model": ("/v2/repository/models/top_labels/load", {}),
        "unload a model": ("/v2/repository/models/top_labels/unload", {}),
    }


def test_every_admin_api_is_refused_over_http_without_the_key(triton):
    for what, (path, body) in admin_calls_over_http(backend_region()).items():
        assert http(triton, path, body) == 403, what
        assert http(triton, path, body, {admin.HEADER: "a guess"}) == 403, what


def admin_calls_over_grpc(client, region: str) -> dict:
    return {
        "register shared memory": lambda: client.register_system_shared_memory("probe", region, 64),
        "log settings": lambda: client.update_log_settings({"log_verbose_level": 1}),
        "trace settings": lambda: client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
        "repository index": lambda: client.get_model_repository_index(),
        "load a model": lambda: client.load_model("top_labels"),
        "unload a model": lambda: client.unload_model("top_labels"),
    }


def test_every_admin_api_is_refused_over_grpc_without_the_key(triton):
    with grpcclient.InferenceServerClient(triton.grpc_url) as stranger:
        let_through = []
        for what, call in admin_calls_over_grpc(stranger, backend_region()).items():
            try:
                call()
            except InferenceServerException as refused:
                assert "restricted" in str(refused), what
            else:
                let_through.append(what)
        assert not let_through
        assert stranger.is_model_ready("top_labels") and stranger.get_inference_statistics("top_labels")
        assert stranger.get_model_metadata("food11_pipeline").name == "food11_pipeline"


def test_a_caption_is_answered_without_the_key(triton):
    with Food11Client(triton.grpc_url, timeout_s=120) as client:
        (result,) = client.caption([APPLE])
    assert result.caption_status == "ok" and result.label


def test_with_the_key_the_admin_apis_answer(triton):
    assert http(triton, "/v2/logging", {"log_verbose_level": 0}, triton.admin_http_headers) == 200
    assert http(triton, "/v2/repository/models/top_labels/load", {}, triton.admin_http_headers) == 200
    with admin_client(triton) as operator:
        assert {model.name for model in operator.get_model_repository_index().models} >= {"top_labels"}
        operator.unload_model("model_manifests")
        assert not operator.is_model_ready("model_manifests")
        operator.load_model("model_manifests")
        assert operator.is_model_ready("model_manifests")
        region = shm.create_shared_memory_region("food11_admin_probe", "/food11_admin_probe", 64)
        try:
            shm.set_shared_memory_region(region, [np.arange(16, dtype=np.int32)])
            operator.register_system_shared_memory("food11_admin_probe", "/food11_admin_probe", 64)
            status = operator.get_system_shared_memory_status(as_json=True)
            assert "food11_admin_probe" in json.dumps(status)
            operator.unregister_system_shared_memory("food11_admin_probe")
        finally:
            shm.destroy_shared_memory_region(region)


def test_the_arguments_restrict_the_four_groups_on_both_protocols():
    http_flag, grpc_flag = admin.restricted_args("k3y")
    assert http_flag == "--http-restricted-api=model-repository,shared-memory,trace,logging:food11-admin-key=k3y"
    assert grpc_flag == "--grpc-restricted-protocol=model-repository,shared-memory,trace,logging:food11-admin-key=k3y"
    with pytest.raises(ValueError, match="FOOD11_TRITON_ADMIN_KEY"):
        admin.restricted_args("a:b")
