"""ONNX Runtime sessions for the steps: CUDA on a GPU instance, CPU otherwise."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline_src.steps.batching import NUMPY_TYPES
from pipeline_src.steps.onnx_contract import ORT_TO_TRITON
from pipeline_src.steps.precision import PrecisionChoice, precision_file
from pipeline_src.steps.settings import OnnxStepSettings, PrecisionSettings

log = logging.getLogger(__name__)
Arrays = Mapping[str, np.ndarray]


@functools.cache
def load_cuda_libraries() -> None:
    """The CUDA and cuDNN libraries of the steps-cuda extra live in the nvidia-* wheels, where the dynamic
    loader does not look: ONNX Runtime loads them from there first, then from the system's paths (NVIDIA's
    image, a CUDA toolkit). Once per process, before the first CUDA session."""
    ort.preload_dlls(directory="")


def execution_providers(on_gpu: bool, device_id: int = 0, cuda_graph: bool = False) -> list:
    """CUDA first on a GPU instance (falling back to the CPU if this ONNX Runtime build lacks it); with
    ``cuda_graph``, runs given a ``gpu_graph_id`` are recorded once and replayed."""
    if not on_gpu:
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        log.warning(
            "GPU instance, but this onnxruntime has no CUDA provider: running on the CPU (install onnxruntime-gpu)"
        )
        return ["CPUExecutionProvider"]
    load_cuda_libraries()
    # Both measured in docs/gpu.md, "Settings that matter on a GPU". TF32 off: fp32 stays fp32 (the exact captions).
    # cuDNN's algorithm by heuristic: the default exhaustive search reruns for every new shape (each batch size).
    cuda: dict[str, object] = {"device_id": device_id, "use_tf32": 0, "cudnn_conv_algo_search": "HEURISTIC"}
    if cuda_graph:
        cuda["enable_cuda_graph"] = 1
    return [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]


def onnx_session(
    path: str | Path,
    on_gpu: bool = False,
    device_id: int = 0,
    intra_op_threads: int = 0,
    cpu_arena: bool = True,
    cuda_graph: bool = False,
) -> ort.InferenceSession:
    """``cpu_arena``: keep ONNX Runtime's CPU memory arena, which never shrinks: it pays for a graph run
    many times per request (the decoder step: without it, an allocation per op per token) and costs a graph
    run once per request its largest batch's activations for good, for no measurable speed (the figures:
    docs/performance.md, "Why the code is as it is")."""
    if not Path(path).is_file():
        built_by = "`make models BUILD_ARGS=--int8`" if ".int8." in Path(path).name else "`make models`"
        raise FileNotFoundError(f"{path} is missing: it is built by {built_by} (scripts/build_models.py)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads  # 0: ONNX Runtime's default, one per physical core
    # Idle threads sleep instead of spinning: on a CPU server the cores they would burn between batches
    # are the other steps'.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = cpu_arena
    return ort.InferenceSession(str(path), options, providers=execution_providers(on_gpu, device_id, cuda_graph))


class OnnxFileModel:
    """One ONNX file, every input fed and the ``outputs`` asked for (default: all the graph's), run once for a whole
    stacked batch of requests (so without a CPU arena: its activations are not worth keeping for good). With
    ``batch_sizes`` (a GPU instance's ``gpu_batch_sizes``), a batch runs zero-padded up to the smallest of them that
    holds it, on that size's own session, and a batch larger than all of them in chunks of the largest: each session
    sees one shape. The rows are independent (inference: no batch statistics), so padding changes no row's answer."""

    def __init__(
        self,
        path: str | Path,
        on_gpu: bool = False,
        device_id: int = 0,
        intra_op_threads: int = 0,
        outputs: Sequence[str] = (),
        batch_sizes: Sequence[int] = (),
    ):
        self.batch_sizes = tuple(batch_sizes)
        self.sessions = {
            size: onnx_session(path, on_gpu, device_id, intra_op_threads, cpu_arena=False)
            for size in self.batch_sizes or (None,)
        }
        self.session = next(iter(self.sessions.values()))
        self.inputs = [arg.name for arg in self.session.get_inputs()]
        self.outputs = list(outputs) or [arg.name for arg in self.session.get_outputs()]

    def __call__(self, batch: Arrays) -> dict[str, np.ndarray]:
        if not self.batch_sizes:
            return self._run(self.session, batch)
        rows, largest = len(next(iter(batch.values()))), self.batch_sizes[-1]
        if rows > largest:
            parts = [
                self({name: array[start : start + largest] for name, array in batch.items()})
                for start in range(0, rows, largest)
            ]
            return {name: np.concatenate([part[name] for part in parts]) for name in self.outputs}
        size = next(size for size in self.batch_sizes if size >= rows)
        pad = [(0, size - rows)]  # zero rows after: the rows are independent (inference only)
        padded = {name: np.pad(array, pad + [(0, 0)] * (array.ndim - 1)) for name, array in batch.items()}
        return {name: array[:rows] for name, array in self._run(self.sessions[size], padded).items()}

    def _run(self, session: ort.InferenceSession, batch: Arrays) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, session.run(self.outputs, {name: batch[name] for name in self.inputs})))

    def warm_up(self) -> None:
        """Each padded size's session runs once on zeros of its inputs' own types (its one-time setup for its shape, at
        load rather than at the first request), where every input's row shape is fixed."""
        rows = {arg.name: (arg.shape[1:], numpy_type(arg.type)) for arg in self.session.get_inputs()}
        if all(dtype is not None and all(isinstance(dim, int) for dim in shape) for shape, dtype in rows.values()):
            for size in self.batch_sizes:
                zeros = {name: np.zeros((size, *shape), dtype) for name, (shape, dtype) in rows.items()}
                self._run(self.sessions[size], zeros)


class OnnxModel:
    """A one-input, one-output ``OnnxFileModel`` (the classifier, the vision encoder), called with the input's array,
    its padded sessions warmed at load; ``choice``: which precision and why, where the step has a choice."""

    def __init__(
        self,
        onnx_path: str | Path,
        on_gpu: bool = False,
        device_id: int = 0,
        intra_op_threads: int = 0,
        choice: PrecisionChoice | None = None,
        batch_sizes: Sequence[int] = (),
    ):
        self.model = OnnxFileModel(onnx_path, on_gpu, device_id, intra_op_threads, batch_sizes=batch_sizes)
        self.session = self.model.session
        (self.input,) = self.session.get_inputs()
        self.output = self.session.get_outputs()[0]
        self.model.outputs = [self.output.name]
        self.choice = choice
        self.model.warm_up()

    @classmethod
    def from_settings(
        cls, settings: OnnxStepSettings, version_dir: Path, on_gpu: bool = False, device_id: int = 0
    ) -> OnnxModel:
        """The step's model as its settings describe it, for its model.py and the in-process baseline alike."""
        path = version_dir / settings.onnx_file
        choice = settings.choose_precision(path.parent, on_gpu) if isinstance(settings, PrecisionSettings) else None
        path = precision_file(path, choice.precision if choice else "fp32")
        batch_sizes = settings.padded_batch_sizes if on_gpu else ()
        return cls(path, on_gpu, device_id, settings.intra_op_threads, choice, batch_sizes)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return self.model({self.input.name: batch})[self.output.name]


def numpy_type(ort_type: str) -> np.dtype | None:
    """The numpy type of an ONNX Runtime type string (``tensor(float)``), None for one numpy does not hold."""
    name = NUMPY_TYPES.get(ORT_TO_TRITON.get(ort_type, ""))
    return np.dtype(name) if name else None
