"""The captioner's fast mode, built: fp16 twins of the vision encoder, cross-attention and decoder step graphs, and
the calibration of its guard on the build's check photos. The cross-attention keys and values pass between the fast
graphs in fp16 (their own buffers: read at every step, half the bytes); every other input and output stays fp32, so
that the fast step reads and writes the same buffers as the exact one, which the guard hands a row to.

The guard (docs/performance.md, "The fast mode") redoes a decoder step on the exact graphs where the fast choice led
its runner-up by no more than a margin, calibrated teacher-forced: twice the largest fast lead at a position where
the fast choice differs from Hugging Face fp32's, and at least twice fp16's resolution at the logits' size (fp16
rounds close scores to a tie, and a tie is never trusted). The fidelity, written beside the graphs: teacher-forced
top-1 without the guard; with it, the captions of food11_pipeline and food11_pipeline_merged and the steps redone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.transformers.float16 import convert_float_to_float16

from pipeline_src.model_build.blip_fidelity import Reference, teacher_forced
from pipeline_src.steps.captioning import GreedyCaptioner
from pipeline_src.steps.fixed_buffers import FastGraphs, FixedBufferDecoder
from pipeline_src.steps.onnx_runtime import OnnxModel, onnx_session
from pipeline_src.steps.precision import FAST_PRECISION, precision_file
from pipeline_src.steps.text_decoder import CROSS_KV_FILE, DECODER_STEP_FILE, TextDecoder, cache_names

GUARD_SAFETY = 2.0  # the guard's margin over the largest lead at which a fast choice was wrong


def write_fp16_twin(graph: Path, fp16_io: Sequence[str] = ()) -> Path:
    """``graph``'s fp16 twin (``name.fp16.onnx``), its inputs and outputs fp32 but ``fp16_io``."""
    model = onnx.load(str(graph))
    io = [tensor.name for tensor in (*model.graph.input, *model.graph.output)]
    kept = [name for name in io if name not in fp16_io]
    twin = precision_file(graph, FAST_PRECISION)
    onnx.save(convert_float_to_float16(model, keep_io_types=kept), str(twin))
    return twin


def calibrate(reference: Reference, fast: TextDecoder, embeds: np.ndarray, max_new_tokens: int) -> dict:
    """Teacher-forced on the reference's tokens: how often the fast graphs choose as Hugging Face fp32 did, and the
    guard's margin."""
    agree = total = 0
    wrong_leads: list[float] = []
    resolution = 0.0  # fp16's spacing at the largest score seen
    for logits, token, _ in teacher_forced(reference, fast, embeds, max_new_tokens):
        resolution = max(resolution, float(np.spacing(np.float16(np.abs(logits).max()))))
        total += 1
        if np.argmax(logits) == token:
            agree += 1
        else:  # the wrong choice's lead over its runner-up
            best, runner_up = np.sort(logits)[-2:][::-1]
            wrong_leads.append(float(best - runner_up))
    margin = GUARD_SAFETY * max([*wrong_leads, resolution])
    return {
        "teacher_forced_top1": agree / total,
        "teacher_forced_tokens": total,
        "disagreements": len(wrong_leads),
        "guard_margin": margin,
    }


def guarded_captions(text_dir: Path, margin: float, embeds: np.ndarray, reference: Reference, max_new: int) -> dict:
    """The check photos captioned as the fast mode serves them, in one batch: how many are the reference's, and the
    share of steps the guard redid on the exact graphs."""
    fast = FastGraphs(
        onnx_session(precision_file(text_dir / CROSS_KV_FILE, FAST_PRECISION), cpu_arena=False),
        onnx_session(precision_file(text_dir / DECODER_STEP_FILE, FAST_PRECISION)),
        margin,
    )
    longest = max(map(len, reference.prompt_ids))
    decoder = FixedBufferDecoder(text_dir, longest, max_new, batch_sizes=(len(reference.tokens),), fast=fast)
    tokens = GreedyCaptioner(decoder, tokenizer=None, max_new_tokens=max_new).generate(embeds, reference.prompt_ids)
    redone, guarded = decoder.guard_counts
    return {
        "captions_identical": sum(ours == theirs for ours, theirs in zip(tokens, reference.tokens)),
        "captions": len(reference.tokens),
        "guard_redone_steps": redone,
        "guard_steps": guarded,
    }


def build_fast(vision: Path, text_dir: Path, reference: Reference, pixels: np.ndarray, max_new: int) -> dict:
    """The fp16 twins, the guard's margin and the fast mode's fidelity (what fidelity.json records as fp16)."""
    shape = TextDecoder(text_dir).shape
    write_fp16_twin(vision)
    for graph in (text_dir / CROSS_KV_FILE, text_dir / DECODER_STEP_FILE):
        write_fp16_twin(graph, cache_names("cross", shape["layers"]))
    exact_embeds = OnnxModel(vision)(pixels)
    figures = calibrate(reference, TextDecoder(text_dir, FAST_PRECISION), exact_embeds, max_new)
    margin = figures["guard_margin"]
    fast_embeds = OnnxModel(precision_file(vision, FAST_PRECISION))(pixels)
    return {
        **figures,
        **guarded_captions(text_dir, margin, exact_embeds, reference, max_new),
        "merged": guarded_captions(text_dir, margin, fast_embeds, reference, max_new),
        "means": "text decoder fp16 with the guard (food11_pipeline: the vision encoder's step exact); merged: the "
        "captioner's vision encoder fp16 too (food11_pipeline_merged)",
    }
