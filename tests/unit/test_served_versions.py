"""The served identity reads version policies with the standard library (the steps' environment has no
tritonclient): held here to the validator's reading, which parses configs as Triton's ModelConfig."""

from pathlib import Path

import pytest

from pipeline_src.provenance.served import served_version_dir, specific_versions
from pipeline_src.repository.loading import ModelEntry, loaded_versions, parse_config
from pipeline_src.repository.report import Report

POLICIES = {
    "none": "",
    "latest": "version_policy: { latest: { num_versions: 2 } }",
    "all": "version_policy { all {} }",
    "specific list": "version_policy: { specific: { versions: [1, 2] } }",
    "specific repeated": "version_policy {\n  specific {\n    versions: 1\n    versions: 3  # pinned\n  }\n}",
    "specific one": "version_policy: { specific { versions: 2 } }",
    "commented out": "# version_policy: { specific: { versions: [1] } }",
}


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_the_served_version_is_the_highest_the_validator_says_triton_loads(tmp_path: Path, policy: str):
    model = tmp_path / "model"
    for version in (1, 2, 3):
        (model / str(version)).mkdir(parents=True)
    config = model / "config.pbtxt"
    config.write_text(f'name: "model"\nbackend: "python"\nmax_batch_size: 8\n{policy}\n')
    entry = ModelEntry("model", model, parse_config(config))
    expected = max(loaded_versions(entry, Report(tmp_path)), key=lambda path: int(path.name))
    assert served_version_dir(model) == expected


def test_only_a_specific_policy_restricts_versions():
    assert specific_versions(POLICIES["specific list"]) == [1, 2]
    assert specific_versions(POLICIES["latest"]) is None
    assert specific_versions(POLICIES["commented out"]) is None
