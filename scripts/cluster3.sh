#!/usr/bin/env bash
# Starts three combined Sluice nodes (process.roles=broker,controller) of one
# metadata quorum on 127.0.0.1, each from a server.properties file that uses
# only Kafka's keys (docs/cluster.md). Runs until Ctrl-C or SIGTERM, then
# stops the servers still running by PID (a node killed meanwhile, e.g. to
# try a failover, does not stop the others).
#
#   scripts/cluster3.sh [DIR]        DIR: where the files and data go
#                                    (default: a new temporary folder)
#   SLUICE_BIN=path/to/sluice        the binary (default: target/debug/sluice,
#                                    built if missing)
#   BASE_PORT=19092                  brokers on BASE, BASE+2, BASE+4;
#                                    controllers on BASE+1, BASE+3, BASE+5
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${SLUICE_BIN:-target/debug/sluice}
if [[ ! -x $BIN ]]; then
  cargo build -q -p sluice-cli
fi
DIR=${1:-$(mktemp -d -t sluice-cluster3.XXXXXX)}
mkdir -p "$DIR"
BASE=${BASE_PORT:-19092}
VOTERS="1@127.0.0.1:$((BASE + 1)),2@127.0.0.1:$((BASE + 3)),3@127.0.0.1:$((BASE + 5))"

PIDS=()
stop() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap stop EXIT INT TERM

for id in 1 2 3; do
  broker=$((BASE + 2 * (id - 1)))
  controller=$((broker + 1))
  cat >"$DIR/server-$id.properties" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$VOTERS
listeners=PLAINTEXT://127.0.0.1:$broker,CONTROLLER://127.0.0.1:$controller
controller.listener.names=CONTROLLER
log.dirs=$DIR/data-$id
PROPS
  "$BIN" server --config "$DIR/server-$id.properties" >"$DIR/node-$id.log" 2>&1 &
  PIDS+=($!)
  echo "node $id: broker 127.0.0.1:$broker, controller 127.0.0.1:$controller, pid $!, log $DIR/node-$id.log"
done
echo "bootstrap servers: 127.0.0.1:$BASE,127.0.0.1:$((BASE + 2)),127.0.0.1:$((BASE + 4))"
echo "Ctrl-C stops the cluster"
for pid in "${PIDS[@]}"; do
  wait "$pid" 2>/dev/null || true
done
