"""Where tritonserver comes from, and the environment its Python backend stub needs.

No Docker needed: the ``nvidia-pytriton`` wheel carries the server, the Python backend and one backend stub
per Python version. The stub must sit in the backend directory, so a private one is assembled under the
server's work directory (site-packages is never written to).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from pipeline_src.serving.processes import TritonStartError


def _pytriton_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonStartError("nvidia-pytriton is not installed: pip install nvidia-pytriton==0.7.0")
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_backend_dir(work_dir: Path) -> Path:
    """backends/python with the wheel's backend library and the stub for this Python."""
    server_dir = _pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonStartError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    python_backend = work_dir / "backends" / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for source in (server_dir / "backends" / "python").iterdir():
        if source.is_file():
            _install(source, python_backend / source.name)
    _install(stub, python_backend / stub.name)
    return python_backend.parent


def _install(source: Path, target: Path) -> None:
    """Copy beside, then rename over: a restarted server's stub may still be running from ``target`` (a busy
    file cannot be opened for writing, but its name can be replaced)."""
    partial = target.with_name(f".{target.name}.partial")
    shutil.copy2(source, partial)
    partial.replace(target)


def bundled_command(work_dir: Path) -> list[str]:
    """The wheel's tritonserver, its backend directory (assembled under ``work_dir``) and its response caches
    (only the local one: ``--cache-config local,size=N`` then finds it)."""
    server_dir = _pytriton_dir() / "tritonserver"
    return [
        str(server_dir / "bin" / "tritonserver"),
        f"--backend-directory={_bundled_backend_dir(work_dir)}",
        f"--cache-directory={server_dir / 'caches'}",
    ]


def bundled_library_path() -> str:
    """LD_LIBRARY_PATH for the wheel's server and stub.

    This Python's libpython first: the stub must embed the same patch release as the standard library it
    will import, or extension modules miss symbols.
    """
    libs = [sysconfig.get_config_var("LIBDIR"), str(_pytriton_dir().parent / "nvidia_pytriton.libs")]
    return os.pathsep.join(filter(None, [*libs, os.environ.get("LD_LIBRARY_PATH")]))


def path_with_python(python: Path) -> str:
    """PATH with ``python``'s bin directory first.

    The stub's embedded interpreter ignores PYTHONPATH (it starts isolated) but finds its prefix from
    ``python3`` on PATH; from a virtualenv's bin it reads ``pyvenv.cfg`` and so imports that
    environment's packages, this project included.
    """
    return os.pathsep.join(filter(None, [str(python.parent), os.environ.get("PATH")]))
