"""An idempotent producer for test_idempotence.py, run as a child process
(kafka-python 3 lives in its own virtualenv):

    python idempotent_producer.py CLIENT BOOTSTRAP TOPIC N RATE

CLIENT is `kafka-python` (its defaults plus acks="all", which makes it
idempotent) or `confluent` (enable.idempotence=true). Sends values
b"0".."N-1" with keys b"k<i % 30>", at most RATE records/s, printing
`sent I` to stdout after every 1000 records (the test kills the broker on
those marks), then flushes and prints one JSON summary line."""
import json
import sys
import time

client, bootstrap, topic, n, rate = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
acked, failed, errors = [0], [0], []


def report(err):
    if err is None:
        acked[0] += 1
    else:
        failed[0] += 1
        if len(errors) < 5:
            errors.append(str(err))


if client == "kafka-python":
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    idempotent = p._transaction_manager is not None and not p._transaction_manager.is_transactional()

    def send(i):
        f = p.send(topic, key=b"k%d" % (i % 30), value=b"%d" % i)
        f.add_callback(lambda _m: report(None))
        f.add_errback(report)

    def flush():
        p.flush(timeout=180)

    def producer_id():
        return p._transaction_manager.producer_id_and_epoch.producer_id
elif client == "confluent":
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "log_level": 0})
    idempotent = True

    def send(i):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % 30), value=b"%d" % i,
                          on_delivery=lambda err, _m: report(err))
                return
            except BufferError:
                p.poll(0.05)

    def flush():
        left = p.flush(180)
        if left:
            errors.append(f"{left} records not delivered after flush")

    def producer_id():
        return None
else:
    sys.exit(f"unknown client {client}")

start = time.monotonic()
for i in range(n):
    send(i)
    if (i + 1) % 1000 == 0:
        if client == "confluent":
            p.poll(0)
        print(f"sent {i + 1}", flush=True)
        ahead = (i + 1) / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
flush()
print(json.dumps({"acked": acked[0], "failed": failed[0], "errors": errors,
                  "idempotent": idempotent, "producer_id": producer_id()}), flush=True)
