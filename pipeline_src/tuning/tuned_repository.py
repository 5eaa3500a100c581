"""A copy of the repository with each step's chosen configuration written in, checked by food11-validate.

Only what was swept changes (instance group, max batch size, queue delay, ``intra_op_threads``); the rest
of each config (inputs, queue policy, other parameters) is the source's. Model files are hard links (symbolic
links across file systems): gigabytes of BLIP are not copied.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pipeline_src.repository.loading import CONFIG_FILE, parse_config
from pipeline_src.repository.report import Report
from pipeline_src.repository.validate import validate_repository
from pipeline_src.tuning.measurements import Choice, StepConfig
from pipeline_src.tuning.sweep import THREADS_PARAMETER


class TunedRepositoryInvalid(RuntimeError):
    """food11-validate found errors in the tuned copy; the message lists them."""


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        os.symlink(os.path.realpath(source), target)


def link_copy(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(
        source, target, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True
    )


def apply_config(config: model_config_pb2.ModelConfig, chosen: StepConfig) -> None:
    group = model_config_pb2.ModelInstanceGroup(
        count=chosen.instance_count, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU
    )
    # Only the count and kind are tuned: the resources the step asks of Triton's rate limiter stay (the vision
    # encoder's cpu_cores, used with --rate-limit=execution_count).
    if config.instance_group and config.instance_group[0].HasField("rate_limiter"):
        group.rate_limiter.CopyFrom(config.instance_group[0].rate_limiter)
    del config.instance_group[:]
    config.instance_group.append(group)
    config.max_batch_size = chosen.max_batch_size
    if chosen.queue_delay_us is not None:
        config.dynamic_batching.max_queue_delay_microseconds = chosen.queue_delay_us
    if chosen.intra_op_threads is not None:
        config.parameters[THREADS_PARAMETER].string_value = chosen.intra_op_threads


def header(step: str, chosen: StepConfig, source: Path) -> str:
    return (
        f"# {step}: written by food11-tune (make tune) from {source}, with the configuration Model\n"
        f"# Analyzer measured best on this machine: {chosen.instance_count} CPU instance(s), max_batch_size "
        f"{chosen.max_batch_size},\n# max_queue_delay_microseconds {chosen.queue_delay_us}, "
        f"{THREADS_PARAMETER} {chosen.intra_op_threads}. The source's comments say what each field is for.\n"
    )


def write_config(path: Path, text: str) -> None:
    """A new file in place of the link: writing through a hard link would change the source's config too."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def write_tuned_repository(source: Path, target: Path, choices: Sequence[Choice]) -> Report:
    """The copy, with every chosen configuration that is not the source's own; raises when it does not validate."""
    link_copy(source, target)
    for choice in choices:
        if choice.chosen is None or choice.chosen.is_current:
            continue
        config = parse_config(source / choice.step / CONFIG_FILE)
        apply_config(config, choice.chosen.config)
        text = header(choice.step, choice.chosen.config, source / choice.step / CONFIG_FILE)
        write_config(target / choice.step / CONFIG_FILE, text + text_format.MessageToString(config))
    report = validate_repository(target)
    if report.errors:
        raise TunedRepositoryInvalid(f"food11-validate refuses {target}:\n{report.text()}")
    return report
