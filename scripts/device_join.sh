#!/usr/bin/env bash
# On the device tool's GPU machine: join the parts scripts/device_stage.py made, check every sha256, install
# them (once per set of parts), then run COMMAND with that environment first on PATH (docs/gpu.md).
#
#   bash scripts/device_join.sh PARTS_DIR [COMMAND ...]
#
# Triton's Python backend stub ignores PYTHONPATH: it imports from the environment of the python3 first on
# PATH. So the wheels go into a virtualenv, $DEVICE_VENV, whose .pth files add this checkout and then, after
# its own packages, the image's (torch, transformers, Pillow, tokenizers, CUDA's nvidia-* libraries, linked
# where onnxruntime looks for them). The model build runs with the image's own Python ($IMAGE_PYTHON) and
# /tmp/buildsite. The Hugging Face reference runs on the image's Python too (REFERENCE_PYTHON): its numpy, scipy
# and transformers agree, which they do not beside the virtualenv's numpy 1.x. DEVICE_STEP=join stops after the
# join and its check. Stops (exit 1) when the Python backend stub cannot load a library it links.
set -euo pipefail
PARTS=$(cd "$1" && pwd)
shift
FILES=${DEVICE_FILES:-/tmp/device_files}
VENV=${DEVICE_VENV:-/tmp/venv}
BUILDSITE=${DEVICE_BUILDSITE:-/tmp/buildsite}
IMAGE_PYTHON=${IMAGE_PYTHON:-$(command -v python3)}
export IMAGE_PYTHON REFERENCE_PYTHON=${REFERENCE_PYTHON:-$IMAGE_PYTHON}

if ! cmp -s "$PARTS/SHA256SUMS" "$FILES/SHA256SUMS"; then
  rm -rf "$FILES"
  while read -r _ name; do
    mkdir -p "$(dirname "$FILES/$name")"
    if [ -f "$PARTS/$name" ]; then cp "$PARTS/$name" "$FILES/$name"; else cat "$PARTS/$name".part[0-9][0-9] >"$FILES/$name"; fi
  done <"$PARTS/SHA256SUMS"
  (cd "$FILES" && sha256sum --quiet --strict -c "$PARTS/SHA256SUMS")
  cp "$PARTS/SHA256SUMS" "$FILES/SHA256SUMS"
  echo "device_join: $(wc -l <"$FILES/SHA256SUMS") files joined, every sha256 checked"
fi
[ "${DEVICE_STEP:-}" = join ] && exit 0

site() { "$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'; }
if ! cmp -s "$FILES/SHA256SUMS" "$VENV/SHA256SUMS"; then
  rm -rf "$VENV" "$BUILDSITE"
  "$IMAGE_PYTHON" -m venv --without-pip "$VENV"
  SITE=$(site "$VENV/bin/python")
  install() { "$IMAGE_PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --target "$@"; }
  install "$SITE" "$FILES"/venv/*.whl
  install "$BUILDSITE" "$FILES"/build/*.whl
  TOOL="$VENV/opt/perf_analyzer" # perf_analyzer.TOOL_DIR for the venv's Python: its installers find it done
  install "$TOOL" "$FILES"/tool/*.whl
  dpkg-deb -x "$FILES"/tool/libb64-0d_*.deb "$TOOL/libb64"
  "$IMAGE_PYTHON" -c 'import site; [print(f"import site; site.addsitedir({p!r})") for p in site.getsitepackages()]' >"$SITE/zz_image.pth"
  for dir in $("$IMAGE_PYTHON" -c 'import site; print(*site.getsitepackages())'); do
    if [ -d "$dir/nvidia" ]; then ln -sfn "$dir/nvidia" "$SITE/nvidia" && break; fi
  done
  cp "$FILES/SHA256SUMS" "$VENV/SHA256SUMS"
fi
SITE=$(site "$VENV/bin/python")
printf '%s\n%s\n' "$PWD" "$PWD/client" >"$SITE/food11.pth" # this checkout, wherever this call's copy is
"$VENV/bin/python" -c 'import numpy, onnxruntime as o, tritonclient.grpc; print("device_join: numpy", numpy.__version__, "onnxruntime", o.__version__, o.get_available_providers())'
# the launcher puts this LIBDIR on the stub's library path: its libpython must be there
read -r version libdir < <("$VENV/bin/python" -c 'import sys, sysconfig; print(sys.version[:4], sysconfig.get_config_var("LIBDIR"))')
stub="$SITE/pytriton/tritonserver/python_backend_stubs/$version/triton_python_backend_stub"
if missing=$(LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$stub" | grep "not found"); then
  echo "device_join: STOP: the Python backend stub cannot load:"$'\n'"$missing" >&2
  exit 1
fi
[ $# -eq 0 ] && exit 0
PATH="$VENV/bin:$PATH" exec "$@"
