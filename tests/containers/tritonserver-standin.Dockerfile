# Stand-in for nvcr.io/nvidia/tritonserver:25.08-py3, which cannot be pulled here (no nvcr.io): Debian
# bookworm with the tritonserver and Python backend that PyPI's nvidia-pytriton wheel carries, laid out
# where NVIDIA's image has them, so that Dockerfile.triton runs unchanged on it (--build-arg
# TRITON_IMAGE=<this image> PYTHON_VERSION=3.11 STEPS_EXTRA=steps). Built by standin-bases.sh.
#
#   /opt/tritonserver/bin/tritonserver              on PATH, as in NVIDIA's image (server 2.51 here)
#   /opt/tritonserver/backends/python/              libtriton_python.so, triton_python_backend_utils.py and
#                                                   the stub built for this Python (3.11; 3.12 there)
#   /opt/tritonserver/caches/local/                 the response cache
#   /opt/tritonserver/lib/                          the server's shared libraries (the wheel's
#                                                   nvidia_pytriton.libs), found through ld.so.conf.d
#   python3, pip (PEP 668: --break-system-packages), numpy installed by pip, curl
#   user triton-server (uid, gid 1000)              owning /opt/tritonserver, as in NVIDIA's image (its build.py
#                                                   at v2.60.0, Triton 25.08: `useradd triton-server`, ids asserted
#                                                   1000:1000, the server copied --chown=1000:1000); the image's
#                                                   default user stays root, as there
#
# Not here (docs/deployment.md says what that leaves unverified): CUDA and a GPU, Ubuntu 24.04 and its
# Python 3.12, the native onnxruntime and TensorRT backends, NVIDIA's entrypoint.
ARG DEBIAN_IMAGE=local/debian:bookworm
FROM ${DEBIAN_IMAGE}
# The wheel the server, its libraries and the stubs come from: the nvidia-pytriton pin of pyproject.toml's
# `server` extra, the server `make test` runs (standin-bases.sh passes it).
ARG PYTRITON_REQUIREMENT
# NVIDIA's image brings a numpy of its own; a different one here, so that the project's install replaces it as it must there.
ARG BASE_NUMPY=numpy==2.3.2
# Certificate authorities this machine adds to Debian's (/usr/local/share/ca-certificates/, copied by
# standin-bases.sh; none on most machines): a TLS-inspecting proxy in front of PyPI is then trusted
# by pip in this image and in the images built on it.
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-pip libpython3.11 curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN set -eux; \
    work=$(mktemp -d); \
    test -n "$PYTRITON_REQUIREMENT"; \
    pip download --no-cache-dir --no-deps --only-binary=:all: "$PYTRITON_REQUIREMENT" -d "$work"; \
    python3 -m zipfile -e "$work"/nvidia_pytriton-*.whl "$work/wheel"; \
    server="$work/wheel/pytriton/tritonserver"; \
    mkdir -p /opt/tritonserver/bin /opt/tritonserver/lib /opt/tritonserver/backends/python /opt/tritonserver/caches; \
    cp "$server/bin/tritonserver" /opt/tritonserver/bin/; \
    cp "$server"/backends/python/* /opt/tritonserver/backends/python/; \
    py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); \
    cp "$server/python_backend_stubs/$py/triton_python_backend_stub" /opt/tritonserver/backends/python/; \
    cp -r "$server/caches/local" /opt/tritonserver/caches/; \
    cp "$work"/wheel/nvidia_pytriton.libs/* /opt/tritonserver/lib/; \
    chmod 755 /opt/tritonserver/bin/tritonserver /opt/tritonserver/backends/python/triton_python_backend_stub; \
    echo /opt/tritonserver/lib > /etc/ld.so.conf.d/tritonserver.conf; \
    ldconfig; \
    rm -rf "$work"
RUN pip install --no-cache-dir --break-system-packages "$BASE_NUMPY"
# NVIDIA's unprivileged user, with the same name and ids (Dockerfile.triton runs the server as it). No home
# directory, as `useradd` without -m makes it there.
ENV TRITON_SERVER_USER=triton-server
RUN groupadd --gid 1000 triton-server \
    && useradd --uid 1000 --gid 1000 --no-create-home triton-server \
    && chown -R 1000:1000 /opt/tritonserver
ENV PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Fails the build if a shared library of the server, the Python backend or its stub is missing.
RUN ldd /opt/tritonserver/bin/tritonserver /opt/tritonserver/backends/python/libtriton_python.so \
        /opt/tritonserver/backends/python/triton_python_backend_stub | (! grep 'not found')
WORKDIR /opt/tritonserver
