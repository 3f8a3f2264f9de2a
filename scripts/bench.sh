#!/usr/bin/env bash
# The benchmark runner (docs/benchmarks.md, "Benchmark runner"): builds the
# release binary, makes sure the Python client (confluent-kafka) is
# installed, then runs scripts/bench.py, which measures this machine's
# limits, Sluice and librdkafka side by side, prints a table and rewrites
# the runner's section of docs/benchmarks.md. Arguments go to bench.py
# (e.g. --no-cluster, --gb 2, --no-docs; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p sluice-cli
VENV=target/test-venv
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
exec "$VENV/bin/python" scripts/bench.py --bin target/release/sluice "$@"
