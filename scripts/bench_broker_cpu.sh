#!/usr/bin/env bash
# Broker CPU seconds per GB ingested: a fresh release broker per round,
# `sluice perf produce` (1 KiB records, 4 partitions) against it, and the
# broker's user+system CPU time from /proc/<pid>/stat before and after the
# run. Only delivered records count (perf produce reports delivered ones).
#
#   scripts/bench_broker_cpu.sh [BROKER_BIN] [CLIENT_BIN]
#
# BROKER_BIN defaults to target/release/sluice; CLIENT_BIN (the perf
# client) to the same, so two broker builds can be compared with one client.
# ROUNDS (3), RECORDS (1000000), ACKS (1) and SIZE (1024) come from the
# environment. Figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BROKER=${1:-./target/release/sluice}
CLIENT=${2:-$BROKER}
ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-1000000}
ACKS=${ACKS:-1}
SIZE=${SIZE:-1024}
TICKS=$(getconf CLK_TCK)

free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

cpu_ticks() { # utime + stime of a process, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

for round in $(seq 1 "$ROUNDS"); do
  data=$(mktemp -d)
  port=$(free_port)
  RUST_LOG=warn "$BROKER" server --data-dir "$data" --listeners "PLAINTEXT://127.0.0.1:$port" >"$data.log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  b=127.0.0.1:$port
  "$CLIENT" topic create cpu --partitions 4 --bootstrap-server "$b" >/dev/null
  before=$(cpu_ticks "$pid")
  summary=$("$CLIENT" perf produce --topic cpu --num-records "$RECORDS" --record-size "$SIZE" \
    --acks "$ACKS" --json --bootstrap-server "$b")
  after=$(cpu_ticks "$pid")
  delivered=$(python3 -c 'import json,sys;print(json.loads(sys.argv[1])["records"])' "$summary" 2>/dev/null || echo "$RECORDS")
  python3 - "$before" "$after" "$TICKS" "$delivered" "$SIZE" "$round" "$summary" <<'EOF'
import json, sys
before, after, ticks, delivered, size, rnd = (int(x) for x in sys.argv[1:7])
summary = json.loads(sys.argv[7])
cpu_s = (after - before) / ticks
gb = delivered * size / 1e9
rate = summary.get("records_per_sec") or summary.get("records_per_second")
print(f"round {rnd}: broker cpu {cpu_s:.2f} s for {gb:.3f} GB -> {cpu_s / gb:.3f} cpu-s/GB; client {rate} records/s")
EOF
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  trap - EXIT
  rm -rf "$data" "$data.log"
done
