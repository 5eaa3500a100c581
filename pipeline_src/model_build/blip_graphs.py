"""Build the captioner's ONNX graphs from a BLIP snapshot: export, fidelity, and on request int8 twins.

The fp32 graphs must reproduce Hugging Face's fp32 ``generate`` on the check photos, or the build stops
with the figures; they are what serving runs by default. The int8-weight twins (``int8=True``: a few
minutes more on a CPU) have their fidelity measured with everything else in fp32, written next to them
(``fidelity.json``), where a step's ``cpu_precision=auto`` reads it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tokenizers

from pipeline_src.model_build import blip_fidelity, blip_onnx
from pipeline_src.model_build.fast_graphs import build_fast
from pipeline_src.steps.captioning import TOKENIZER_FILE, blip_prompt_ids
from pipeline_src.steps.classification import build_prompt
from pipeline_src.steps.labels import FOOD11_CLASSES
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.precision import FAST_PRECISION, FIDELITY_FILE, precision_file, read_fidelity
from pipeline_src.steps.settings import CaptionWithLabelSettings
from pipeline_src.steps.text_decoder import (
    CACHE_LAYOUT,
    CROSS_KV_FILE,
    DECODER_SHAPE_FILE,
    DECODER_STEP_FILE,
    TextDecoder,
)

log = logging.getLogger(__name__)

CHECK_MAX_NEW_TOKENS = 20  # the captioner's default
INT8_BLOCK_SIZE = 64  # 128 and up were not batch-independent in a probe; 32 and 64 were, 64 the faster
# 4: int8 arithmetic, each row's activations quantised per block on the fly (per row, so batch-independent).
INT8_ACCURACY_LEVEL = 4


@dataclass(frozen=True)
class GraphPaths:
    vision: Path  # vision_encoder/1/model.onnx
    text_dir: Path  # captioner/1/text_decoder/

    @classmethod
    def in_repository(cls, repository: Path) -> GraphPaths:
        return cls(repository / "vision_encoder" / "1" / "model.onnx", repository / "captioner" / "1" / "text_decoder")

    @property
    def text_graphs(self) -> list[Path]:
        return [self.text_dir / CROSS_KV_FILE, self.text_dir / DECODER_STEP_FILE]

    @property
    def tokenizer(self) -> Path:
        return self.text_dir / TOKENIZER_FILE

    def complete(self, int8: bool = False, fast: bool = False) -> bool:
        """Written last, the fidelity files mean a finished build (with int8 twins, when ``int8``) of the graphs'
        current layout: without the tokenizer file, one from before the graphs took their caches one tensor per
        layer; without the cache layout in decoder.json, one from before the cache had fixed slots."""
        fidelity = [read_fidelity(self.vision.parent), read_fidelity(self.text_dir)]
        return (
            all(fidelity)
            and self.tokenizer.is_file()
            and (self.text_dir / DECODER_SHAPE_FILE).is_file()
            and json.loads((self.text_dir / DECODER_SHAPE_FILE).read_text()).get("cache_layout") == CACHE_LAYOUT
            and (not int8 or all("int8" in document["options"] for document in fidelity if document))
            and (not fast or all(FAST_PRECISION in document["options"] for document in fidelity if document))
        )


def build(snapshot: Path, paths: GraphPaths, int8: bool = False, fast: bool = False) -> Iterator[str]:
    """Export, measure, and quantise when ``int8``; the fast mode's fp16 twins and their guard when ``fast``; yields
    one line per stage for the build's output."""
    from transformers import AutoTokenizer, BlipForConditionalGeneration

    for stale in (paths.vision.parent / FIDELITY_FILE, paths.text_dir / FIDELITY_FILE):
        stale.unlink(missing_ok=True)
    blip = BlipForConditionalGeneration.from_pretrained(str(snapshot)).eval()
    shape = blip_onnx.export_graphs(blip, paths.text_dir, paths.vision)
    (paths.text_dir / DECODER_SHAPE_FILE).write_text(json.dumps(dataclasses.asdict(shape), indent=2) + "\n")
    yield f"exported {paths.vision}, {', '.join(path.name for path in paths.text_graphs)} in {paths.text_dir}"

    for graph in (paths.vision, *paths.text_graphs):
        for twin in ("int8", FAST_PRECISION):  # a twin left from an earlier build is stale
            precision_file(graph, twin).unlink(missing_ok=True)
        if int8:
            quantize_weights_int8(graph, precision_file(graph, "int8"))
    if int8:
        yield "wrote the int8-weight twins (*.int8.onnx)"

    tokenizer = AutoTokenizer.from_pretrained(str(snapshot))
    pixels = blip_fidelity.check_pixels()
    prompt_ids = [
        blip_prompt_ids(tokenizer(prompt).input_ids, shape.bos_token_id)
        for prompt in blip_fidelity.check_prompts(len(pixels))
    ]
    reference = blip_fidelity.hf_reference(blip, prompt_ids, pixels, CHECK_MAX_NEW_TOKENS)
    del blip

    tokenizer.backend_tokenizer.save(str(paths.tokenizer))
    template = CaptionWithLabelSettings().prompt_template
    blip_fidelity.require_same_tokenizer(
        tokenizers.Tokenizer.from_file(str(paths.tokenizer)),
        tokenizer,
        [*blip_fidelity.CHECK_PROMPTS, *(build_prompt(template, label) for label in FOOD11_CLASSES)],
        reference.tokens,
        f"captioner built from {snapshot}",
    )
    yield f"wrote {paths.tokenizer}: encodes every label's prompt and decodes the check captions as transformers"

    def figures(vision: str, text: str) -> dict:
        return blip_fidelity.measure(
            reference,
            OnnxModel(precision_file(paths.vision, vision)),
            TextDecoder(paths.text_dir, text),
            pixels,
            CHECK_MAX_NEW_TOKENS,
        )

    exact = figures("fp32", "fp32")
    blip_fidelity.require_exact(exact, f"captioner built from {snapshot}")
    yield f"fp32 graphs reproduce Hugging Face fp32 generate: {_describe(exact)}"
    vision_options: dict = {"fp32": exact}
    text_options: dict = {"fp32": exact}
    extra: dict = {}
    if int8:
        vision_int8, text_int8, both_int8 = figures("int8", "fp32"), figures("fp32", "int8"), figures("int8", "int8")
        vision_options["int8"] = {**vision_int8, "means": "vision encoder int8, text decoder fp32"}
        text_options["int8"] = {**text_int8, "means": "text decoder int8, vision encoder fp32"}
        extra["both_int8"] = both_int8
        named = {"vision encoder int8": vision_int8, "text decoder int8": text_int8, "both int8": both_int8}
        yield from (f"{what}: {_describe(measured)}" for what, measured in named.items())
    if fast:
        fp16 = build_fast(paths.vision, paths.text_dir, reference, pixels, CHECK_MAX_NEW_TOKENS)
        text_options[FAST_PRECISION] = vision_options[FAST_PRECISION] = fp16
        yield (
            f"fast mode (fp16, guarded): teacher-forced top-1 {fp16['teacher_forced_top1']:.1%} unguarded; guard "
            f"margin {fp16['guard_margin']:.3g}; {fp16['captions_identical']}/{fp16['captions']} captions identical, "
            f"{fp16['guard_redone_steps']} of {fp16['guard_steps']} steps redone exactly; merged (vision fp16 too): "
            f"{fp16['merged']['captions_identical']}/{fp16['merged']['captions']}"
        )
    _write_fidelity(paths.vision.parent, vision_options, extra)
    _write_fidelity(paths.text_dir, text_options, extra)


def quantize_weights_int8(source: Path, target: Path) -> None:
    """Every MatMul with a constant weight as ONNX Runtime's ``MatMulNBits``, 8-bit weights in blocks along the
    reduction axis. Unlike ``quantize_dynamic``, whose activation scale spans the whole batch (a row's result would
    depend on its batch mates), nothing here looks at more than one row at a time."""
    # imported here: ONNX Runtime's quantizer needs onnx_ir, which a build without int8 twins does not
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)  # a line per node
    config = DefaultWeightOnlyQuantConfig(
        block_size=INT8_BLOCK_SIZE,
        is_symmetric=True,
        accuracy_level=INT8_ACCURACY_LEVEL,
        bits=8,
        op_types_to_quantize=("MatMul",),
    )
    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)


def _describe(figures: dict) -> str:
    return (
        f"{figures['captions_identical']}/{figures['captions']} captions identical, teacher-forced top-1 "
        f"{figures['teacher_forced_top1']:.1%} of {figures['teacher_forced_tokens']} tokens, max relative logit "
        f"error {figures['max_relative_logit_error']:.1e}"
    )


def _write_fidelity(directory: Path, options: dict, extra: dict) -> None:
    """The figures beside the graphs: fp32's, and each twin's that was built."""
    document = {
        "reference": "Hugging Face BLIP fp32 generate (greedy), one photo at a time",
        "check_inputs": f"{options['fp32']['captions']} photos from tests/photos (originals, mirrored, cropped) with "
        f"prompts {list(blip_fidelity.CHECK_PROMPTS)}, {CHECK_MAX_NEW_TOKENS} new tokens",
        "options": options,
        **extra,
    }
    (directory / FIDELITY_FILE).write_text(json.dumps(document, indent=2) + "\n")
