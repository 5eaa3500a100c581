"""When the servers turn Triton's rate limiter on, and what the heavy steps' configs ask of it."""

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config
from pipeline_src.serving.core_sharing import SHARE_CORES, core_sharing_args


def test_the_rate_limiter_is_on_without_a_gpu_off_with_one_and_the_flags_win():
    assert core_sharing_args([], has_gpu=False) == SHARE_CORES == ("--rate-limit=execution_count",)
    assert core_sharing_args([], has_gpu=True) == ()
    assert core_sharing_args(["--rate-limit=off"], has_gpu=False) == ()


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
