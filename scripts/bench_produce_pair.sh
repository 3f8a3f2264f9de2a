#!/usr/bin/env bash
# Side-by-side produce throughput: `sluice perf produce` (sluice-client)
# and scripts/bench_confluent.py (confluent-kafka) against the same release
# broker, a fresh broker and data folder per round. Figures: docs/benchmarks.md.
# Needs: cargo build --release -p sluice-cli, and the test venv
# (./scripts/test.sh creates target/test-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
S=./target/release/sluice
PY=./target/test-venv/bin/python
ROUNDS=${ROUNDS:-3}
for round in $(seq 1 "$ROUNDS"); do
  data=$(mktemp -d)
  port=$("$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  RUST_LOG=warn "$S" server --data-dir "$data" --listeners "PLAINTEXT://127.0.0.1:$port" >"$data.log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true' EXIT
  sleep 1
  b=127.0.0.1:$port
  "$S" topic create s100 --partitions 6 --bootstrap-server "$b" >/dev/null
  "$S" topic create s1000 --partitions 6 --bootstrap-server "$b" >/dev/null
  echo "round $round sluice 100B acks=1:   $("$S" perf produce --topic s100 --num-records 1000000 --record-size 100 --acks 1 --bootstrap-server "$b")"
  echo "round $round sluice 1000B acks=all: $("$S" perf produce --topic s1000 --num-records 300000 --record-size 1000 --acks all --bootstrap-server "$b")"
  echo "round $round confluent 100B acks=1:   $("$PY" scripts/bench_confluent.py --bootstrap "$b" 2>&1 | grep produce)"
  echo "round $round confluent 1000B acks=all: $("$PY" scripts/bench_confluent.py --bootstrap "$b" --messages 300000 --size 1000 --acks all 2>&1 | grep produce)"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$data.log"
done
