"""The GPU route's calls, in order (docs/gpu.md, "Staging for an air-gapped GPU box", describes each): one a
staged part, the first also checking the machine and the last installing, smoke-testing CUDA and building; then
one a measured round, in order of value (the exact mode, the fast mode, the baseline commit), so that a round
that fails leaves the others' figures. Every log and result lands in $OUT as it is written.
"""

from __future__ import annotations

PARTS_ON_DEVICE = "/tmp/device_parts"
FILES_ON_DEVICE = "/tmp/device_files"  # scripts/device_join.sh joins the parts there
ARRIVED = "arrived"  # each part carries arrived/partN: the calls list what reached the machine so far
STAGE = ".device"  # the staged parts' folder in the checkout
MAX_COMMAND = 2000  # characters in a device call's command
CALL_LIMIT_S = 600
ROUND_DEADLINE_S = 240  # a round stops itself by then, saving what it has: well inside the call's 600 s
LEVELS = "--concurrency 1 8 32 64"
BOTH = "--ensembles food11_pipeline food11_pipeline_merged"
REFERENCE = f"{FILES_ON_DEVICE}/reference/reference.json"  # Hugging Face's captions, made here (device_stage.py)
BUILD = 'PYTHONPATH=/tmp/buildsite:$PWD "$IMAGE_PYTHON" scripts/build_models.py'
JOIN = f"bash scripts/device_join.sh {PARTS_ON_DEVICE}"  # then the command it runs once the files are joined


def rounds(commit: str, dirty: bool, baseline: str | None, reference: bool) -> list[tuple[str, str, str]]:
    """The measured rounds, each one call after the parts: its name (its results' are gpu_serve_<name>), what it
    measures (for the plan) and its command."""
    told = f"FOOD11_COMMIT={commit}{'+dirty' if dirty else ''} PYTHONUNBUFFERED=1"
    extra = (f" --reference {REFERENCE}" if reference else "") + (" --allow-dirty" if dirty else "")
    serve = f"python -m benchmarks.gpu_serve {LEVELS} --deadline-s {ROUND_DEADLINE_S}{extra}"
    fast_copy = "/tmp/fast/model_repository"
    found = [
        (
            "exact",
            "the exact mode (the default), both ensembles: separate steps, and the vision encoder inside the captioner",
            f"{told} {JOIN} {serve} {BOTH} --name gpu_serve_exact",
        ),
        (
            "fast",
            "the fast mode (fp16, guarded), merged first: a copy of the repository with the captioner's mode fast",
            f"rm -rf /tmp/fast && mkdir -p /tmp/fast && cp -al model_repository /tmp/fast/ && python3 "
            f"scripts/set_parameter.py {fast_copy} captioner mode fast && {told} {JOIN} {serve} --repository "
            f"{fast_copy} --ensembles food11_pipeline_merged food11_pipeline --name gpu_serve_fast",
        ),
    ]
    if baseline:
        found.append(
            (
                "baseline",
                f"the captioner before its redesign: commit {baseline}, its own tree and build, food11_pipeline",
                f"HERE=$PWD && rm -rf /tmp/baseline && mkdir -p /tmp/baseline && tar -xJf "
                f"{FILES_ON_DEVICE}/baseline/{baseline}.tar.xz -C /tmp/baseline && cd /tmp/baseline && "
                f"FOOD11_COMMIT={baseline} PYTHONUNBUFFERED=1 bash $HERE/scripts/device_join.sh {PARTS_ON_DEVICE} "
                f"bash -o pipefail -c '{BUILD} > $OUT/baseline_build.log 2>&1 && python -m benchmarks.gpu_serve "
                f"{LEVELS} --deadline-s {ROUND_DEADLINE_S} --name gpu_serve_baseline'",
            )
        )
    return found


def device_calls(
    parts: int, commit: str, dirty: bool, baseline: str | None = None, reference: bool = False
) -> list[dict]:
    """The device tool's ``run`` calls, in order: the parts, then the rounds."""
    arrived = (
        f'echo "arrived: $(ls {PARTS_ON_DEVICE}/{ARRIVED} | tr "\\n" " ")on machine '
        '$(cat /proc/sys/kernel/random/boot_id)"'
    )
    calls: list[dict] = []
    for number in range(1, parts + 1):
        steps = ["set -o pipefail", f"mkdir -p {PARTS_ON_DEVICE}", f"cp -r {STAGE}/part{number}/. {PARTS_ON_DEVICE}/"]
        steps.append(arrived)
        if number == 1:
            steps.append("python3 scripts/device_preflight.py | tee $OUT/preflight.log")
        if number == parts:
            then = (
                "python scripts/device_cuda_smoke.py 2>&1 | tee $OUT/cuda_smoke.log; "
                f"{BUILD} --fast 2>&1 | tee $OUT/build.log"
            )
            steps.append(f"PYTHONUNBUFFERED=1 {JOIN} bash -o pipefail -c '{then}'")
        calls.append({"carry": [f"{STAGE}/part{number}"], "command": " && ".join(steps), "what": f"part {number}"})
    for name, what, command in rounds(commit, dirty, baseline, reference):
        calls.append({"carry": [], "command": command, "what": f"round {name}: {what}"})
    for call in calls:
        call["timeout_s"] = CALL_LIMIT_S
        if len(call["command"]) > MAX_COMMAND:
            raise ValueError(f"a device command over {MAX_COMMAND} characters: {call['command']}")
    return calls
