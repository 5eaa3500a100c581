"""What `make models` / `make serve` (and the Triton image) decide to rebuild, from the manifests alone: nothing
asked keeps what is built, a source asked that differs from the manifest's rebuilds, the same source is kept."""

from pathlib import Path

import pytest

from pipeline_src.provenance import staleness
from pipeline_src.provenance.manifest import write_manifest
from pipeline_src.provenance.origins import blip_standin_origin, classifier_origin, real_blip_origin
from pipeline_src.serving import container_models
from pipeline_src.serving.container_models import ModelsNotServable, RequestedModels, ensure_models
from pipeline_src.serving.settings import ContainerSettings


def built_repository(root: Path, blip: str | None, checkpoint: Path | None) -> Path:
    """Just the files the decisions look at: the classifier's graph, the snapshot's config, and manifests that say
    what they were built from (``blip`` None: the tiny stand-in; ``checkpoint`` None: the offline classifier)."""
    classifier_dir, captioner_dir = root / "classifier" / "1", root / "captioner" / "1"
    (captioner_dir / "blip").mkdir(parents=True)
    classifier_dir.mkdir(parents=True)
    (classifier_dir / "model.onnx").write_bytes(b"graph")
    (captioner_dir / "blip" / "config.json").write_text("{}")
    classifier = classifier_origin(checkpoint)
    captioner = real_blip_origin(blip) if blip else blip_standin_origin("tiny")
    write_manifest(classifier_dir, "classifier", classifier.kind, classifier.source, [classifier_dir / "model.onnx"])
    write_manifest(captioner_dir, "captioner", captioner.kind, captioner.source, [captioner_dir / "blip/config.json"])
    return root


@pytest.fixture
def snapshots(tmp_path) -> tuple[str, str]:
    first, second = tmp_path / "blip-a", tmp_path / "blip-b"
    first.mkdir()
    second.mkdir()
    return str(first), str(second)


@pytest.fixture
def checkpoints(tmp_path) -> tuple[Path, Path]:
    first, second = tmp_path / "food11.pth", tmp_path / "retrained.pth"
    first.write_bytes(b"weights")
    second.write_bytes(b"other weights")
    return first, second


def test_nothing_asked_keeps_real_weights_and_says_how_to_switch(tmp_path, snapshots, checkpoints):
    repository = built_repository(tmp_path / "repo", snapshots[0], checkpoints[0])
    captioner = staleness.captioner_decision(repository, None, "base")
    classifier = staleness.classifier_decision(repository, None)
    assert not captioner.build and not classifier.build
    assert f"real: BLIP {snapshots[0]}" in captioner.reason and "BLIP=stand-in" in captioner.reason
    assert "course MobileNetV2 checkpoint food11.pth" in classifier.reason and "CLASSIFIER=" in classifier.reason


def test_the_source_built_is_kept_and_another_is_rebuilt(tmp_path, snapshots, checkpoints):
    repository = built_repository(tmp_path / "repo", snapshots[0], checkpoints[0])
    assert not staleness.captioner_decision(repository, snapshots[0], "base").build
    assert not staleness.classifier_decision(repository, str(checkpoints[0])).build
    other_blip = staleness.captioner_decision(repository, snapshots[1], "base")
    assert other_blip.build and other_blip.reason == f"built from BLIP {snapshots[0]}, asked for BLIP {snapshots[1]}"
    assert staleness.classifier_decision(repository, str(checkpoints[1])).build  # another file's hash
    assert staleness.captioner_decision(repository, "Salesforce/blip-image-captioning-base", "base").build


def test_a_checkpoint_is_known_by_its_name_and_contents_and_a_snapshot_by_its_absolute_path(
    tmp_path, monkeypatch, snapshots, checkpoints
):
    repository = built_repository(tmp_path / "repo", snapshots[0], checkpoints[0])
    renamed = checkpoints[0].rename(tmp_path / "food11-copy.pth")
    # the name is part of the recorded source too: a renamed file is rebuilt once, then kept
    assert staleness.classifier_decision(repository, str(renamed)).build
    monkeypatch.chdir(tmp_path)
    assert not staleness.captioner_decision(repository, "blip-a", "base").build  # ./blip-a is the same directory


def test_stand_in_asked_goes_back_from_real_weights_and_keeps_a_stand_in(tmp_path, snapshots, checkpoints):
    real = built_repository(tmp_path / "real", snapshots[0], checkpoints[0])
    assert staleness.captioner_decision(real, staleness.STANDIN, "tiny").build
    assert staleness.classifier_decision(real, staleness.STANDIN).build
    offline = built_repository(tmp_path / "offline", None, None)
    assert not staleness.captioner_decision(offline, staleness.STANDIN, "tiny").build
    assert not staleness.classifier_decision(offline, staleness.STANDIN).build
    assert staleness.captioner_decision(offline, staleness.STANDIN, "base").build  # another size is another model
    assert staleness.captioner_decision(offline, snapshots[0], "tiny").build


def test_missing_files_are_built_force_rebuilds_and_files_without_a_manifest_are_rebuilt_only_when_asked(
    tmp_path, snapshots
):
    empty = tmp_path / "empty"
    assert staleness.captioner_decision(empty, None, "base").reason == "not built yet"
    assert staleness.classifier_decision(empty, None).build
    repository = built_repository(tmp_path / "repo", snapshots[0], None)
    assert staleness.captioner_decision(repository, snapshots[0], "base", force=True).build
    (repository / "captioner" / "1" / "manifest.json").unlink()
    assert not staleness.captioner_decision(repository, None, "base").build
    assert staleness.captioner_decision(repository, snapshots[0], "base").build  # nothing says what is there


def test_a_checkpoint_that_is_not_there_is_named(tmp_path):
    with pytest.raises(staleness.CheckpointNotFound, match=r"nope\.pth: no such file"):
        staleness.classifier_decision(tmp_path, str(tmp_path / "nope.pth"))


# The Triton image (FOOD11_BLIP, FOOD11_CLASSIFIER) ---------------------------------------------------------


def test_the_image_builds_nothing_and_reads_nothing_when_nothing_is_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(container_models.subprocess, "run", pytest.fail)
    for name in ("FOOD11_BLIP", "FOOD11_CLASSIFIER"):
        monkeypatch.delenv(name, raising=False)
    settings = ContainerSettings()
    ensure_models(tmp_path / "no-such-repository", RequestedModels(settings.blip, settings.classifier), print)


def test_the_image_serves_at_once_what_matches(tmp_path, monkeypatch, snapshots, checkpoints):
    repository = built_repository(tmp_path / "repo", snapshots[0], checkpoints[0])
    monkeypatch.setattr(container_models.subprocess, "run", pytest.fail)
    said: list[str] = []
    monkeypatch.setenv("FOOD11_BLIP", str(snapshots[0]))
    monkeypatch.setenv("FOOD11_CLASSIFIER", f" {checkpoints[0]} ")
    settings = ContainerSettings()
    requested = RequestedModels(settings.blip, settings.classifier)
    ensure_models(repository, requested, said.append)
    assert [line.split(":")[1].strip() for line in said] == ["classifier", "captioner"]
    assert all("already built from" in line for line in said)


def test_the_image_refuses_other_weights_it_cannot_build(tmp_path, monkeypatch, snapshots):
    repository = built_repository(tmp_path / "repo", snapshots[0], None)
    monkeypatch.setattr(container_models.importlib.util, "find_spec", lambda name: None)  # the serving image
    with pytest.raises(ModelsNotServable, match=r"not hold the captioner that .* MODEL_BUILD=yes"):
        ensure_models(repository, RequestedModels(blip=snapshots[1]), print)
    with pytest.raises(ModelsNotServable, match=r"FOOD11_CLASSIFIER: .* no such file in the container"):
        ensure_models(repository, RequestedModels(classifier="/weights/food11.pth"), print)


def test_the_image_builds_what_differs_with_the_builds_own_command(tmp_path, monkeypatch, snapshots):
    repository = built_repository(tmp_path / "repo", snapshots[0], None)
    monkeypatch.setattr(container_models, "build_obstacle", lambda repository: "")
    ran = []
    monkeypatch.setattr(
        container_models.subprocess, "run", lambda command: ran.append(command) or type("Done", (), {"returncode": 0})
    )
    ensure_models(repository, RequestedModels(blip=snapshots[1]), print)
    assert ran == [[*ran[0][:3], "--repository", str(repository), "--blip", snapshots[1]]] and ran[0][1:3] == [
        "-m",
        "pipeline_src.model_build.cli",
    ]
