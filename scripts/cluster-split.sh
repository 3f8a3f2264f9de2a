#!/usr/bin/env bash
# Starts a split Sluice cluster on 127.0.0.1 (docs/cluster.md, design 025):
# controller-only nodes (process.roles=controller, ids 1..C) voting on the
# metadata log and broker-only nodes (process.roles=broker, the next ids)
# serving clients, each from a server.properties file that uses only
# Kafka's keys. Runs until Ctrl-C or SIGTERM, then stops the servers still
# running by PID.
#
#   scripts/cluster-split.sh [DIR]   DIR: where the files and data go
#                                    (default: a new temporary folder)
#   CONTROLLERS=3 BROKERS=2          how many of each (CONTROLLERS: 1 or 3)
#   SLUICE_BIN=path/to/sluice        the binary (default: target/debug/sluice,
#                                    built if missing)
#   BASE_PORT=19192                  controllers on BASE+1, BASE+2, ...;
#                                    brokers on BASE+11, BASE+12, ...
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${SLUICE_BIN:-target/debug/sluice}
if [[ ! -x $BIN ]]; then
  cargo build -q -p sluice-cli
fi
DIR=${1:-$(mktemp -d -t sluice-split.XXXXXX)}
mkdir -p "$DIR"
BASE=${BASE_PORT:-19192}
CONTROLLERS=${CONTROLLERS:-3}
BROKERS=${BROKERS:-2}
VOTERS=""
for ((c = 1; c <= CONTROLLERS; c++)); do
  VOTERS+="${VOTERS:+,}$c@127.0.0.1:$((BASE + c))"
done

PIDS=()
CONTROLLER_PIDS=()
BROKER_PIDS=()
# Brokers first (their controlled shutdown needs the quorum), then the
# controllers.
stop() {
  for group in BROKER_PIDS CONTROLLER_PIDS; do
    local -n pids=$group
    for pid in "${pids[@]}"; do
      kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
      wait "$pid" 2>/dev/null || true
    done
  done
}
trap stop EXIT INT TERM

start() { # id roles listeners [extra lines]
  local id=$1 roles=$2 listeners=$3 extra=${4:-}
  cat >"$DIR/server-$id.properties" <<PROPS
process.roles=$roles
node.id=$id
controller.quorum.voters=$VOTERS
listeners=$listeners
controller.listener.names=CONTROLLER
log.dirs=$DIR/data-$id
$extra
PROPS
  "$BIN" server --config "$DIR/server-$id.properties" >"$DIR/node-$id.log" 2>&1 &
  PIDS+=($!)
  if [[ $roles == controller ]]; then CONTROLLER_PIDS+=($!); else BROKER_PIDS+=($!); fi
  echo "node $id ($roles): $listeners, pid $!, log $DIR/node-$id.log"
}

for ((c = 1; c <= CONTROLLERS; c++)); do
  start "$c" controller "CONTROLLER://127.0.0.1:$((BASE + c))"
done
BOOTSTRAP=""
# With fewer than three brokers, the internal topics need a smaller
# replication factor (Kafka's rule: creation waits for that many brokers).
RF=$((BROKERS < 3 ? BROKERS : 3))
for ((b = 1; b <= BROKERS; b++)); do
  id=$((CONTROLLERS + b))
  port=$((BASE + 10 + b))
  start "$id" broker "PLAINTEXT://127.0.0.1:$port" \
    "offsets.topic.replication.factor=$RF
transaction.state.log.replication.factor=$RF
transaction.state.log.min.isr=$((RF < 2 ? RF : 2))"
  BOOTSTRAP+="${BOOTSTRAP:+,}127.0.0.1:$port"
done
echo "bootstrap servers: $BOOTSTRAP"
echo "Ctrl-C stops the cluster"
for pid in "${PIDS[@]}"; do
  wait "$pid" 2>/dev/null || true
done
