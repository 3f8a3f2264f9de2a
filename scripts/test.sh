#!/usr/bin/env bash
# The whole test suite. Installs what the tests need on a fresh machine
# (Python clients in a virtualenv under target/), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/test-venv
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
export SLUICE_PYTHON="$PWD/$VENV/bin/python"

# Benchmarks must keep compiling; they are run by `cargo bench`, not here.
cargo test --workspace --benches --no-run
cargo test --workspace
