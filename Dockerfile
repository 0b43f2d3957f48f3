# One image for both roles: `logkeeper operator` (the operator Deployment) and `logkeeper serve`
# (each volume's worker, started by the operator's StatefulSet with args ["serve", ...]).
# Assertions stay on (no PYTHONOPTIMIZE): they guard invariants of the on-disk format.

FROM python:3.11-slim-bookworm AS build
# A C compiler for the native speed-ups (storagecore/records/_native.c, _offset_map_native.c).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY storagecore ./storagecore
COPY storageworker ./storageworker
COPY operator ./operator
COPY logkeeper ./logkeeper
RUN python -m venv /opt/logkeeper \
    && /opt/logkeeper/bin/pip install --no-cache-dir ".[worker,operator]" \
    && /opt/logkeeper/bin/python -c "import storagecore.cleaner.offset_map as m; assert m.IMPLEMENTATION == 'c'"

FROM python:3.11-slim-bookworm
COPY --from=build /opt/logkeeper /opt/logkeeper
RUN groupadd --gid 10001 logkeeper \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin logkeeper
ENV PATH=/opt/logkeeper/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080 9092
ENTRYPOINT ["logkeeper"]
CMD ["--help"]
