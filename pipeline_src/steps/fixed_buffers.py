"""The text decoder on fixed buffers: a table of rows that requests join and leave between steps, and that ONNX
Runtime can replay as CUDA graphs.

Every tensor a step reads or writes is allocated once, for ``capacity`` rows (a row: one caption being written).
Rows join at a step boundary (``admit``, at their place in the table) and leave when their caption ends; a step
(``step_rows``) runs over the first rows, as many as one of ``batch_sizes`` that holds every row in use (free rows
step along, unread). Steps alternate between two buffer sets (one read, one written), so a step of a given size and
parity always binds the same addresses: ONNX Runtime records it once (``gpu_graph_id``; ``warm_up`` records every
size) and replays it, and only the next tokens come to the host. A prompt's step changes shape: it runs unrecorded.
``start`` and ``step`` serve a whole batch as ``TextDecoder``'s do (the tests check them against it on the CPU);
``pipeline_src.steps.caption_engine`` admits and retires rows one request at a time.

Longer than most: the table's buffers, its bindings, rows joining and stepping, and the fast mode's guard, which
redoes a row's step on the exact graph over the same buffers and parity: one state, kept in one place.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline_src.steps.text_decoder import (
    FED_BACK,
    IMAGE_EMBEDS,
    MARGIN_OUTPUT,
    NEXT_OUTPUTS,
    DecoderState,
    TextDecoder,
)

BATCH_SIZES = (1, 2, 4, 8, 16, 32)


@dataclass
class BufferSet:
    """What one step reads and the other writes: the self-attention caches and the fed-back inputs."""

    cache: list[ort.OrtValue]  # cache_names("past") order, each [capacity, heads, slots, head_size]
    fed: dict[str, ort.OrtValue]  # FED_BACK's inputs: input_ids [capacity, 1], ..., seen [capacity, vocab]


@dataclass
class Buffers:
    cross: list[ort.OrtValue]  # each [capacity, heads, image tokens, head_size]
    fast_cross: list[ort.OrtValue]  # the fast mode's, in fp16 (its decoder step reads them); else none
    sets: tuple[BufferSet, BufferSet]
    repetition_penalty: ort.OrtValue  # [1]
    slot_ids: ort.OrtValue  # [slots]
    margin: ort.OrtValue  # [capacity, 1]: each step's lead of its choice over the runner-up (the guard reads it)


@dataclass
class FastGraphs:
    """The fast mode: fp16 cross-attention and decoder-step graphs, guarded: a row whose choice leads the runner-up by
    no more than ``guard_margin`` has that step redone on the exact graphs. Only the fast cross K/V are fp16 buffers of
    their own; the caches and fed inputs stay fp32, so the exact step can take a row over at any step (its exact K/V
    computed at the guard's first visit): forced on every step, the guard gives the exact captions."""

    cross_kv: ort.InferenceSession
    step: ort.InferenceSession
    guard_margin: float


@dataclass
class FixedState(DecoderState):
    rows: int = 0  # the batch's own rows: rows 0 to rows - 1 of the table
    size: int = 0  # the step size that holds them


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
        fast: FastGraphs | None = None,
        **session_args,
    ):
        """``fast``: steps run on these graphs, guarded (the exact ones redo a step whose choice is close)."""
        super().__init__(directory, **session_args)
        self.fast = fast
        self.serving_step = fast.step if fast else self.step_session
        self.last_redone: list[int] = []  # the rows whose step the guard redid exactly, in the last admit or step
        self.guard_counts = [0, 0]  # steps redone, steps guarded: since the caller last reset it
        # the fast mode: each row's image embeddings (a host array, or values on the device) and its row in them, for
        # its exact cross-attention keys and values should the guard need them; the rows that have them
        self.row_embeds: dict[int, tuple[np.ndarray | ort.OrtValue, int]] = {}
        self.exact_cross: set[int] = set()
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

        cross_shape = (rows, heads, shape["image_tokens"], head_size)
        # what the fast cross-attention graph writes: fp16 (the build's twins), or fp32 (a twin of another kind)
        fp16 = self.fast is not None and self.fast.cross_kv.get_outputs()[0].type == "tensor(float16)"
        return Buffers(
            cross=[self._zeros(cross_shape) for _ in self.cross_names],
            fast_cross=[self._zeros(cross_shape, np.float16 if fp16 else np.float32) for _ in self.cross_names]
            if self.fast
            else [],
            sets=(buffer_set(), buffer_set()),
            repetition_penalty=self._zeros((1,)),
            slot_ids=ort.OrtValue.ortvalue_from_numpy(np.arange(self.slots, dtype=np.int64), *self.device),
            margin=self._zeros((rows, 1)),
        )

    def _bind_rows(
        self, binding: ort.IOBinding, name: str, value: ort.OrtValue, rows: int, first: int, output: bool
    ) -> None:
        """Rows ``[first, first + rows)`` of a buffer, bound by address: contiguous, so bindable as a tensor."""
        shape = value.shape()
        address = value.data_ptr() + first * (value.tensor_size_in_bytes() // shape[0])
        bind = binding.bind_output if output else binding.bind_input
        bind(name, *self.device, value.element_type(), [rows, *shape[1:]], address)

    def _binding(
        self,
        rows: int,
        read: BufferSet,
        written: BufferSet,
        prompt: dict | None = None,
        first: int = 0,
        exact: bool = False,
    ) -> ort.IOBinding:
        """A step over rows ``[first, first + rows)`` on the serving graph (fast or exact), or with ``exact`` on the
        exact one: reads ``read``'s caches and fed inputs (or the prompt's, from the host), writes ``written``'s."""
        binding = (self.step_session if exact else self.serving_step).io_binding()
        for name, value in (prompt or {}).items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        binding.bind_ortvalue_input("repetition_penalty", self.buffers.repetition_penalty)
        binding.bind_ortvalue_input("slot_ids", self.buffers.slot_ids)
        cross = self.buffers.fast_cross if self.fast and not exact else self.buffers.cross
        fed = {} if prompt else read.fed  # a prompt's step reads its own, bound above from the host
        for name, value in [*fed.items(), *zip(self.past_names, read.cache), *zip(self.cross_names, cross)]:
            self._bind_rows(binding, name, value, rows, first, output=False)
        outputs = [(name, written.fed[FED_BACK[name]]) for name in NEXT_OUTPUTS]  # STEP_OUTPUT_INDEX's order
        for name, value in [*outputs, (MARGIN_OUTPUT, self.buffers.margin), *zip(self.present_names, written.cache)]:
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
        if self.fast:
            self._cross_kv(self.fast.cross_kv, buffers.fast_cross, image_embeds, embeds_row, rows, first)
            for row in range(first, first + rows):
                self.row_embeds[row] = (image_embeds, embeds_row + row - first)
                self.exact_cross.discard(row)
        else:
            self._cross_kv(self.cross_kv, buffers.cross, image_embeds, embeds_row, rows, first)
        if repetition_penalty != self.repetition_penalty:  # the captioner's one setting: set once in practice
            buffers.repetition_penalty.update_inplace(np.array([repetition_penalty], np.float32))
            self.repetition_penalty = repetition_penalty

        input_ids, positions, real = self.left_padded(prompt_ids, self.slots)
        empty = DecoderState([], [], real, 0, np.zeros(rows, np.int64))
        prompt = self.step_inputs(empty, input_ids, positions, prompt_ids)
        # Written into the set the next step reads; the caches it "reads" are the other set's, whatever they hold:
        # the bias hides every slot the prompt has not written.
        read, written = buffers.sets[1 - self.parity], buffers.sets[self.parity]
        binding = self._binding(rows, read, written, prompt, first)
        self.serving_step.run_with_iobinding(binding, self.unrecorded)
        self.last_binding = binding
        tokens = next_tokens(binding)
        low = self._close_calls(binding, range(rows))
        if low:  # the guard: the prompt's step again on the exact graph, for the whole run (rare: it is one step)
            tokens = self._exact_step(range(first, first + rows), read, written, prompt)
        self.last_redone = [first + row for row in low]
        return tokens

    def step_rows(self, size: int, guarded: Sequence[int] = ()) -> np.ndarray:
        """One step of rows ``[0, size)`` (``size`` one of ``batch_sizes``): each row's next token. In the fast mode,
        those of the ``guarded`` rows (the ones in use) whose choice was close are redone on the exact graph
        (``last_redone`` says which)."""
        key = (size, self.parity)
        if key not in self.bindings:
            sets = self.buffers.sets
            self.bindings[key] = self._binding(size, sets[self.parity], sets[1 - self.parity])
        binding = self.bindings[key]
        self.serving_step.run_with_iobinding(binding, self.recorded(2 * self.batch_sizes.index(size) + self.parity))
        read, written = self.buffers.sets[self.parity], self.buffers.sets[1 - self.parity]
        self.parity = 1 - self.parity
        self.last_binding = binding
        tokens = next_tokens(binding)
        self.last_redone = self._close_calls(binding, guarded)
        for first, last in runs(self.last_redone):  # the same inputs, the exact graph, those rows alone
            tokens[first : last + 1] = self._exact_step(range(first, last + 1), read, written)
        return tokens

    def _exact_step(self, rows: range, read: BufferSet, written: BufferSet, prompt: dict | None = None) -> np.ndarray:
        """The guard: ``rows``' step again on the exact graph (their exact cross-attention made at its first visit),
        over the same buffers; their next tokens."""
        self._exact_cross(rows)
        exact = self._binding(len(rows), read, written, prompt, rows.start, exact=True)
        self.step_session.run_with_iobinding(exact, self.unrecorded)
        return next_tokens(exact)

    def _cross_kv(
        self,
        session: ort.InferenceSession,
        into: list[ort.OrtValue],
        image_embeds: np.ndarray | ort.OrtValue,
        embeds_row: int,
        rows: int,
        first: int,
    ) -> None:
        """Rows ``[embeds_row, embeds_row + rows)`` of ``image_embeds`` -> their cross-attention keys and values, in
        rows ``[first, first + rows)`` of ``into``."""
        binding = session.io_binding()
        if isinstance(image_embeds, ort.OrtValue):
            self._bind_rows(binding, IMAGE_EMBEDS, image_embeds, rows, embeds_row, output=False)
        else:
            embeds = image_embeds[embeds_row : embeds_row + rows]
            binding.bind_cpu_input(IMAGE_EMBEDS, np.ascontiguousarray(embeds, dtype=np.float32))
        for name, value in zip(self.cross_names, into):
            self._bind_rows(binding, name, value, rows, first, output=True)
        session.run_with_iobinding(binding)

    def _exact_cross(self, rows: Sequence[int]) -> None:
        """The fast mode: the exact cross-attention keys and values of ``rows`` that lack them (the guard's first
        visit), from the embeddings they joined with."""
        for row in rows:
            if row not in self.exact_cross:
                embeds, embeds_row = self.row_embeds[row]
                self._cross_kv(self.cross_kv, self.buffers.cross, embeds, embeds_row, 1, row)
                self.exact_cross.add(row)

    def _close_calls(self, binding: ort.IOBinding, guarded: Sequence[int]) -> list[int]:
        """In the fast mode, the ``guarded`` rows (of the binding's) whose choice led the runner-up by no more than the
        guard's margin; counted in ``guard_counts``."""
        if self.fast is None or not guarded:
            return []
        margins = binding.get_outputs()[STEP_OUTPUT_INDEX[MARGIN_OUTPUT]].numpy()[:, 0]
        low = [row for row in guarded if not margins[row] > self.fast.guard_margin]  # a tie, a NaN: redone too
        self.guard_counts[0] += len(low)
        self.guard_counts[1] += len(guarded)
        return low

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
        live = range(state.rows) if state.live is None else state.live  # the guard watches the unfinished rows
        tokens = self.step_rows(state.size, live)[: state.rows]
        state.written += 1
        state.binding = self.last_binding
        return tokens

    @functools.cache  # noqa: B019 (one per graph: a dozen, for the decoder's life)
    def recorded(self, graph_id: int) -> ort.RunOptions:
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return options


# as _binding binds them: the fed-back outputs, then the margin
STEP_OUTPUT_INDEX = {name: index for index, name in enumerate([*NEXT_OUTPUTS, MARGIN_OUTPUT])}


def next_tokens(binding: ort.IOBinding) -> np.ndarray:
    """Each row's next token, as the step ``binding`` bound made it (the one output that comes to the host)."""
    return binding.get_outputs()[STEP_OUTPUT_INDEX["next_ids"]].numpy()[:, 0]


def runs(rows: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted row numbers as (first, last) of each run of consecutive ones: [0, 1, 2, 5, 6] -> [(0, 2), (5, 6)]."""
    groups = groupby(enumerate(rows), key=lambda pair: pair[1] - pair[0])  # consecutive rows: one row - position
    return [(run[0][1], run[-1][1]) for run in (list(group) for _, group in groups)]
