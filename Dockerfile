# routegate's image: the package in a venv on a plain Python base, run as UID 10001,
# serving the demo config (config/routegate.yaml) on 0.0.0.0:8080 with the embedded
# Redis under /data. It needs no network at start: tiktoken's files are inside.
#
#   podman build --format docker -t routegate \
#     --build-context tiktoken=../shared/tiktoken \
#     --secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt .
#   podman run --rm -p 127.0.0.1:8080:8080 routegate
#
# --build-context tiktoken=DIR: tiktoken's BPE files from DIR; without it the build
#   downloads them (the stage named tiktoken below is replaced by DIR).
# --secret id=pip_ca: a CA bundle for pip and that download behind a TLS-inspecting
#   proxy; mounted for one RUN at a time, never in a layer.
# --build-arg BASE: any Debian-like image with python3 (>= 3.11) and its venv module;
#   .ci/container uses a debootstrap'ed bookworm.
# --format docker: OCI images have no HEALTHCHECK; podman drops it without this.
# docs/deploy.md has the rest.
ARG BASE=python:3.12-slim

# The dependencies alone, read from pyproject: reused until pyproject or BASE changes.
# (.ci/container tags this stage and prunes the other stages' leftovers by the label.)
FROM ${BASE} AS deps
LABEL routegate.build-stage=1
ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_COMPILE=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/routegate/venv
WORKDIR /src
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip_ca --mount=type=cache,target=/root/.cache/pip \
    if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/deps.txt \
    && /opt/routegate/venv/bin/pip install -q -r /tmp/deps.txt

FROM deps AS install
COPY . .
# No dev extras. pip and setuptools are not needed to serve; neither are the
# dependencies' test suites.
RUN --mount=type=secret,id=pip_ca --mount=type=cache,target=/root/.cache/pip \
    if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && /opt/routegate/venv/bin/pip install -q --no-deps . \
    && /opt/routegate/venv/bin/pip uninstall -q -y pip setuptools \
    && find /opt/routegate/venv -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +

# Used only without --build-context tiktoken: downloads the encodings routegate uses.
FROM deps AS tiktoken-download
RUN --mount=type=secret,id=pip_ca \
    if [ -f /run/secrets/pip_ca ]; then export REQUESTS_CA_BUNDLE=/run/secrets/pip_ca; fi \
    && mkdir /out && TIKTOKEN_CACHE_DIR=/out /opt/routegate/venv/bin/python -c \
       'import tiktoken; [tiktoken.get_encoding(e) for e in ("o200k_base", "cl100k_base")]'

FROM scratch AS tiktoken
COPY --from=tiktoken-download /out/ /

# Bytecode for what serving imports, and a check that the install serves (warm_up.py).
FROM install AS build
COPY --from=tiktoken / /opt/routegate/tiktoken/
RUN TIKTOKEN_CACHE_DIR=/opt/routegate/tiktoken \
    /opt/routegate/venv/bin/python deploy/container/warm_up.py config/routegate.yaml

FROM ${BASE}
RUN groupadd --gid 10001 routegate \
    && useradd --uid 10001 --gid 10001 --home-dir /data --no-create-home --no-log-init \
       --shell /usr/sbin/nologin routegate \
    && install -d -o 10001 -g 10001 -m 0750 /data
COPY --from=build /opt/routegate/venv /opt/routegate/venv
COPY --from=tiktoken / /opt/routegate/tiktoken/
COPY config/routegate.yaml /etc/routegate/routegate.yaml
COPY LICENSE /usr/share/doc/routegate/LICENSE
# The demo config's data_dir is relative: under WORKDIR, the one writable path.
ENV PATH=/opt/routegate/venv/bin:$PATH \
    TIKTOKEN_CACHE_DIR=/opt/routegate/tiktoken \
    ROUTEGATE_CONFIG=/etc/routegate/routegate.yaml \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/data
WORKDIR /data
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 CMD ["python3", "-c", \
    "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
CMD ["routegate", "serve", "--host", "0.0.0.0", "--port", "8080"]

# Last, so that a new revision rebuilds nothing above. VERSION must equal pyproject's
# version (tests/deploy/test_versions.py). SOURCE: the repository's public URL, and
# REVISION: its commit; .ci/container passes the commit, and the origin's https URL if any.
ARG VERSION=0.1.0
ARG SOURCE=""
ARG REVISION=""
LABEL org.opencontainers.image.title="routegate" \
      org.opencontainers.image.description="Cost-aware, OpenAI-compatible model router gateway" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}"
