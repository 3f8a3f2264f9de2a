"""kcat -G (librdkafka 2.0's balanced consumer) against sluice: one member
reads a 6-partition topic exactly, and commits on exit; two members share
the partitions and read what follows once, resuming from those commits."""
import collections
import os
import re
import signal
import subprocess
import threading
import time

from grouptools import create_topic, produce, wait_for

FAST = ("--override", "group.initial.rebalance.delay.ms=0")
TOPIC = "kcat-group"
PARTS = 6


class Kcat:
    """A `kcat -G` process; stdout lines are records "partition offset value",
    stderr carries its rebalance notices."""

    def __init__(self, server, group, *args):
        self.proc = subprocess.Popen(
            ["kcat", "-b", server.bootstrap, "-G", group,
             "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
             "-X", "heartbeat.interval.ms=500", "-u", "-f", "%p %o %s\n", *args, TOPIC],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lock = threading.Lock()
        self.records, self.notices = [], []
        self.assignment = None
        self.threads = [threading.Thread(target=self._out, daemon=True),
                        threading.Thread(target=self._err, daemon=True)]
        for t in self.threads:
            t.start()

    def _out(self):
        for line in self.proc.stdout:
            p, o, v = line.decode().rstrip("\n").split(" ", 2)
            with self.lock:
                self.records.append((int(p), int(o), v))

    def _err(self):
        for line in self.proc.stderr:
            text = line.decode(errors="replace").rstrip()
            with self.lock:
                self.notices.append(text)
                if "assigned:" in text:
                    self.assignment = sorted(int(p) for p in re.findall(r"\[(\d+)\]", text))
                elif "revoked:" in text:
                    self.assignment = []

    def got(self):
        with self.lock:
            return list(self.records)

    def wait(self, timeout):
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        for t in self.threads:
            t.join(timeout=5)
        return code

    def stop(self, timeout=20):
        """SIGTERM: kcat closes its consumer (commit, LeaveGroup) and exits."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def info(self):
        with self.lock:
            return f"assignment={self.assignment} records={len(self.records)} " \
                   f"stderr={self.notices[-10:]}"


def test_kcat_balanced_consumer(server_factory):
    server = server_factory(*FAST)
    create_topic(server, TOPIC, PARTS)
    first = produce(server, TOPIC, "one", 3000, PARTS)

    # One member reads everything and exits after -c records.
    k = Kcat(server, "kg", "-c", "3000")
    try:
        assert k.wait(60) == 0, k.info()
    finally:
        k.kill()
    got = k.got()
    assert sorted(v for _, _, v in got) == sorted(first)
    assert len({(p, o) for p, o, _ in got}) == 3000
    assert any("assigned:" in n for n in k.notices), k.info()

    # Two members balance the partitions and read only what is new: the
    # first one committed its position when it closed.
    a = Kcat(server, "kg")
    b = Kcat(server, "kg")
    try:
        def balanced():
            with a.lock, b.lock:
                if a.assignment is None or b.assignment is None:
                    return False
                return (sorted(a.assignment + b.assignment) == list(range(PARTS))
                        and len(a.assignment) == len(b.assignment) == PARTS // 2)

        wait_for(balanced, 40, "two kcat members sharing the partitions",
                 info=lambda: f"a: {a.info()}\nb: {b.info()}\n{server.log()[-1500:]}")
        second = produce(server, TOPIC, "two", 1200, PARTS)
        wait_for(lambda: len(a.got()) + len(b.got()) >= 1200, 30, "the new records",
                 info=lambda: f"a: {a.info()}\nb: {b.info()}")
        time.sleep(0.5)
        both = a.got() + b.got()
        counts = collections.Counter(v for _, _, v in both)
        assert sorted(counts) == sorted(second), (
            f"{len(set(counts) - set(second))} unexpected, e.g. {sorted(set(counts) - set(second))[:5]}")
        assert all(c == 1 for c in counts.values())
        for m in (a, b):
            assert {p for p, _, _ in m.got()} <= set(m.assignment)
        assert a.stop() == 0 and b.stop() == 0
    finally:
        a.kill()
        b.kill()
