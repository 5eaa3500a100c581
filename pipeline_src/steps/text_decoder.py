"""BLIP's text decoder on ONNX Runtime (``pipeline_src.model_build.blip_onnx``'s graphs), one step at a time: the
cross-attention K/V once per image, then a step per token over a cache with a slot for every token a row may hold.
Prompts are left-padded; each row's own positions (0 at its first real token) and attention bias hide the padding and
the unwritten slots. Greedy generation (``start``, ``step``) makes each next step's inputs on the device, so only a
token per row reaches the host; the build's fidelity check (``prefill``, ``advance``) brings the logits back, for
teacher forcing against Hugging Face.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline_src.steps.onnx_runtime import onnx_session
from pipeline_src.steps.precision import precision_file

DECODER_SHAPE_FILE = "decoder.json"  # the text decoder's dimensions and special tokens, written by the build
CROSS_KV_FILE = "cross_kv.onnx"
DECODER_STEP_FILE = "decoder_step.onnx"
IMAGE_EMBEDS = "image_embeds"  # the vision encoder's output, the cross-attention's input
# The decoder step's layout, written into decoder.json by the build: graphs of another layout (an earlier
# build's, whose step returned logits alone, or whose cache grew by a token per step) are rebuilt by `make models`.
CACHE_LAYOUT = "row-slots-greedy-margin"
MASKED = np.finfo(np.float32).min  # the bias of a slot a token may not look at (Hugging Face's eager mask)
# The decoder step's inputs beside the caches, and the outputs that are the next step's inputs (in the same
# order as the inputs they feed); the graph's other outputs are the logits and the present caches.
STEP_INPUTS = (
    "input_ids",
    "position_ids",
    "attention_bias",
    "cache_positions",
    "seen",
    "repetition_penalty",
    "slot_ids",
)
NEXT_OUTPUTS = ("next_ids", "next_position_ids", "next_attention_bias", "next_cache_positions", "next_seen")
FED_BACK = dict(zip(NEXT_OUTPUTS, STEP_INPUTS))  # next_ids -> input_ids, ...
MARGIN_OUTPUT = "next_margin"  # [b, 1] float: the chosen token's lead over the runner-up (the fast mode's guard)


def cache_names(kind: str, layers: int) -> list[str]:
    """The graphs' cache tensors, one per layer and part: ``{kind}_key.N``, ``{kind}_value.N`` for layer N
    (kind: ``cross``, ``past`` or ``present``), in this order."""
    return [f"{kind}_{part}.{layer}" for layer in range(layers) for part in ("key", "value")]


def decoder_sessions(
    directory: Path,
    precision: str,
    on_gpu: bool = False,
    device_id: int = 0,
    intra_op_threads: int = 0,
    cuda_graph: bool = False,
) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    """The cross-attention K/V graph (run once per request: no CPU arena) and the decoder step's, in ``precision``;
    ``cuda_graph``: the step's runs may be recorded and replayed on CUDA."""
    cross_kv, step = (precision_file(directory / name, precision) for name in (CROSS_KV_FILE, DECODER_STEP_FILE))
    return (
        onnx_session(cross_kv, on_gpu, device_id, intra_op_threads, cpu_arena=False),
        onnx_session(step, on_gpu, device_id, intra_op_threads, cuda_graph=cuda_graph),
    )


@dataclass
class DecoderState:
    """The KV cache of a batch of rows being generated, and what each row has seen so far."""

    # Where the session computes (the GPU on a GPU instance): fed back at every token without a copy.
    cross: list[ort.OrtValue]  # cache_names("cross") order, each [batch, heads, image tokens, head_size]
    cache: list[ort.OrtValue]  # the self-attention's, cache_names("past") order, each [batch, heads, slots, head_size]
    real: np.ndarray  # [batch, slots]: True where a slot holds a token (not left padding, not yet written)
    written: int  # slots written so far, the same for every row (prompts are left-padded to one width)
    next_position: np.ndarray  # [batch]: the position the row's next token takes
    seen: list[list[int]] = field(default_factory=list)  # each row's tokens, prompt included (repetition penalty)
    repetition_penalty: float = 1.0
    # Greedy generation: the next step's inputs as the last step made them, where it made them (FED_BACK's names)
    fed_back: dict[str, ort.OrtValue] = field(default_factory=dict)
    binding: ort.IOBinding | None = None  # the last step's (what it bound is what crossed to the host)
    live: Sequence[int] | None = None  # the rows still being written (None: all), set by the caller

    @property
    def slots(self) -> int:
        return self.real.shape[1]


class TextDecoder:
    """BLIP's text decoder as two ONNX Runtime sessions: cross-attention K/V once, then one step per token."""

    def __init__(
        self,
        directory: Path,
        precision: str = "fp32",
        on_gpu: bool = False,
        device_id: int = 0,
        intra_op_threads: int = 0,
        cuda_graph: bool = False,
    ):
        """``cuda_graph``: let ONNX Runtime record and replay the decoder step on CUDA (``FixedBufferDecoder``
        gives it the fixed addresses that needs)."""
        self.directory = directory
        self.shape = json.loads((directory / DECODER_SHAPE_FILE).read_text())
        if self.shape.get("cache_layout") != CACHE_LAYOUT:
            raise ValueError(
                f"{directory} holds decoder graphs of an earlier layout (not {CACHE_LAYOUT!r}: a step without "
                "the greedy choice, or a cache that grows by a token per step): rebuild them with `make models` "
                "(scripts/build_models.py)"
            )
        self.cross_names, self.past_names, self.present_names = (
            cache_names(kind, self.shape["layers"]) for kind in ("cross", "past", "present")
        )
        self.cross_kv, self.step_session = decoder_sessions(
            directory, precision, on_gpu, device_id, intra_op_threads, cuda_graph
        )
        # The caches stay on the session's device: on a GPU, copying them to the host and back at every token
        # (42 MB of cross-attention keys and values per image with BLIP base) would cost more than the step.
        on_cuda = self.step_session.get_providers()[0] == "CUDAExecutionProvider"
        self.device = ("cuda" if on_cuda else "cpu", device_id if on_cuda else 0)
        self.unrecorded = ort.RunOptions()  # shapes that change from batch to batch: never a CUDA graph
        self.unrecorded.add_run_config_entry("gpu_graph_id", "-1")

    @property
    def warm_sizes(self) -> tuple[int, ...]:
        """The batch sizes a warm-up runs once each (``FixedBufferDecoder``: every size it records)."""
        return (1,)

    # --- greedy generation: only tokens come to the host ------------------------------------------------------

    def start(
        self,
        image_embeds: np.ndarray,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        repetition_penalty: float = 1.0,
    ) -> tuple[np.ndarray, DecoderState]:
        """Each row's first new token (greedy, after the repetition penalty), and the state to go on from."""
        state, prompt = self._prefill_state(image_embeds, prompt_ids, max_new_tokens, repetition_penalty)
        return self._greedy_run(state, prompt, prompt["input_ids"].shape[1]), state

    def step(self, state: DecoderState) -> np.ndarray:
        """Feed each row's last token (already where the step runs); each row's next token."""
        if state.written == state.slots:
            raise ValueError(f"the cache's {state.slots} slots are full: start with a larger max_new_tokens")
        return self._greedy_run(state, state.fed_back, 1)

    def _greedy_run(self, state: DecoderState, inputs: Mapping[str, np.ndarray | ort.OrtValue], new: int) -> np.ndarray:
        binding = self._bind(state, inputs, dict.fromkeys(NEXT_OUTPUTS, self.device))
        state.binding = binding
        outputs = self._run(state, binding, new)
        state.fed_back = {FED_BACK[name]: value for name, value in zip(NEXT_OUTPUTS, outputs)}
        return state.fed_back["input_ids"].numpy()[:, 0]

    # --- the build's fidelity check: the logits come to the host -------------------------------------------------

    def prefill(
        self, image_embeds: np.ndarray, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[np.ndarray, DecoderState]:
        """The logits after each row's prompt, and the state to go on from: a cache with room for the prompt and
        the ``max_new_tokens - 1`` tokens that may be fed back (the last one generated never is)."""
        state, prompt = self._prefill_state(image_embeds, prompt_ids, max_new_tokens, 1.0)
        return self._logits_run(state, prompt), state

    def advance(self, state: DecoderState, tokens: np.ndarray) -> np.ndarray:
        """Feed one token per row of the caller's choice (recorded, the next slot marked written); the logits for the
        token after it."""
        if state.written == state.slots:
            raise ValueError(f"the cache's {state.slots} slots are full: prefill with a larger max_new_tokens")
        for seen, token in zip(state.seen, tokens):
            seen.append(int(token))
        positions = state.next_position[:, None].copy()  # [rows, 1]
        state.next_position += 1
        state.real[:, state.written] = True
        return self._logits_run(state, self.step_inputs(state, tokens.astype(np.int64)[:, None], positions, state.seen))

    def _logits_run(self, state: DecoderState, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        binding = self._bind(state, inputs, {"logits": ("cpu", 0)})
        return self._run(state, binding, inputs["input_ids"].shape[1])[0].numpy()

    # --- shared -------------------------------------------------------------------------------------------------

    def _prefill_state(
        self,
        image_embeds: np.ndarray,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        repetition_penalty: float,
    ) -> tuple[DecoderState, dict[str, np.ndarray]]:
        """The cross-attention's keys and values, an empty cache, and the prompt's step inputs."""
        rows, width = len(prompt_ids), max(len(ids) for ids in prompt_ids)
        input_ids, positions, real = self.left_padded(prompt_ids, width + max(max_new_tokens - 1, 0))
        binding = self.cross_kv.io_binding()
        binding.bind_cpu_input(IMAGE_EMBEDS, np.ascontiguousarray(image_embeds))
        for name in self.cross_names:
            binding.bind_output(name, *self.device)
        self.cross_kv.run_with_iobinding(binding)
        empty = ort.OrtValue.ortvalue_from_numpy(
            np.zeros((rows, self.shape["heads"], real.shape[1], self.shape["head_size"]), np.float32), *self.device
        )  # read only: one for every layer's keys and values
        state = DecoderState(
            binding.get_outputs(),
            [empty] * len(self.past_names),
            real,
            0,
            np.array([len(ids) for ids in prompt_ids], dtype=np.int64),
            [list(ids) for ids in prompt_ids],
            repetition_penalty,
        )
        return state, self.step_inputs(state, input_ids, positions, state.seen)

    def step_inputs(
        self, state: DecoderState, input_ids: np.ndarray, positions: np.ndarray, seen: Sequence[Sequence[int]]
    ) -> dict[str, np.ndarray]:
        """A step's token inputs (``FED_BACK``'s names): ``input_ids`` and ``positions [rows, t]``, their attention
        bias and cache slots under ``state``, and the tokens each row has ``seen``."""
        bias, cache_positions = attention_bias(state, input_ids.shape[1])
        return dict(zip(FED_BACK.values(), (input_ids, positions, bias, cache_positions, self.seen_mask(seen))))

    def seen_mask(self, seen: Sequence[Sequence[int]]) -> np.ndarray:
        """``[rows, vocab]``: True at each token a row holds (the repetition penalty's tokens)."""
        mask = np.zeros((len(seen), self.shape["vocab_size"]), dtype=bool)
        for row, tokens in enumerate(seen):
            mask[row, list(tokens)] = True
        return mask

    def left_padded(self, prompt_ids: Sequence[Sequence[int]], slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The prompts as one step's ``input_ids`` and ``position_ids [rows, width]``, left-padded so that every
        row's last prompt token is in the last column, and which of ``slots`` hold a token."""
        rows, width = len(prompt_ids), max(len(ids) for ids in prompt_ids)
        input_ids = np.full((rows, width), self.shape["pad_token_id"], dtype=np.int64)
        positions = np.zeros((rows, width), dtype=np.int64)
        real = np.zeros((rows, slots), dtype=bool)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, width - len(ids) :] = ids
            positions[row, width - len(ids) :] = np.arange(len(ids))
            real[row, width - len(ids) : width] = True
        return input_ids, positions, real

    def _bind(
        self,
        state: DecoderState,
        inputs: Mapping[str, np.ndarray | ort.OrtValue],
        outputs: Mapping[str, tuple[str, int]],
    ) -> ort.IOBinding:
        """A step's binding: the token inputs (host arrays, or values the last step left on the device), the
        penalty, the slots' ids, the caches; ``outputs`` where each is wanted, then the present caches, on the
        device (``get_outputs`` returns them in this order)."""
        binding = self.step_session.io_binding()
        given = {
            "repetition_penalty": np.array([state.repetition_penalty], np.float32),
            "slot_ids": np.arange(state.slots, dtype=np.int64),
            **inputs,
        }
        for name in STEP_INPUTS:
            value = given[name]
            if isinstance(value, ort.OrtValue):
                binding.bind_ortvalue_input(name, value)
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name, value in zip([*self.past_names, *self.cross_names], [*state.cache, *state.cross]):
            binding.bind_ortvalue_input(name, value)
        for name, (device, device_id) in outputs.items():
            binding.bind_output(name, device, device_id)
        for name in self.present_names:
            binding.bind_output(name, *self.device)
        return binding

    def _run(self, state: DecoderState, binding: ort.IOBinding, new_tokens: int) -> list[ort.OrtValue]:
        """One step over ``new_tokens`` tokens a row, written to the next slots; the outputs bound before the
        present caches, which become the state's cache."""
        self.step_session.run_with_iobinding(binding, self.unrecorded)
        outputs = binding.get_outputs()
        firsts = len(outputs) - len(self.present_names)
        state.cache = outputs[firsts:]
        state.written += new_tokens
        return outputs[:firsts]


def attention_bias(state: DecoderState, new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The next ``new_tokens`` tokens' attention bias ``[batch, 1, t, slots]`` and slots ``[batch, t]``: a token
    looks at the slots up to its own that hold a token."""
    cache_positions = np.arange(state.written, state.written + new_tokens, dtype=np.int64)
    visible = state.real[:, None, :] & (np.arange(state.slots)[None, None, :] <= cache_positions[None, :, None])
    rows = len(state.real)
    return np.where(visible, np.float32(0.0), MASKED)[:, None], np.broadcast_to(cache_positions, (rows, new_tokens))
