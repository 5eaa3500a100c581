"""Which steps of an ensemble Triton runs for a call that names some of its outputs, and the calls it cannot
answer because of it: ``pruned_steps`` mirrors the pruning walk of Triton's ensemble scheduler, its unexpected
decrements included (an output no call asked for counts as unneeded even where another step reads it), so the
validator can name such calls before a caller meets them, and the fix
(docs/EXTENDING.md, "A step after another": how Triton prunes, and how a step avoids its "unexpected deadlock").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

MAX_SUBSETS = 4096  # every subset of up to 12 outputs; beyond that, single outputs and pairs


@dataclass(frozen=True)
class Step:
    model: str
    inputs: frozenset[str]  # the ensemble tensors it reads
    outputs: tuple[str, ...]  # the ensemble tensors it maps its outputs to


@dataclass(frozen=True)
class Starved:
    """A call that Triton cannot answer: it drops the step ``dropped``, which makes ``tensor``, needed by a kept
    step or named by the call."""

    requested: tuple[str, ...]  # the smallest such call found
    dropped: int  # a step index, 0-based as the config lists them
    tensor: str


def pruned_steps(steps: Sequence[Step], ensemble_outputs: Iterable[str], requested: Iterable[str]) -> set[int]:
    """The steps Triton leaves out of a call naming ``requested``: its walk, step by step."""
    consumers: dict[str, set[int]] = defaultdict(set)
    producer: dict[str, int] = {}
    for index, step in enumerate(steps):
        for tensor in step.inputs:
            consumers[tensor].add(index)
        for tensor in step.outputs:
            producer[tensor] = index
    unneeded_left: dict[int, int] = {}  # per step, how many of its mapped outputs are not yet counted unneeded
    pruned: set[int] = set()
    unneeded = set(ensemble_outputs) - set(requested)
    while unneeded:
        newly_unneeded: set[str] = set()
        for tensor in unneeded:
            if tensor not in producer:  # an ensemble input no kept step reads: nothing makes it
                continue
            index = producer[tensor]
            # Triton counts down and drops the step at exactly zero: a tensor counted twice (an ensemble
            # output that a dropped step also read) takes the count below zero, and the step stays.
            unneeded_left[index] = unneeded_left.get(index, len(steps[index].outputs)) - 1
            if unneeded_left[index] == 0:
                pruned.add(index)
                for read in steps[index].inputs:
                    consumers[read].discard(index)
                    if not consumers[read]:
                        newly_unneeded.add(read)
        unneeded = newly_unneeded
    return pruned


def produced(steps: Sequence[Step], ensemble_inputs: Iterable[str], pruned: set[int]) -> set[str]:
    """Every tensor the kept steps make, each step running once all it reads is there."""
    ready = set(ensemble_inputs)
    waiting = [index for index in range(len(steps)) if index not in pruned]
    while True:
        runnable = [index for index in waiting if steps[index].inputs <= ready]
        if not runnable:
            return ready
        for index in runnable:
            ready.update(steps[index].outputs)
        waiting = [index for index in waiting if index not in runnable]


def _calls(outputs: Sequence[str]) -> Iterable[tuple[str, ...]]:
    """The sets of outputs a caller may name, smallest first."""
    largest = len(outputs) if 2 ** len(outputs) <= MAX_SUBSETS else 2
    for size in range(1, largest + 1):
        yield from combinations(outputs, size)


def starved_calls(
    steps: Sequence[Step], ensemble_inputs: Iterable[str], ensemble_outputs: Sequence[str]
) -> list[Starved]:
    """Per dropped step, the smallest call Triton cannot answer because it dropped that step."""
    found: dict[int, Starved] = {}
    producer = {tensor: index for index, step in enumerate(steps) for tensor in step.outputs}
    for requested in _calls(ensemble_outputs):
        pruned = pruned_steps(steps, ensemble_outputs, requested)
        made = produced(steps, ensemble_inputs, pruned)
        if set(requested) <= made:
            continue
        needed = [
            *requested,
            *(t for index, step in enumerate(steps) if index not in pruned for t in sorted(step.inputs)),
        ]
        for tensor in needed:
            dropped = producer.get(tensor)
            if tensor not in made and dropped in pruned and dropped not in found:
                found[dropped] = Starved(requested, dropped, tensor)
    return sorted(found.values(), key=lambda starved: starved.dropped)


def ensemble_outputs_read(steps: Sequence[Step], ensemble_outputs: Iterable[str]) -> dict[int, list[str]]:
    """Per step, the ensemble outputs it reads: the wiring that starves calls in Triton."""
    outputs = set(ensemble_outputs)
    return {index: sorted(step.inputs & outputs) for index, step in enumerate(steps) if step.inputs & outputs}
