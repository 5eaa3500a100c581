"""BLIP conditional captioning on ONNX Runtime: greedy decoding with a KV cache, the images of many
requests generated together, each row's tokens those it would get alone.

The decoding steps are ``pipeline_src.steps.text_decoder``'s (on a GPU instance, ``fixed_buffers``' for CUDA
graphs); this module picks the decoder, tokenizes, generates greedily and joins each caption to its prompt.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tokenizers

from pipeline_src.steps.fixed_buffers import FastGraphs, FixedBufferDecoder
from pipeline_src.steps.phase_clock import PhaseClock
from pipeline_src.steps.precision import FAST_PRECISION, FIDELITY_FILE, PrecisionChoice, read_fidelity
from pipeline_src.steps.settings import CaptionerSettings
from pipeline_src.steps.text_decoder import TextDecoder, decoder_sessions

STANDIN_MARKER = "STAND_IN.json"  # present only in a stand-in snapshot built by scripts/build_models.py
# The snapshot's tokenizer, written next to the graphs by the build: the step reads it with the `tokenizers`
# library alone (transformers' AutoTokenizer imports torch: hundreds of MiB of the step's memory for a word
# list; docs/performance.md, "Why the code is as it is").
TOKENIZER_FILE = "tokenizer.json"
# What the captioner step's clock times (docs/profiling.md, "Inside a step"): each iteration of its loop and, inside
# it, the joining pixels' vision encoding, their prefill, the decoder step; row_step counts the rows a step carried.
CAPTIONER_PHASES = ("iteration", "vision", "prefill", "decoder_step", "row_step")


def standin_info(model_dir: str | Path) -> dict | None:
    """The stand-in's description if ``model_dir`` holds a random-weights stand-in, else None."""
    marker = Path(model_dir) / STANDIN_MARKER
    return json.loads(marker.read_text()) if marker.exists() else None


def table_sizes(rows: int, recorded: bool) -> tuple[int, ...]:
    """The step sizes of a table of ``rows`` rows: where steps are recorded as CUDA graphs, powers of two and
    ``rows`` (a graph per size, each warmed at load); otherwise every size, so that no step computes more rows
    than the highest in use."""
    if not recorded:
        return tuple(range(1, rows + 1))
    return tuple(sorted({*(2**power for power in range(rows.bit_length()) if 2**power < rows), rows}))


def fast_graphs(
    settings: CaptionerSettings, graphs_dir: Path, on_gpu: bool, device_id: int, recorded: bool
) -> FastGraphs:
    """The fp16 twins the build wrote (``--fast``) and the guard's margin: the setting's, or the build's calibration."""
    margin = settings.fast_guard_margin
    if margin < 0:
        measured = ((read_fidelity(graphs_dir) or {}).get("options", {}).get(FAST_PRECISION)) or {}
        if "guard_margin" not in measured:
            raise FileNotFoundError(
                f"mode fast: {graphs_dir / FIDELITY_FILE} holds no calibrated guard margin: build the fp16 graphs with "
                "`make models BUILD_ARGS=--fast` (or set fast_guard_margin)"
            )
        margin = measured["guard_margin"]
    threads = settings.intra_op_threads
    return FastGraphs(*decoder_sessions(graphs_dir, FAST_PRECISION, on_gpu, device_id, threads, recorded), margin)


def blip_prompt_ids(encoded: Sequence[int], bos_token_id: int) -> list[int]:
    """A prompt's tokens (``[CLS] ... [SEP]``, as BERT's tokenizer encodes it) as BLIP's generate feeds them:
    [DEC] in place of [CLS], without the closing [SEP]."""
    return [bos_token_id, *encoded[1:-1]]


class GreedyCaptioner:
    """Captions for a batch of image embeddings, each with its own prompt, as ``generate`` writes them."""

    def __init__(
        self,
        decoder: TextDecoder,
        tokenizer: tokenizers.Tokenizer | None,
        max_new_tokens: int = 20,
        repetition_penalty: float = 1.0,
        choice: PrecisionChoice | None = None,
    ):
        self.decoder = decoder
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.repetition_penalty = repetition_penalty
        self.choice = choice  # which precision and why
        self.clock = PhaseClock()  # prefill and decoder_step time, for the step's metrics

    @classmethod
    def from_settings(
        cls, settings: CaptionerSettings, version_dir: Path, on_gpu: bool = False, device_id: int = 0
    ) -> GreedyCaptioner:
        """The captioner step's captioner as its settings describe it, for its model.py and the in-process
        baseline alike: its decoder a table of ``rows_in_flight`` rows (requests join and leave it between steps); on
        a GPU instance with ``gpu_cuda_graphs``, its steps recorded and replayed as CUDA graphs; in the fast mode, on
        the fp16 graphs, guarded by the exact ones."""
        graphs_dir = version_dir / settings.graphs_dir
        choice = settings.choose_precision(graphs_dir, on_gpu)
        recorded = on_gpu and settings.gpu_cuda_graphs
        decoder = FixedBufferDecoder(
            graphs_dir,
            settings.max_prompt_tokens,
            settings.max_new_tokens,
            table_sizes(settings.rows_in_flight, recorded),
            fast=fast_graphs(settings, graphs_dir, on_gpu, device_id, recorded) if settings.mode == "fast" else None,
            precision=choice.precision,
            on_gpu=on_gpu,
            device_id=device_id,
            intra_op_threads=settings.intra_op_threads,
            cuda_graph=recorded,
        )
        return cls.over(
            decoder,
            max_new_tokens=settings.max_new_tokens,
            repetition_penalty=settings.repetition_penalty,
            choice=choice,
        )

    @classmethod
    def load(cls, graphs_dir: Path, precision: str = "fp32", **generation) -> GreedyCaptioner:
        """On the CPU with ONNX Runtime's default threads (tests, benchmarks); the step uses from_settings."""
        return cls.over(TextDecoder(graphs_dir, precision), **generation)

    @classmethod
    def over(cls, decoder: TextDecoder, **generation) -> GreedyCaptioner:
        """A captioner over ``decoder``, with the tokenizer the build wrote beside its graphs."""
        return cls(decoder, tokenizers.Tokenizer.from_file(str(decoder.directory / TOKENIZER_FILE)), **generation)

    def text_tokenizer(self) -> tokenizers.Tokenizer:
        if self.tokenizer is None:
            raise ValueError("this captioner was made without a tokenizer: it generates token ids only")
        return self.tokenizer

    def prompt_ids(self, prompt: str) -> list[int]:
        return blip_prompt_ids(self.text_tokenizer().encode(prompt).ids, self.decoder.shape["bos_token_id"])

    def caption(self, image_embeds: np.ndarray, prompts: Sequence[str]) -> list[str]:
        """Captions for ``image_embeds [n, image tokens, width]``; ``""`` means no prompt."""
        if len(prompts) != len(image_embeds):
            raise ValueError(f"{len(image_embeds)} images but {len(prompts)} prompts")
        if not prompts:
            return []
        new_tokens = self.generate(image_embeds, [self.prompt_ids(prompt) for prompt in prompts])
        continuations = self.text_tokenizer().decode_batch(new_tokens, skip_special_tokens=True)
        return [join_caption(prompt, continuation) for prompt, continuation in zip(prompts, continuations)]

    def warm_up(self) -> float:
        """One full caption (every token up to ``max_new_tokens``) of zero image embeddings at each batch size
        the decoder records (one otherwise), so that a ready server's first requests find ONNX Runtime's arena,
        kernels and CUDA graphs set up, and nothing is recorded while serving. Returns its seconds."""
        started = time.perf_counter()
        shape = self.decoder.shape
        for size in self.decoder.warm_sizes:
            zeros = np.zeros((size, shape["image_tokens"], shape["vision_hidden_size"]), dtype=np.float32)
            _, state = self.decoder.start(
                zeros, [self.prompt_ids("a photo of")] * size, self.max_new_tokens, self.repetition_penalty
            )
            for _ in range(self.max_new_tokens - 1):  # no early [SEP]: the longest caption's cost
                self.decoder.step(state)
        return time.perf_counter() - started

    def generate(self, image_embeds: np.ndarray, prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """Each row's new tokens, up to and including [SEP] (or ``max_new_tokens`` of them). The greedy choice is
        the decoder's, on its device: a token per row comes back at each step, never the logits."""
        sep = self.decoder.shape["sep_token_id"]
        with self.clock.timing("prefill"):
            tokens, state = self.decoder.start(image_embeds, prompt_ids, self.max_new_tokens, self.repetition_penalty)
        generated: list[list[int]] = [[] for _ in prompt_ids]
        unfinished = np.ones(len(prompt_ids), dtype=bool)
        for step in range(self.max_new_tokens):
            for row in np.flatnonzero(unfinished):
                generated[row].append(int(tokens[row]))
            unfinished &= tokens != sep
            if not unfinished.any() or step == self.max_new_tokens - 1:
                break
            state.live = np.flatnonzero(unfinished).tolist()
            with self.clock.timing("decoder_step"):
                tokens = self.decoder.step(state)  # a finished row goes on, unread: rows never mix
        return generated


def join_caption(prompt: str, continuation: str) -> str:
    """The caption as the pipeline returns it: the prompt, then what BLIP wrote after it."""
    continuation = continuation.strip()
    if not prompt:
        return continuation
    return f"{prompt} {continuation}" if continuation else prompt
