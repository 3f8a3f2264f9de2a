"""One consumer group member in its own process, for the group tests.

    python group_member.py '<json config>'

The config names the client ("kafka-python" or "confluent"), the broker,
group, topic, assignor and timeouts, with "extra" client settings. The member subscribes, polls, commits
every batch synchronously, and reports on stdout, one JSON object a line:

    {"ev": "assign"|"revoke", "parts": [...]}      rebalance callbacks
    {"ev": "assignment", "parts": [...]}           the assignment seen after a poll, when it changed
    {"ev": "batch", "recs": [[p, offset, value]], "committed": bool, "err": str|None}
    {"ev": "error", "err": str, ...}               an error from poll
    {"ev": "closed"}

A line "close" on stdin (or end of input) closes the consumer, which
leaves the group, and ends the process; SIGKILL makes it stop heartbeating
without leaving. It also gives up after `max_seconds` so that a lost parent
never leaves it behind.
"""
import json
import sys
import threading
import time

_out = threading.Lock()


def emit(**ev):
    with _out:
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()


def run_kafka_python(cfg, stop):
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(ev="revoke", parts=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            emit(ev="assign", parts=sorted(tp.partition for tp in assigned))

    c = KafkaConsumer(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
                      client_id=cfg["name"],
                      partition_assignment_strategy=[assignors[cfg["assignor"]]],
                      enable_auto_commit=False,
                      auto_offset_reset=cfg.get("reset", "earliest"),
                      session_timeout_ms=cfg.get("session_timeout_ms", 6000),
                      heartbeat_interval_ms=cfg.get("heartbeat_interval_ms", 500),
                      max_poll_interval_ms=cfg.get("max_poll_interval_ms", 30000),
                      request_timeout_ms=40000, retry_backoff_ms=100,
                      **cfg.get("extra", {}))
    c.subscribe([cfg["topic"]], listener=Listener())
    last = None
    while not stop.is_set():
        try:
            polled = c.poll(timeout_ms=200)
        except KafkaError as e:
            emit(ev="error", err=repr(e))
            time.sleep(0.2)
            continue
        recs = [[tp.partition, r.offset, r.value.decode()]
                for tp, rs in polled.items() for r in rs]
        if recs:
            err = None
            try:
                c.commit()
            except KafkaError as e:
                err = repr(e)
            emit(ev="batch", recs=recs, committed=err is None, err=err)
        parts = sorted(tp.partition for tp in c.assignment())
        if parts != last:
            emit(ev="assignment", parts=parts)
            last = parts
    c.close()


def run_confluent(cfg, stop):
    from confluent_kafka import Consumer, KafkaError, KafkaException

    conf = {"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
            "client.id": cfg["name"],
            "partition.assignment.strategy": cfg["assignor"],
            "enable.auto.commit": False,
            "auto.offset.reset": cfg.get("reset", "earliest"),
            "session.timeout.ms": cfg.get("session_timeout_ms", 6000),
            "heartbeat.interval.ms": cfg.get("heartbeat_interval_ms", 500),
            "max.poll.interval.ms": cfg.get("max_poll_interval_ms", 30000),
            "topic.metadata.refresh.interval.ms": 2000,
            **cfg.get("extra", {})}
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    c = Consumer(conf)

    def on_assign(consumer, parts):
        emit(ev="assign", parts=sorted(p.partition for p in parts))

    def on_revoke(consumer, parts):
        emit(ev="revoke", parts=sorted(p.partition for p in parts))

    c.subscribe([cfg["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    last = None
    while not stop.is_set():
        recs = []
        for m in c.consume(num_messages=1000, timeout=0.2):
            if m.error() is not None:
                e = m.error()
                emit(ev="error", err=str(e), code=e.code(),
                     fatal=e.fatal() or e.code() == KafkaError._FATAL)
            else:
                recs.append([m.partition(), m.offset(), m.value().decode()])
        if recs:
            err = None
            try:
                c.commit(asynchronous=False)
            except KafkaException as e:
                err = str(e)
            emit(ev="batch", recs=recs, committed=err is None, err=err)
        parts = sorted(p.partition for p in c.assignment())
        if parts != last:
            emit(ev="assignment", parts=parts)
            last = parts
    c.close()


def main():
    cfg = json.loads(sys.argv[1])
    stop = threading.Event()

    def read_stdin():
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    timer = threading.Timer(cfg.get("max_seconds", 150), stop.set)
    timer.daemon = True
    timer.start()
    if cfg["client"] == "kafka-python":
        run_kafka_python(cfg, stop)
    else:
        run_confluent(cfg, stop)
    emit(ev="closed")


if __name__ == "__main__":
    main()
