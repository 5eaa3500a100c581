"""What the heavy steps' configs ask of Triton's rate limiter, when a server runs it (--rate-limit=execution_count;
off by default: benchmarks/core_sharing.py measured it no faster on 2 cores)."""

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config


def test_the_vision_encoder_and_the_captioner_run_one_at_a_time_and_the_small_steps_beside_them():
    def resources(model: str) -> list[tuple[str, bool, int]]:
        config = parse_config(PROJECT_ROOT / "model_repository" / model / "config.pbtxt")
        return [
            (resource.name, getattr(resource, "global"), resource.count)
            for group in config.instance_group
            for resource in group.rate_limiter.resources
        ]

    assert resources("vision_encoder") == resources("captioner") == [("cpu_cores", True, 1)]
    for small in ("preprocess", "classifier", "label", "caption_with_label"):
        assert resources(small) == []  # caption_with_label waits on the captioner: holding a resource would deadlock
