"""The text decoder on fixed buffers: a table of rows that requests join and leave between steps, and that ONNX
Runtime can replay as CUDA graphs.

Every tensor a step reads or writes is allocated once, for ``capacity`` rows. A row is one caption being
written: its cross-attention keys and values, its self-attention cache (``slots`` of them, its own cache
positions), and the next step's inputs. Rows join at a step boundary (``admit``: the cross-attention and the
prompt's step for those rows alone, written at their place in the table) and leave when their caption ends; a
step (``step_rows``) runs over the first rows of the table, as many as one of a few sizes (``batch_sizes``) that
holds every row in use. Rows in that range that are free step along, unread.

The steps alternate between two sets of buffers (one read, one written: the caches and the next step's inputs,
which each step makes on the device). A step of a given size and parity then always has the same inputs and
outputs at the same addresses: its binding is made once, and with ``enable_cuda_graph`` ONNX Runtime records it
once (``gpu_graph_id``) and replays it after; ``warm_up`` records every size's before the first request. Only the
step's next tokens, a few bytes, come to the host. A prompt's step has another width and other rows each time, so
it runs unrecorded (``gpu_graph_id -1``).

``start`` and ``step`` serve a whole batch at once (rows 0 to n-1), as ``TextDecoder``'s do; the captioner step's
loop (``pipeline_src.steps.caption_engine``) admits and retires rows one request at a time. On the CPU the same
code runs without recording: the tests check it there against ``TextDecoder``.
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
    rows: int = 0  # the batch's own rows: rows 0 to rows - 1 of the table
    size: int = 0  # the step size that holds them


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
        self.records = bool(session_args.get("cuda_graph")) and self.device[0] == "cuda"
        self.slots = max_prompt_tokens + max(max_new_tokens - 1, 0)
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_sizes = tuple(sorted(batch_sizes))
        self.capacity = self.batch_sizes[-1]
        self.buffers = self._allocate()
        self.bindings: dict[tuple[int, int], ort.IOBinding] = {}  # (size, parity): made once, replayed after
        self.parity = 0  # the buffer set the next step reads
        self.repetition_penalty = 0.0  # the penalty buffer's value (0: not set yet)
        self.last_binding: ort.IOBinding | None = None

    @property
    def warm_sizes(self) -> tuple[int, ...]:
        """Where steps are recorded, every size (so that nothing is recorded while serving); else one."""
        return self.batch_sizes if self.records else self.batch_sizes[:1]

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

    def _bind_rows(
        self, binding: ort.IOBinding, name: str, value: ort.OrtValue, rows: int, first: int, output: bool
    ) -> None:
        shape, address = rows_of(value, rows, first)
        bind = binding.bind_output if output else binding.bind_input
        bind(name, *self.device, value.element_type(), shape, address)

    def _binding(
        self, rows: int, read: BufferSet, written: BufferSet, prompt: dict | None = None, first: int = 0
    ) -> ort.IOBinding:
        """A step over rows ``[first, first + rows)``: reads ``read``'s caches and fed inputs (or the prompt's, from
        the host), writes ``written``'s."""
        binding = self.step_session.io_binding()
        for name in STEP_INPUTS:
            if prompt is not None and name in prompt:
                binding.bind_cpu_input(name, np.ascontiguousarray(prompt[name]))
            elif name in FED_INPUTS:
                self._bind_rows(binding, name, read.fed[name], rows, first, output=False)
        binding.bind_ortvalue_input("repetition_penalty", self.buffers.repetition_penalty)
        binding.bind_ortvalue_input("slot_ids", self.buffers.slot_ids)
        for name, value in zip(self.past_names, read.cache):
            self._bind_rows(binding, name, value, rows, first, output=False)
        for name, value in zip(self.cross_names, self.buffers.cross):
            self._bind_rows(binding, name, value, rows, first, output=False)
        for name in NEXT_OUTPUTS:
            self._bind_rows(binding, name, written.fed[FED_BACK[name]], rows, first, output=True)
        for name, value in zip(self.present_names, written.cache):
            self._bind_rows(binding, name, value, rows, first, output=True)
        return binding

    # --- the table: rows join between steps, a step runs over the first rows ------------------------------------

    def size_for(self, rows_in_use: int) -> int:
        """The step size that holds rows ``[0, rows_in_use)``."""
        return next(size for size in self.batch_sizes if size >= rows_in_use)

    def admit(
        self,
        first: int,
        image_embeds: np.ndarray | ort.OrtValue,
        prompt_ids: Sequence[Sequence[int]],
        repetition_penalty: float = 1.0,
        embeds_row: int = 0,
    ) -> np.ndarray:
        """Rows ``[first, first + n)`` begin captions of rows ``[embeds_row, embeds_row + n)`` of ``image_embeds``
        (host arrays, or values on this decoder's device, which stay there) after ``prompt_ids``: their
        cross-attention keys and values and their prompt's step, written where the next ``step_rows`` reads them;
        their first new tokens. The other rows are untouched. Prompts must fit (``fits``)."""
        rows = len(prompt_ids)
        if not 0 <= first <= first + rows <= self.capacity or not self.fits(prompt_ids, 1):
            raise ValueError(f"rows {first}..{first + rows - 1} with prompts up to {self.max_prompt_tokens} tokens")
        buffers = self.buffers
        binding = self.cross_kv.io_binding()
        if isinstance(image_embeds, ort.OrtValue):
            self._bind_rows(binding, IMAGE_EMBEDS, image_embeds, rows, embeds_row, output=False)
        else:
            embeds = image_embeds[embeds_row : embeds_row + rows]
            binding.bind_cpu_input(IMAGE_EMBEDS, np.ascontiguousarray(embeds, dtype=np.float32))
        for name, value in zip(self.cross_names, buffers.cross):
            self._bind_rows(binding, name, value, rows, first, output=True)
        self.cross_kv.run_with_iobinding(binding)
        if repetition_penalty != self.repetition_penalty:  # the captioner's one setting: set once in practice
            buffers.repetition_penalty.update_inplace(np.array([repetition_penalty], np.float32))
            self.repetition_penalty = repetition_penalty

        input_ids, positions, real = self.left_padded(prompt_ids, self.slots)
        bias, cache_positions = attention_bias(
            DecoderState([], [], real, 0, np.zeros(rows, np.int64)), len(input_ids[0])
        )
        prompt = {
            "input_ids": input_ids,
            "position_ids": positions,
            "attention_bias": bias,
            "cache_positions": cache_positions,
            "seen": self.seen_mask(prompt_ids),
        }
        # Written into the set the next step reads; the caches it "reads" are the other set's, whatever they hold:
        # the bias hides every slot the prompt has not written.
        read, written = buffers.sets[1 - self.parity], buffers.sets[self.parity]
        binding = self._binding(rows, read, written, prompt, first)
        self.step_session.run_with_iobinding(binding, self.unrecorded)
        self.last_binding = binding
        return binding.get_outputs()[STEP_OUTPUT_INDEX["next_ids"]].numpy()[:, 0]

    def step_rows(self, size: int) -> np.ndarray:
        """One step of rows ``[0, size)`` (``size`` one of ``batch_sizes``): each row's next token."""
        key = (size, self.parity)
        if key not in self.bindings:
            sets = self.buffers.sets
            self.bindings[key] = self._binding(size, sets[self.parity], sets[1 - self.parity])
        binding = self.bindings[key]
        self.step_session.run_with_iobinding(binding, self.recorded(2 * self.batch_sizes.index(size) + self.parity))
        self.parity = 1 - self.parity
        self.last_binding = binding
        return binding.get_outputs()[STEP_OUTPUT_INDEX["next_ids"]].numpy()[:, 0]

    # --- a whole batch at once, as TextDecoder --------------------------------------------------------------------

    def start(
        self,
        image_embeds: np.ndarray,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        repetition_penalty: float = 1.0,
    ) -> tuple[np.ndarray, DecoderState]:
        """The batch as rows 0 to n-1 of the table (whatever rows were in use are taken over)."""
        if not self.fits(prompt_ids, max_new_tokens):
            return super().start(image_embeds, prompt_ids, max_new_tokens, repetition_penalty)  # unrecorded
        rows = len(prompt_ids)
        tokens = self.admit(0, image_embeds, prompt_ids, repetition_penalty)
        real = np.zeros((rows, self.slots), dtype=bool)  # only its shape is read: the slots' count
        state = FixedState(
            self.buffers.cross,
            self.buffers.sets[self.parity].cache,
            real,
            max(map(len, prompt_ids)),
            np.zeros(rows, np.int64),
            [list(ids) for ids in prompt_ids],
            repetition_penalty,
            rows=rows,
            size=self.size_for(rows),
        )
        state.binding = self.last_binding
        return tokens, state

    def step(self, state: DecoderState) -> np.ndarray:
        if not isinstance(state, FixedState):
            return super().step(state)  # a batch that did not fit
        if state.written == state.slots:
            raise ValueError(f"the cache's {state.slots} slots are full: start with a larger max_new_tokens")
        tokens = self.step_rows(state.size)[: state.rows]
        state.written += 1
        state.binding = self.last_binding
        return tokens

    @functools.cache  # noqa: B019 (one per graph: a dozen, for the decoder's life)
    def recorded(self, graph_id: int) -> ort.RunOptions:
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return options


STEP_OUTPUT_INDEX = {name: index for index, name in enumerate(NEXT_OUTPUTS)}  # as _binding binds them
