"""What the heavy steps' configs ask of Triton's rate limiter, when a server runs it (--rate-limit=execution_count;
off by default: no faster on 2 cores, benchmarks/results/core_sharing.md)."""

from repository_checks import models_built_from, rate_limiter_problems

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE

REPOSITORY = PROJECT_ROOT / "model_repository"


def test_the_vision_encoder_runs_one_at_a_time_and_the_other_steps_beside_it():
    """The vision encoder holds one global core; every other model food11_pipeline is built from (read from its
    config: its steps and their BLS callees) holds none. Fails for a resource on caption_with_label, which waits on
    the captioner (a deadlock), or on the captioner, whose work runs in its loop's thread (which the limiter does
    not see)."""
    assert {"vision_encoder", "caption_with_label", "captioner"} <= set(models_built_from(REPOSITORY, ENSEMBLE))
    assert rate_limiter_problems(REPOSITORY) == []
