"""The response cache's revision (what names a cached ensemble's version) and its flags, without Triton."""

from __future__ import annotations

import os
import shutil

import pytest

from pipeline_src.serving.response_cache import (
    SMALL_FILE_BYTES,
    cache_flags,
    local_cache_args,
    repository_revision,
)


@pytest.fixture
def repository(tmp_path):
    """A step whose model.py imports a module of a package of its own, a large weights file, and an ensemble."""
    package = tmp_path / "logic"
    package.mkdir()
    (package / "__init__.py").touch()
    (package / "answer.py").write_text("VALUE = 1\n")
    repository = tmp_path / "model_repository"
    (repository / "step" / "1").mkdir(parents=True)
    (repository / "step" / "config.pbtxt").write_text('name: "step"\nbackend: "python"\n')
    (repository / "step" / "1" / "model.py").write_text("from logic.answer import VALUE\n")
    (repository / "step" / "1" / "weights.onnx").write_bytes(b"\0" * (SMALL_FILE_BYTES + 1))
    (repository / "pipeline" / "1").mkdir(parents=True)
    (repository / "pipeline" / "config.pbtxt").write_text('name: "pipeline"\nplatform: "ensemble"\n')
    return repository, {"logic": package}


def test_the_same_files_make_the_same_revision_wherever_they_lie(repository, tmp_path):
    folder, packages = repository
    copy = shutil.copytree(folder.parent, tmp_path / "elsewhere", copy_function=shutil.copy2)
    moved = {"logic": copy / "logic"}
    assert repository_revision(folder, packages) == repository_revision(copy / "model_repository", moved)
    assert repository_revision(folder, packages).version >= 2  # never the folders' own version 1


@pytest.mark.parametrize(
    "edit",
    [
        lambda folder, package: (folder / "step" / "config.pbtxt").write_text('name: "step"\nbackend: "python"\n\n'),
        lambda folder, package: (package / "answer.py").write_text("VALUE = 2\n"),  # code a step imports
        lambda folder, package: (folder / "pipeline" / "config.pbtxt").write_text('name: "pipeline" #\n'),
        lambda folder, package: os.utime(folder / "step" / "1" / "weights.onnx", (1, 1)),  # weights rewritten
    ],
    ids=["a step's config", "imported code", "an ensemble's config", "weights"],
)
def test_any_change_a_step_would_answer_differently_after_makes_a_new_revision(repository, edit):
    folder, packages = repository
    before = repository_revision(folder, packages)
    edit(folder, packages["logic"])
    assert repository_revision(folder, packages).version != before.version


def test_bytecode_and_editor_files_are_no_change(repository):
    folder, packages = repository
    before = repository_revision(folder, packages)
    (folder / "step" / "1" / "__pycache__").mkdir()
    (folder / "step" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"x")
    (folder / "step" / "1" / ".model.py.swp").write_bytes(b"x")
    assert repository_revision(folder, packages) == before


def test_a_local_cache_of_the_size_asked_unless_zero():
    assert local_cache_args(64) == ("--cache-config=local,size=67108864",)
    assert local_cache_args(0) == ()
    assert cache_flags(["--cache-config=redis,host=r", "--log-verbose=1", "--cache-config=redis,port=6379"]) == [
        "--cache-config=redis,host=r",
        "--cache-config=redis,port=6379",
    ]
