# Stand-in for python:3.11-slim, which cannot be pulled here (no Docker Hub): Debian bookworm's Python 3.11
# in a virtualenv at /usr/local/python whose bin/ is first on PATH, so that `python`, `python3`, `pip` and
# `pip3` are the commands python:3.11-slim has (there, in /usr/local/bin). Built by standin-bases.sh from
# the local Debian base it imports; Dockerfile.api takes it with --build-arg PYTHON_IMAGE=<this image>.
# What differs from the real image: Debian's Python 3.11 patch release and pip (23.0.1) instead of the
# python.org build and a newer pip; no other difference matters to Dockerfile.api (docs/deployment.md).
ARG DEBIAN_IMAGE=local/debian:bookworm
FROM ${DEBIAN_IMAGE}
# Certificate authorities this machine adds to Debian's (/usr/local/share/ca-certificates/, copied by
# standin-bases.sh; none on most machines): a TLS-inspecting proxy in front of PyPI is then trusted
# by pip in this image and in the images built on it.
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
RUN python -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version" && pip --version
CMD ["python3"]
