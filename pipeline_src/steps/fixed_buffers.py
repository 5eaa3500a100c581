"""The text decoder on fixed buffers, so that ONNX Runtime can replay its steps as CUDA graphs.

A CUDA graph replays a recorded step with the same shapes at the same addresses. So here a batch is
padded to one of a few sizes (its extra rows copy its first, and are dropped), every size gets its buffers
once, at the longest prompt plus every token it may feed back, and the steps alternate between two caches
(one read, one written). A step of a given size and parity then always has the same inputs and outputs,
and with ``enable_cuda_graph`` ONNX Runtime records it once (``gpu_graph_id``) and replays it after. The
prompt's step has another width for each batch, so it runs unrecorded (``gpu_graph_id -1``).

On the CPU the same code runs without recording: the tests check it there against ``TextDecoder``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline_src.steps.text_decoder import IMAGE_EMBEDS, DecoderState, TextDecoder, attention_bias

BATCH_SIZES = (1, 2, 4, 8, 16, 32)


@dataclass
class Buffers:
    """One batch size's tensors, allocated once on the session's device."""

    cross: list[ort.OrtValue]
    caches: tuple[list[ort.OrtValue], list[ort.OrtValue]]  # a step reads one and writes the other
    input_ids: ort.OrtValue  # [rows, 1]
    position_ids: ort.OrtValue  # [rows, 1]
    attention_bias: ort.OrtValue  # [rows, 1, 1, slots]
    cache_positions: ort.OrtValue  # [1]
    logits: ort.OrtValue  # [rows, vocab]


@dataclass
class FixedState(DecoderState):
    rows: int = 0  # the batch's own rows; the buffers' are the padded size
    buffers: Buffers | None = None
    graph_base: int = 0  # this size's first gpu_graph_id; + the step's parity


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
        self.buffers: dict[int, Buffers] = {}

    def fits(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int) -> bool:
        longest = max(map(len, prompt_ids))
        return (
            len(prompt_ids) <= self.batch_sizes[-1]
            and longest <= self.max_prompt_tokens
            and longest + max_new_tokens - 1 <= self.slots
        )

    def _zeros(self, shape: Sequence[int], dtype=np.float32) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype), *self.device)

    def _buffers(self, size: int) -> Buffers:
        if size not in self.buffers:
            shape = self.shape
            heads, head_size = shape["heads"], shape["head_size"]
            self.buffers[size] = Buffers(
                cross=[self._zeros((size, heads, shape["image_tokens"], head_size)) for _ in self.cross_names],
                caches=tuple(  # type: ignore[arg-type]
                    [self._zeros((size, heads, self.slots, head_size)) for _ in self.past_names] for _ in range(2)
                ),
                input_ids=self._zeros((size, 1), np.int64),
                position_ids=self._zeros((size, 1), np.int64),
                attention_bias=self._zeros((size, 1, 1, self.slots)),
                cache_positions=self._zeros((1,), np.int64),
                logits=self._zeros((size, shape["vocab_size"])),
            )
        return self.buffers[size]

    def prefill(
        self, image_embeds: np.ndarray, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[np.ndarray, DecoderState]:
        if not self.fits(prompt_ids, max_new_tokens):
            return super().prefill(image_embeds, prompt_ids, max_new_tokens)  # unrecorded, sized to the batch
        rows = len(prompt_ids)
        size = next(size for size in self.batch_sizes if size >= rows)
        padded_ids = [*prompt_ids, *[prompt_ids[0]] * (size - rows)]
        padded_embeds = np.concatenate([image_embeds, np.repeat(image_embeds[:1], size - rows, axis=0)])
        buffers = self._buffers(size)
        binding = self.cross_kv.io_binding()
        binding.bind_cpu_input(IMAGE_EMBEDS, np.ascontiguousarray(padded_embeds))
        for name, value in zip(self.cross_names, buffers.cross):
            binding.bind_ortvalue_output(name, value)
        self.cross_kv.run_with_iobinding(binding)

        input_ids, positions, real = self.left_padded(padded_ids, self.slots)
        state = FixedState(
            buffers.cross,
            buffers.caches[1],  # whatever it holds: the bias hides the slots not yet written
            real,
            0,
            np.array([len(ids) for ids in padded_ids], dtype=np.int64),
            [list(ids) for ids in prompt_ids],  # the batch's own rows (the repetition penalty reads them)
            rows=rows,
            buffers=buffers,
            graph_base=2 * self.batch_sizes.index(size),
        )
        # The prompt's width differs from batch to batch: bound afresh and not recorded.
        binding = self._bind_step(state, buffers.caches[0])
        for name, array in zip(
            ("input_ids", "position_ids", "attention_bias", "cache_positions"),
            (input_ids, positions, *attention_bias(state, input_ids.shape[1])),
        ):
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        return self._finish(state, binding, buffers.caches[0], input_ids.shape[1], self.unrecorded), state

    def advance(self, state: DecoderState, tokens: np.ndarray) -> np.ndarray:
        if not isinstance(state, FixedState) or state.buffers is None:
            return super().advance(state, tokens)  # a batch that did not fit
        buffers = state.buffers
        positions = self.take_slot(state, tokens)  # the batch's rows' tokens; the padding rows' follow
        padded = np.concatenate([tokens, np.repeat(tokens[:1], len(state.real) - len(tokens))]).astype(np.int64)
        bias, cache_positions = attention_bias(state, 1)
        for buffer, array in (
            (buffers.input_ids, padded[:, None]),
            (buffers.position_ids, positions),
            (buffers.attention_bias, bias),
            (buffers.cache_positions, cache_positions),
        ):
            buffer.update_inplace(np.ascontiguousarray(array))
        parity = 0 if state.cache is buffers.caches[0] else 1  # the prompt's step wrote caches[0]
        written = buffers.caches[1 - parity]
        binding = self._bind_step(state, written)
        for name, value in (
            ("input_ids", buffers.input_ids),
            ("position_ids", buffers.position_ids),
            ("attention_bias", buffers.attention_bias),
            ("cache_positions", buffers.cache_positions),
        ):
            binding.bind_ortvalue_input(name, value)
        return self._finish(state, binding, written, 1, self.recorded(state.graph_base + parity))

    @functools.cache  # noqa: B019 (one per graph: a dozen, for the decoder's life)
    def recorded(self, graph_id: int) -> ort.RunOptions:
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return options

    def _bind_step(self, state: FixedState, written: list[ort.OrtValue]) -> ort.IOBinding:
        assert state.buffers is not None
        binding = self.step.io_binding()
        for name, value in zip([*self.past_names, *self.cross_names], [*state.cache, *state.cross]):
            binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output("logits", state.buffers.logits)
        for name, value in zip(self.present_names, written):
            binding.bind_ortvalue_output(name, value)
        return binding

    def _finish(
        self, state: FixedState, binding: ort.IOBinding, written: list[ort.OrtValue], new_tokens: int, options
    ) -> np.ndarray:
        self.step.run_with_iobinding(binding, options)
        state.cache = written
        state.written += new_tokens
        assert state.buffers is not None
        return state.buffers.logits.numpy()[: state.rows]
