"""Every answer names the models that made it, as the build's manifests describe the files the server loaded;
a stand-in says so wherever the answer is shown (gRPC client, CLI, API JSON, page), a real model does not."""

import json

import httpx
import pytest

from pipeline_src.provenance.manifest import MANIFEST_FILE, read_manifest, verify, write_manifest
from pipeline_src.provenance.served import SHORT_HASH, served_manifests
from pipeline_src.provenance.standins import BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING

WEIGHTED_MODELS = ["captioner", "classifier", "vision_encoder"]  # the models the build writes manifests for


def expected_identity(repository):
    """What an answer must say, read here from the files on disk: each manifest must still match them."""
    identity = []
    for model in WEIGHTED_MODELS:
        version_dir = repository / model / "1"
        assert verify(version_dir) == [], f"{model}: manifest does not match its files"
        manifest = read_manifest(version_dir)
        identity.append((model, "1", manifest.kind, manifest.sha256[:SHORT_HASH]))
    return identity


def answered_identity(result):
    return [(served.model, served.version, served.kind, served.sha256) for served in result.models]


def test_a_manifest_notices_every_change_to_its_files(tmp_path):
    (tmp_path / "weights.onnx").write_bytes(b"weights")
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "step.onnx").write_bytes(b"step")
    manifest = write_manifest(
        tmp_path, "demo", "real", "a test", [tmp_path / "weights.onnx", tmp_path / "graphs" / "step.onnx"]
    )
    assert set(manifest.files) == {"weights.onnx", "graphs/step.onnx"}
    assert read_manifest(tmp_path) == manifest and verify(tmp_path) == []

    (tmp_path / "weights.onnx").write_bytes(b"other weights")
    (tmp_path / "graphs" / "step.onnx").unlink()
    assert verify(tmp_path) == [
        "manifest.json lists graphs/step.onnx, which is missing",
        "weights.onnx is not the file manifest.json describes (replaced since it was built: `make models` records "
        "what it is now, `make models BUILD_ARGS=--force` rebuilds it)",
    ]
    document = json.loads((tmp_path / MANIFEST_FILE).read_text())
    document["sha256"] = "0" * 64
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(document))
    assert any("edited by hand" in problem for problem in verify(tmp_path))
    with pytest.raises(ValueError, match="kind must be one of"):
        write_manifest(tmp_path, "demo", "trained", "a test", [])


def test_the_build_keeps_what_it_knows_and_says_what_it_does_not(tmp_path):
    """Files found in place keep a manifest that still matches them; otherwise their origin is unknown,
    and that is a warning too: an answer must not look real when nobody knows."""
    from pipeline_src.model_build.manifests import write_classifier_manifest
    from pipeline_src.provenance.origins import classifier_origin

    (tmp_path / "model.onnx").write_bytes(b"an ONNX file copied here by hand")
    found = write_classifier_manifest(tmp_path, None, None)
    assert found.kind == "unknown" and "not recorded" in found.warning
    built = write_classifier_manifest(tmp_path, classifier_origin(None), 4.3e-6)
    assert (built.kind, built.warning) == ("stand-in", CLASSIFIER_STANDIN_WARNING)
    assert write_classifier_manifest(tmp_path, None, None) == built  # still matches its file: kept
    (tmp_path / "model.onnx").write_bytes(b"replaced")
    assert write_classifier_manifest(tmp_path, None, None).kind == "unknown"


def test_the_served_version_follows_the_configs_version_policy(tmp_path):
    """Versions 1 and 2 on disk: the answer names 2 under Triton's default policy, 1 where the config pins it."""
    model = tmp_path / "classifier"
    for version in ("1", "2"):
        (model / version).mkdir(parents=True)
        (model / version / "model.onnx").write_bytes(version.encode())
        write_manifest(model / version, "classifier", "real", f"build {version}", [model / version / "model.onnx"])
    config = 'name: "classifier"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
    (model / "config.pbtxt").write_text(config)
    assert [(name, version) for name, version, _ in served_manifests(tmp_path)] == [("classifier", "2")]
    (model / "config.pbtxt").write_text(config + "version_policy: { specific: { versions: [1] } }\n")
    [(_, version, manifest)] = served_manifests(tmp_path)
    assert (version, manifest.source) == ("1", "build 1")


def test_every_answer_names_the_weights_the_server_loaded(client, model_repository, photos):
    results = client.caption([photos["apple.jpg"], photos["chelsea.jpg"]])
    expected = expected_identity(model_repository)
    assert [answered_identity(result) for result in results] == [expected, expected]
    assert {served.kind for served in results[0].models} == {"stand-in"}
    assert results[0].warnings == [BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING]


def test_the_server_serves_each_whole_manifest(client, model_repository):
    served = client.manifests()
    assert [manifest["model"] for manifest in served] == WEIGHTED_MODELS
    for manifest in served:
        on_disk = json.loads((model_repository / manifest["model"] / "1" / MANIFEST_FILE).read_text())
        assert manifest == {"version": "1", **on_disk}
    captioner = served[0]
    assert set(captioner["precisions"]) == {"fp32", "int8"}
    assert 0 < captioner["fidelity"]["int8_vs_fp32"]["teacher_forced_top1"] <= 1


def test_the_api_shows_the_models_and_the_stand_in_warning(api, client, model_repository, photos):
    answer = httpx.post(f"{api.url}/caption", files={"photo": ("apple.jpg", photos["apple.jpg"])}, timeout=120).json()
    assert answer["warnings"] == [BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING]
    assert [(m["model"], m["version"], m["kind"], m["sha256"]) for m in answer["models"]] == expected_identity(
        model_repository
    )

    listed = {entry["name"]: entry for entry in httpx.get(f"{api.url}/models", timeout=30).json()}
    assert {"food11_pipeline", "preprocess", *WEIGHTED_MODELS} <= set(listed)
    assert {entry["state"] for entry in listed.values()} == {"READY"}
    assert listed["captioner"]["manifest"] == client.manifests()[0]
    assert listed["preprocess"]["manifest"] is None  # code only, no weights

    metrics = httpx.get(f"{api.url}/metrics").text
    captioner_sha = answer["models"][0]["sha256"]
    assert (
        f'food11_model_answers_total{{kind="stand-in",model="captioner",sha256="{captioner_sha}",version="1"}}'
        in metrics
    )


def test_models_built_from_real_weights_answer_without_a_warning(real_api, real_repository, model_repository, photos):
    answer = httpx.post(
        f"{real_api.url}/caption", files={"photo": ("apple.jpg", photos["apple.jpg"])}, timeout=120
    ).json()
    identity = [(m["model"], m["version"], m["kind"], m["sha256"]) for m in answer["models"]]
    assert identity == expected_identity(real_repository)
    assert {m["kind"] for m in answer["models"]} == {"real"}
    assert answer["warnings"] == []
    classifier = read_manifest(real_repository / "classifier" / "1")
    assert classifier.source.startswith("course MobileNetV2 checkpoint food11.pth (sha256 ")
    # other weights, another identity: answers of the two servers can be told apart
    stand_in = {model: sha for model, _, _, sha in expected_identity(model_repository)}
    assert {model: sha for model, _, _, sha in identity}["classifier"] != stand_in["classifier"]
