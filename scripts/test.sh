#!/usr/bin/env bash
# The whole test suite. Installs what the tests need on a fresh machine
# (kcat from Debian; Python clients in virtualenvs under target/; kafkajs
# from npm under tests/kafkajs/node_modules), then runs every Rust test and
# the compatibility tests against a real `sluice server`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kcat >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq && apt-get install -y -qq kcat >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq kcat >/dev/null
  fi
fi

VENV=target/test-venv
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
export SLUICETEST_PYTHON="$PWD/$VENV/bin/python"

# kafka-python 3.x in its own virtualenv (its protocol modules moved in
# 3.0): the client line that infers Kafka 4.0 from ApiVersions.
VENV_KP3=target/test-venv-kp3
if [[ ! -x $VENV_KP3/bin/python ]]; then
  python3 -m venv "$VENV_KP3"
fi
"$VENV_KP3/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements-kafka-python3.txt
export SLUICETEST_PYTHON_KP3="$PWD/$VENV_KP3/bin/python"

# kafkajs (npm, pinned by tests/kafkajs/package-lock.json) for
# tests/compat/test_kafkajs.py; node and npm come with the machine.
if [[ ! -d tests/kafkajs/node_modules/kafkajs ]]; then
  if [[ -f tests/kafkajs/package-lock.json ]]; then
    (cd tests/kafkajs && npm ci --no-audit --no-fund --loglevel=error)
  else
    (cd tests/kafkajs && npm install --no-audit --no-fund --loglevel=error)
  fi
fi

# A failing test's panic message stays short: CI keeps only the head and
# the tail of long output, and a backtrace would push the message out.
export RUST_BACKTRACE=0

# Benchmarks must keep compiling; they are run by `cargo bench`, not here.
cargo test --workspace --benches --no-run
# `cargo test` also builds the `sluice` binary and the examples (one
# build: a separate `cargo build -p ...` resolves other features and
# compiles the dependencies again).
cargo test --workspace

# Compatibility: unmodified Kafka clients against the real binary, and
# tests/compat/test_streams.py runs the word_count example.
for built in target/debug/sluice target/debug/examples/word_count; do
  [[ -x $built ]] || { echo "test.sh: cargo test did not build $built" >&2; exit 1; }
done
export SLUICETEST_BIN="$PWD/target/debug/sluice"
"$VENV/bin/python" -m pytest tests/compat -q -p no:cacheprovider --durations=20
