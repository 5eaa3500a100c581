"""What the heavy steps' configs ask of Triton's rate limiter, when a server runs it (--rate-limit=execution_count;
off by default: benchmarks/core_sharing.py measured it no faster on 2 cores)."""

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config


def test_the_vision_encoder_runs_one_at_a_time_and_the_other_steps_beside_it():
    def resources(model: str) -> list[tuple[str, bool, int]]:
        config = parse_config(PROJECT_ROOT / "model_repository" / model / "config.pbtxt")
        return [
            (resource.name, getattr(resource, "global"), resource.count)
            for group in config.instance_group
            for resource in group.rate_limiter.resources
        ]

    assert resources("vision_encoder") == [("cpu_cores", True, 1)]
    for other in ("preprocess", "classifier", "label", "caption_with_label", "captioner"):
        # caption_with_label waits on the captioner: holding a resource would deadlock; the captioner's work runs in
        # its loop's thread, which the rate limiter does not see
        assert resources(other) == []
