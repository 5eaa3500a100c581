"""The captioner's graphs on a GPU: ``python -m benchmarks.gpu_check`` on a machine with onnxruntime-gpu.

Builds the base BLIP stand-in with the project's own code, exports its graphs, and measures them against
Hugging Face fp32 ``generate`` on the CPU (the reference), on the build's check inputs: ONNX Runtime on
the CPU, on CUDA as served (fp32, TF32 off), on CUDA with ONNX Runtime's default TF32, and fp16 graphs
(an experiment: fp32 at the graphs' edges, fp16 inside). Also Hugging Face fp32 on the GPU, one photo at a
time, for speed. In-process, no Triton. Writes gpu_check.json and gpu_check.md to $OUT (the device tool's
folder) or benchmarks/results/; FOOD11_COMMIT names the commit where the checkout has no .git (``abc1234+dirty``:
a tree with uncommitted changes, which needs --allow-dirty).
"""

import argparse
import json
import os
import time
import traceback
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn
from transformers import AutoTokenizer, BlipForConditionalGeneration

from benchmarks.lib.report import markdown_table
from benchmarks.lib.results import RESULTS_DIR, parse_benchmark_args, write_results
from pipeline_src.model_build import blip_fidelity, blip_onnx
from pipeline_src.model_build.blip_snapshot import save_standin
from pipeline_src.steps import onnx_runtime
from pipeline_src.steps.captioning import GreedyCaptioner
from pipeline_src.steps.imaging import normalise_captioner
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.text_decoder import CROSS_KV_FILE, DECODER_SHAPE_FILE, DECODER_STEP_FILE, TextDecoder

OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS_DIR
WORK = Path("/tmp/gpucheck")
results: dict = {
    "providers": ort.get_available_providers(),
    "ort": ort.__version__,
    "torch": torch.__version__,
    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
}


ROWS = ("ort_cpu_fp32", "ort_cuda_fp32_tf32_off", "ort_cuda_fp32_tf32_default", "ort_cuda_fp16")


def save():
    """Everything measured so far (each stage saves: a later one may crash the process)."""
    rows = [
        {"run": name, **{k: v for k, v in results[name].items() if k != "providers"}}
        for name in ROWS
        if name in results and "error" not in results[name]
    ]
    write_results(
        "gpu_check",
        results,
        markdown_table(
            "Captioner graphs on a GPU",
            [
                f"GPU: {results['gpu']}; onnxruntime-gpu {results['ort']}, torch {results['torch']}. Base BLIP "
                "stand-in, "
                "the build's 8 check inputs, 20 new tokens, against Hugging Face fp32 generate on the CPU. "
                "Hugging Face "
                "fp32 on the GPU, one photo at a time: "
                f"{results.get('hf_gpu_fp32_img_per_s_batch_1', float('nan')):.2f} "
                "img/s."
            ],
            [
                "run",
                "captions_identical",
                "captions",
                "teacher_forced_top1",
                "max_relative_logit_error",
                "img_per_s_batch_1",
                "img_per_s_batch_8",
                "fp16_vision_row_equal_alone",
            ],
            rows,
        ),
        directory=OUT,
    )


def speed(vision, decoder, tokenizer, pixels, prompts, batch, repeats=3):
    captioner = GreedyCaptioner(decoder, tokenizer.backend_tokenizer, max_new_tokens=20)
    x, p = pixels[:batch], prompts[:batch]
    captioner.caption(vision(x), p)
    started = time.perf_counter()
    for _ in range(repeats):
        captioner.caption(vision(x), p)
    return batch * repeats / (time.perf_counter() - started)


class HalfInside(nn.Module):
    """fp16 inside, fp32 at the graph's edges (the steps' interface stays as it is)."""

    def __init__(self, module):
        super().__init__()
        self.module = module.half()

    def forward(self, *args):
        # The attention bias's masked slots hold finfo(float32).min: finfo(float16).min in fp16, not -inf.
        args = [a.clamp(min=torch.finfo(torch.float16).min).half() if a.is_floating_point() else a for a in args]
        outputs = self.module(*args)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        outputs = tuple(o.float() for o in outputs)
        return outputs if len(outputs) > 1 else outputs[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parse_benchmark_args(parser, argv)
    torch.set_num_threads(os.cpu_count() or 4)
    snapshot = save_standin(WORK / "blip", "base")
    blip = BlipForConditionalGeneration.from_pretrained(str(snapshot)).eval()
    shape = blip_onnx.export_graphs(blip, WORK / "text", WORK / "vision.onnx")
    (WORK / "text" / DECODER_SHAPE_FILE).write_text(json.dumps(shape.as_dict()))
    tokenizer = AutoTokenizer.from_pretrained(str(snapshot))
    pixels = blip_fidelity.check_pixels()
    prompts = blip_fidelity.check_prompts(len(pixels))
    ids = [[shape.bos_token_id, *tokenizer(p).input_ids[1:-1]] for p in prompts]
    started = time.perf_counter()
    reference = blip_fidelity.hf_reference(blip, ids, pixels, 20)
    results["hf_cpu_fp32_seconds_for_8"] = time.perf_counter() - started
    save()

    # Hugging Face fp32 on the GPU (the course's way on a GPU), TF32 off: speed only.
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        gpu = blip.cuda()
        with torch.inference_mode():
            for _ in range(2):
                started = time.perf_counter()
                for row, row_ids in enumerate(ids):
                    gpu.generate(
                        pixel_values=torch.from_numpy(normalise_captioner(pixels[row : row + 1])).cuda(),
                        input_ids=torch.tensor([[*row_ids, shape.sep_token_id]]).cuda(),
                        max_new_tokens=20,
                        do_sample=False,
                    )
                torch.cuda.synchronize()
            results["hf_gpu_fp32_img_per_s_batch_1"] = len(ids) / (time.perf_counter() - started)
        blip = gpu.cpu()
    except Exception:
        results["hf_gpu_error"] = traceback.format_exc()[-2000:]
    save()

    original = onnx_runtime.execution_providers
    for label, on_gpu, tf32 in (
        ("ort_cpu_fp32", False, None),
        ("ort_cuda_fp32_tf32_off", True, None),
        ("ort_cuda_fp32_tf32_default", True, 1),
    ):
        try:
            if tf32 is not None:

                def providers(on_gpu: bool, device_id: int = 0, tf32: int = tf32) -> list:
                    return [
                        ("CUDAExecutionProvider", {"device_id": device_id, "use_tf32": tf32}),
                        "CPUExecutionProvider",
                    ]

                onnx_runtime.execution_providers = providers
            vision = OnnxModel(WORK / "vision.onnx", on_gpu=on_gpu)
            decoder = TextDecoder(WORK / "text", on_gpu=on_gpu)
            figures = blip_fidelity.measure(reference, vision, decoder, pixels, 20)
            figures["providers"] = vision.providers
            for batch in (1, 8):
                figures[f"img_per_s_batch_{batch}"] = speed(vision, decoder, tokenizer, pixels, prompts, batch)
            results[label] = figures
        except Exception:
            results[label] = {"error": traceback.format_exc()[-3000:]}
        finally:
            onnx_runtime.execution_providers = original
        save()

    # fp16 graphs (fp32 at the edges), exported from the half model on the GPU.
    try:
        half_dir = WORK / "fp16"
        half_dir.mkdir(exist_ok=True)
        blip16 = BlipForConditionalGeneration.from_pretrained(str(snapshot)).eval().cuda()
        with torch.inference_mode():
            blip_onnx.export_vision_encoder(
                HalfInside(blip_onnx.VisionEncoder(blip16)), half_dir / "vision.onnx", device="cuda"
            )
            blip_onnx.export_cross_kv(
                HalfInside(blip_onnx.CrossKeysValues(blip16)), shape, half_dir / CROSS_KV_FILE, device="cuda"
            )
            blip_onnx.export_decoder_step(
                HalfInside(blip_onnx.DecoderStep(blip16)), shape, half_dir / DECODER_STEP_FILE, device="cuda"
            )
        (half_dir / DECODER_SHAPE_FILE).write_text(json.dumps(shape.as_dict()))
        vision = OnnxModel(half_dir / "vision.onnx", on_gpu=True)
        decoder = TextDecoder(half_dir, on_gpu=True)
        figures = blip_fidelity.measure(reference, vision, decoder, pixels, 20)
        figures["providers"] = vision.providers
        for batch in (1, 8):
            figures[f"img_per_s_batch_{batch}"] = speed(vision, decoder, tokenizer, pixels, prompts, batch)
        # batch independence of fp16 on CUDA
        embeds = vision(pixels[:3])
        figures["fp16_vision_row_equal_alone"] = bool(np.array_equal(embeds[1], vision(pixels[1:2])[0]))
        results["ort_cuda_fp16"] = figures
    except Exception:
        results["ort_cuda_fp16"] = {"error": traceback.format_exc()[-3000:]}
    save()


if __name__ == "__main__":
    main()
    print(json.dumps(results, indent=2))
