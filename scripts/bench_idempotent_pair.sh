#!/usr/bin/env bash
# Side-by-side idempotent produce throughput (issue #10): `sluice perf
# produce` (sluice-client with its defaults: acks=all, idempotence on,
# batch.size 16384, linger.ms 5, 5 in flight) next to
# scripts/bench_confluent.py (confluent-kafka / librdkafka, acks=all,
# enable.idempotence=true, its default batch.size 1000000, linger.ms 5), and
# both with idempotence off for reference (sluice-client then keeps one
# batch per partition in flight). 1 KiB records, topics of 6 partitions, a
# fresh release broker and data folder per round, the runs in turn (the
# order alternates between rounds). Figures: docs/benchmarks.md.
# Needs: cargo build --release -p sluice-cli, and the test venv.
set -euo pipefail
cd "$(dirname "$0")/.."
S=./target/release/sluice
PY=${PY:-./target/test-venv/bin/python}
ROUNDS=${ROUNDS:-3}
N=${N:-300000}
for round in $(seq 1 "$ROUNDS"); do
  data=$(mktemp -d)
  port=$("$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  RUST_LOG=warn "$S" server --data-dir "$data" --listeners "PLAINTEXT://127.0.0.1:$port" >"$data.log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true' EXIT
  sleep 1
  b=127.0.0.1:$port
  "$S" topic create idem --partitions 6 --bootstrap-server "$b" >/dev/null
  "$S" topic create plain --partitions 6 --bootstrap-server "$b" >/dev/null
  sluice_idem() { echo "round $round sluice idempotent:        $("$S" perf produce --topic idem --num-records "$N" --record-size 1024 --bootstrap-server "$b")"; }
  confluent_idem() { echo "round $round confluent idempotent:     $("$PY" scripts/bench_confluent.py --bootstrap "$b" --messages "$N" --size 1024 --acks all --idempotence 2>&1 | grep produce)"; }
  sluice_plain() { echo "round $round sluice not idempotent:    $("$S" perf produce --topic plain --num-records "$N" --record-size 1024 --enable-idempotence false --bootstrap-server "$b")"; }
  confluent_plain() { echo "round $round confluent not idempotent: $("$PY" scripts/bench_confluent.py --bootstrap "$b" --messages "$N" --size 1024 --acks all 2>&1 | grep produce)"; }
  if (( round % 2 )); then
    sluice_idem; confluent_idem; sluice_plain; confluent_plain
  else
    confluent_idem; sluice_idem; confluent_plain; sluice_plain
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$data.log"
done
