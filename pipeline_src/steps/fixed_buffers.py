"""The text decoder on fixed buffers, so that ONNX Runtime can replay its steps as CUDA graphs.

A CUDA graph replays a recorded step with the same shapes at the same addresses. So here every tensor a
step reads or writes is allocated once, for the largest batch size (``capacity`` rows), and a batch is
padded to one of a few sizes (its extra rows copy its first, and are dropped) and runs on the first rows of
those buffers. The steps alternate between two sets of buffers (one read, one written: the caches and the
next step's inputs, which each step makes on the device). A step of a given size and parity then always has
the same inputs and outputs at the same addresses: its binding is made once, and with ``enable_cuda_graph``
ONNX Runtime records it once (``gpu_graph_id``) and replays it after; ``warm_up`` records every size's before
the first request. Only the step's next tokens, a few bytes, come to the host. The prompt's step has another
width for each batch, so it runs unrecorded (``gpu_graph_id -1``).

On the CPU the same code runs without recording: the tests check it there against ``TextDecoder``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline_src.steps.text_decoder import (
    FED_BACK,
    IMAGE_EMBEDS,
    NEXT_OUTPUTS,
    STEP_INPUTS,
    DecoderState,
    TextDecoder,
    attention_bias,
)

BATCH_SIZES = (1, 2, 4, 8, 16, 32)
FED_INPUTS = tuple(FED_BACK.values())  # the step inputs a step makes for the next one


@dataclass
class BufferSet:
    """What one step reads and the other writes: the self-attention caches and the fed-back inputs."""

    cache: list[ort.OrtValue]  # cache_names("past") order, each [capacity, heads, slots, head_size]
    fed: dict[str, ort.OrtValue]  # FED_INPUTS' names: input_ids [capacity, 1], ..., seen [capacity, vocab]


@dataclass
class Buffers:
    cross: list[ort.OrtValue]  # each [capacity, heads, image tokens, head_size]
    sets: tuple[BufferSet, BufferSet]
    repetition_penalty: ort.OrtValue  # [1]
    slot_ids: ort.OrtValue  # [slots]


@dataclass
class FixedState(DecoderState):
    rows: int = 0  # the batch's own rows; it runs on the first ``size`` rows of the buffers
    size: int = 0
    parity: int = 0  # which buffer set the next step reads


def rows_of(value: ort.OrtValue, count: int, first: int = 0) -> tuple[list[int], int]:
    """Rows ``[first, first + count)`` of a buffer as (shape, address): contiguous, so bindable as a tensor."""
    shape = value.shape()
    row_bytes = value.tensor_size_in_bytes() // shape[0]
    return [count, *shape[1:]], value.data_ptr() + first * row_bytes


class FixedBufferDecoder(TextDecoder):
    """``TextDecoder`` whose steps always find their tensors at the same addresses (see the module's docstring).
    A batch larger than the largest size, or a prompt longer than ``max_prompt_tokens``, runs as in
    ``TextDecoder``, unrecorded."""

    def __init__(
        self,
        directory: Path,
        max_prompt_tokens: int,
        max_new_tokens: int,
        batch_sizes: Sequence[int] = BATCH_SIZES,
        **session_args,
    ):
        super().__init__(directory, **session_args)
        self.slots = max_prompt_tokens + max(max_new_tokens - 1, 0)
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_sizes = tuple(sorted(batch_sizes))
        self.capacity = self.batch_sizes[-1]
        self.buffers = self._allocate()
        self.bindings: dict[tuple[int, int], ort.IOBinding] = {}  # (size, parity): made once, replayed after

    @property
    def warm_sizes(self) -> tuple[int, ...]:
        return self.batch_sizes

    def fits(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int) -> bool:
        longest = max(map(len, prompt_ids))
        return (
            len(prompt_ids) <= self.capacity
            and longest <= self.max_prompt_tokens
            and longest + max_new_tokens - 1 <= self.slots
        )

    def _zeros(self, shape: Sequence[int], dtype=np.float32) -> ort.OrtValue:
        """Zeros, not whatever the memory held: a NaN in a cache slot would reach every score, bias or not."""
        return ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype), *self.device)

    def _allocate(self) -> Buffers:
        shape, rows = self.shape, self.capacity
        heads, head_size = shape["heads"], shape["head_size"]

        def buffer_set() -> BufferSet:
            return BufferSet(
                cache=[self._zeros((rows, heads, self.slots, head_size)) for _ in self.past_names],
                fed={
                    "input_ids": self._zeros((rows, 1), np.int64),
                    "position_ids": self._zeros((rows, 1), np.int64),
                    "attention_bias": self._zeros((rows, 1, 1, self.slots)),
                    "cache_positions": self._zeros((rows, 1), np.int64),
                    "seen": self._zeros((rows, shape["vocab_size"]), bool),
                },
            )

        return Buffers(
            cross=[self._zeros((rows, heads, shape["image_tokens"], head_size)) for _ in self.cross_names],
            sets=(buffer_set(), buffer_set()),
            repetition_penalty=self._zeros((1,)),
            slot_ids=ort.OrtValue.ortvalue_from_numpy(np.arange(self.slots, dtype=np.int64), *self.device),
        )

    def _bind_rows(self, binding: ort.IOBinding, name: str, value: ort.OrtValue, rows: int, output: bool) -> None:
        shape, address = rows_of(value, rows)
        bind = binding.bind_output if output else binding.bind_input
        bind(name, *self.device, value.element_type(), shape, address)

    def _binding(self, rows: int, read: BufferSet, written: BufferSet, prompt: dict | None = None) -> ort.IOBinding:
        """A step over the first ``rows`` rows: reads ``read``'s caches and fed inputs (or the prompt's, from the
        host), writes ``written``'s."""
        binding = self.step_session.io_binding()
        for name in STEP_INPUTS:
            if prompt is not None and name in prompt:
                binding.bind_cpu_input(name, np.ascontiguousarray(prompt[name]))
            elif name in FED_INPUTS:
                self._bind_rows(binding, name, read.fed[name], rows, output=False)
        binding.bind_ortvalue_input("repetition_penalty", self.buffers.repetition_penalty)
        binding.bind_ortvalue_input("slot_ids", self.buffers.slot_ids)
        for name, value in zip(self.past_names, read.cache):
            self._bind_rows(binding, name, value, rows, output=False)
        for name, value in zip(self.cross_names, self.buffers.cross):
            self._bind_rows(binding, name, value, rows, output=False)
        for name in NEXT_OUTPUTS:
            self._bind_rows(binding, name, written.fed[FED_BACK[name]], rows, output=True)
        for name, value in zip(self.present_names, written.cache):
            self._bind_rows(binding, name, value, rows, output=True)
        return binding

    def start(
        self,
        image_embeds: np.ndarray,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        repetition_penalty: float = 1.0,
    ) -> tuple[np.ndarray, DecoderState]:
        if not self.fits(prompt_ids, max_new_tokens):
            return super().start(image_embeds, prompt_ids, max_new_tokens, repetition_penalty)  # unrecorded
        rows = len(prompt_ids)
        size = next(size for size in self.batch_sizes if size >= rows)
        padded_ids = [*prompt_ids, *[prompt_ids[0]] * (size - rows)]
        padded_embeds = np.concatenate([image_embeds, np.repeat(image_embeds[:1], size - rows, axis=0)])
        buffers = self.buffers
        binding = self.cross_kv.io_binding()
        binding.bind_cpu_input(IMAGE_EMBEDS, np.ascontiguousarray(padded_embeds))
        for name, value in zip(self.cross_names, buffers.cross):
            self._bind_rows(binding, name, value, size, output=True)
        self.cross_kv.run_with_iobinding(binding)
        buffers.repetition_penalty.update_inplace(np.array([repetition_penalty], np.float32))

        input_ids, positions, real = self.left_padded(padded_ids, self.slots)
        state = FixedState(
            buffers.cross,
            buffers.sets[1].cache,  # whatever it holds: the bias hides the slots not yet written
            real,
            0,
            np.array([len(ids) for ids in padded_ids], dtype=np.int64),
            [list(ids) for ids in prompt_ids],
            repetition_penalty,
            rows=rows,
            size=size,
        )
        bias, cache_positions = attention_bias(state, input_ids.shape[1])
        prompt = {
            "input_ids": input_ids,
            "position_ids": positions,
            "attention_bias": bias,
            "cache_positions": cache_positions,
            "seen": self.seen_mask(padded_ids),
        }
        # The prompt's width differs from batch to batch: bound afresh and not recorded. It writes set 0.
        binding = self._binding(size, buffers.sets[1], buffers.sets[0], prompt)
        return self._replay(state, binding, input_ids.shape[1], self.unrecorded, wrote=0), state

    def step(self, state: DecoderState) -> np.ndarray:
        if not isinstance(state, FixedState):
            return super().step(state)  # a batch that did not fit
        if state.written == state.slots:
            raise ValueError(f"the cache's {state.slots} slots are full: start with a larger max_new_tokens")
        key = (state.size, state.parity)
        if key not in self.bindings:
            sets = self.buffers.sets
            self.bindings[key] = self._binding(state.size, sets[state.parity], sets[1 - state.parity])
        graph = 2 * self.batch_sizes.index(state.size) + state.parity
        return self._replay(state, self.bindings[key], 1, self.recorded(graph), wrote=1 - state.parity)

    def _replay(self, state: FixedState, binding: ort.IOBinding, new_tokens: int, options, wrote: int) -> np.ndarray:
        """Runs the step, which wrote buffer set ``wrote`` (the next one reads it); the batch's own rows' next
        tokens (the only bytes that come to the host)."""
        self.step_session.run_with_iobinding(binding, options)
        state.binding = binding
        state.written += new_tokens
        state.parity = wrote
        state.cache = self.buffers.sets[wrote].cache
        next_ids = binding.get_outputs()[STEP_OUTPUT_INDEX["next_ids"]]
        return next_ids.numpy()[: state.rows, 0]

    @functools.cache  # noqa: B019 (one per graph: a dozen, for the decoder's life)
    def recorded(self, graph_id: int) -> ort.RunOptions:
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return options


STEP_OUTPUT_INDEX = {name: index for index, name in enumerate(NEXT_OUTPUTS)}  # as _binding binds them
