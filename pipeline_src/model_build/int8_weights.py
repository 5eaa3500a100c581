"""Int8 weights for an ONNX graph, with no activation scales shared across a batch.

Every MatMul with a constant weight becomes ONNX Runtime's ``MatMulNBits`` with 8-bit weights in blocks
along the reduction axis. Unlike ``quantize_dynamic``, whose activation scale spans the whole batch (a
row's result would depend on its batch mates), nothing here looks at more than one row at a time.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

BLOCK_SIZE = 64  # 128 and up were not batch-independent in a probe; 32 and 64 were, 64 the faster
# 4: int8 arithmetic, each row's activations quantised per block on the fly (per row, so batch-independent).
ACCURACY_LEVEL = 4


def quantize_weights_int8(source: Path, target: Path) -> None:
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)  # a line per node
    config = DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE,
        is_symmetric=True,
        accuracy_level=ACCURACY_LEVEL,
        bits=8,
        op_types_to_quantize=("MatMul",),
    )
    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
