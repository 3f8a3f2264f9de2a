"""Parent-side helpers of the consumer group tests: group members in their
own processes (group_member.py), waits with deadlines, producing numbered
records, and the checks every group test makes."""
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
MEMBER = HERE / "group_member.py"
PYTHON = os.environ.get("SLUICETEST_PYTHON", sys.executable)


def wait_for(cond, timeout, what, interval=0.1, info=None):
    """Polls `cond` until it returns a true value (returned) or `timeout`
    seconds pass (AssertionError naming `what`, with `info()` if given)."""
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() >= deadline:
            extra = f"\n{info()}" if info else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def create_topic(server, name, partitions):
    a = admin(server)
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(server, topic, tag, n, partitions):
    """Produces values `<tag>-<i>` for i < n, record i to partition
    i % partitions (acks=all); returns the values."""
    p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    failed = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)

    values = [f"{tag}-{i}" for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions, on_delivery=on_delivery)
    assert p.flush(30) == 0, "produce did not finish"
    assert not failed, failed[:3]
    return values


class Member:
    """A group member process. Its reported events are collected by a
    reader thread; `assignment` is the latest assignment it saw."""

    def __init__(self, log_dir, **cfg):
        self.name = cfg["name"]
        self.cfg = cfg
        self.lock = threading.Lock()
        self.events = []
        self.assignment = None
        self.proc = None
        self.runs = 0
        self.log_path = Path(log_dir) / f"member-{self.name}-{time.time_ns()}.log"
        self.start()

    def start(self):
        """Starts the process (again, after `kill`: same config, so the same
        group.instance.id). Events accumulate over runs, each tagged with
        its run number."""
        with self.lock:
            self.assignment = None
            self.runs += 1
        if getattr(self, "stderr_file", None) is not None:
            self.stderr_file.close()
        self.stderr_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen([PYTHON, str(MEMBER), json.dumps(self.cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr_file)
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def _read(self, proc):
        for line in proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if proc is not self.proc:
                    return
                ev["run"] = self.runs
                self.events.append(ev)
                if ev["ev"] == "assignment":
                    self.assignment = ev["parts"]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def count(self, kind, run=None):
        return len(self.of(kind, run))

    def of(self, kind, run=None):
        with self.lock:
            return [e for e in self.events
                    if e["ev"] == kind and (run is None or e["run"] == run)]

    def records(self):
        """Every (partition, offset, value) this member consumed."""
        return [tuple(r) for e in self.of("batch") for r in e["recs"]]

    def failed_commits(self):
        return [e for e in self.of("batch") if not e["committed"]]

    def close(self, timeout=30):
        """Closes the consumer (LeaveGroup) and waits for the process."""
        if not self.alive():
            return
        try:
            self.proc.stdin.write(b"close\n")
            self.proc.stdin.flush()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member {self.name} did not close within {timeout}s")
        self._reader.join(timeout=5)

    def kill(self):
        """SIGKILL: the member stops heartbeating without leaving."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)

    def stderr(self):
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


class Group:
    """Starts members of one group and kills every one left at the end."""

    def __init__(self, server, log_dir, client, group, topic, **defaults):
        self.server = server
        self.log_dir = log_dir
        self.base = dict(client=client, bootstrap=server.bootstrap, group=group, topic=topic,
                         **defaults)
        self.members = []

    def member(self, name, **cfg):
        m = Member(self.log_dir, **{**self.base, "name": name, **cfg})
        self.members.append(m)
        return m

    def cleanup(self):
        for m in self.members:
            try:
                m.kill()
            except Exception:  # noqa: BLE001 - best effort, by PID
                pass
            m.stderr_file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def info(self, members=None):
        lines = []
        for m in members or self.members:
            with m.lock:
                tail = [e for e in m.events if e["ev"] != "batch"][-8:]
            lines.append(f"{m.name} alive={m.alive()} assignment={m.assignment} events={tail}")
            err = m.stderr()
            if err.strip():
                lines.append(f"  stderr: {err[-800:]}")
        lines.append(f"server log: {self.server.log()[-1500:]}")
        return "\n".join(lines)

    def wait_balanced(self, members, partitions, sizes, timeout=40):
        """Waits until the live `members` own every partition exactly once,
        with assignment sizes `sizes` (sorted), and returns {name: parts}."""
        def ok():
            got = [m.assignment for m in members]
            if any(a is None for a in got):
                return None
            flat = [p for a in got for p in a]
            if sorted(flat) != list(range(partitions)):
                return None
            if sorted(len(a) for a in got) != sorted(sizes):
                return None
            return {m.name: list(m.assignment) for m in members}

        return wait_for(ok, timeout, f"partitions balanced over {[m.name for m in members]}",
                        info=lambda: self.info())


def all_records(members):
    return [r for m in members for r in m.records()]


def assert_exactly_once(members, expected, timeout=30, info=None):
    """Waits until every value in `expected` was consumed by the group,
    then checks that nothing was consumed twice (over everything the
    members ever consumed) and nothing unexpected arrived."""
    expected = set(expected)

    def seen():
        return expected <= {r[2] for r in all_records(members)}

    wait_for(seen, timeout, f"{len(expected)} records consumed", info=info)
    time.sleep(0.5)  # a duplicate delivered right after the last record
    counts = collections.Counter(r[2] for r in all_records(members))
    dups = {v: c for v, c in counts.items() if c > 1}
    assert not dups, f"{len(dups)} records consumed more than once, e.g. {list(dups.items())[:5]}"
    offsets = collections.Counter((r[0], r[1]) for r in all_records(members))
    assert all(c == 1 for c in offsets.values())


def committed_offsets_cover(members):
    """Every batch a member consumed was committed."""
    failed = [(m.name, e["err"]) for m in members for e in m.failed_commits()]
    assert not failed, failed[:5]


def three_member_flow(server, log_dir, client, assignor, describe, committed, sticky=False,
                      session_timeout_ms=6000):
    """The common scenario of the client files, on a 6-partition topic:

    1. a joins alone and gets all six partitions; b and c join: 2+2+2, each
       partition with exactly one owner, as the members and the broker
       (`describe(group)` -> {client_id: parts}) see it;
    2. 600 records are consumed exactly once across the group and the
       commits (`committed(group, topic)` -> {partition: offset}) reach the
       end of every partition;
    3. a, the leader, closes (LeaveGroup): its partitions move to b and c
       (3+3; a sticky assignor keeps what b and c had), one of which leads
       now; 600 more, exactly once, and nothing of step 2 again;
    4. c is killed (no LeaveGroup, heartbeats stop): after the session
       timeout b owns all six; 600 more, exactly once.
    """
    topic, group = f"t-{client}-{assignor}", f"g-{client}-{assignor}"
    create_topic(server, topic, 6)
    with Group(server, log_dir, client, group, topic, assignor=assignor,
               session_timeout_ms=session_timeout_ms) as g:
        a = g.member("a")
        g.wait_balanced([a], 6, [6])
        b, c = g.member("b"), g.member("c")
        owners = g.wait_balanced([a, b, c], 6, [2, 2, 2])
        wait_for(lambda: describe(group) == owners, 20,
                 "the broker's view of the assignment to match the members'",
                 info=lambda: f"broker: {describe(group)} members: {owners}")

        everyone = [a, b, c]
        values = produce(server, topic, "one", 600, 6)
        assert_exactly_once(everyone, values, info=g.info)
        for m in everyone:  # nobody read a partition it did not own
            assert {r[0] for r in m.records()} <= set(owners[m.name]), m.name
        wait_for(lambda: committed(group, topic) == {p: 100 for p in range(6)}, 20,
                 "commits at the end of every partition",
                 info=lambda: committed(group, topic))

        a.close()
        after_leave = g.wait_balanced([b, c], 6, [3, 3])
        if sticky:
            for m in (b, c):
                assert set(owners[m.name]) <= set(after_leave[m.name]), (owners, after_leave)
        wait_for(lambda: describe(group) == after_leave, 20, "the broker's view after the leave",
                 info=lambda: f"broker: {describe(group)} members: {after_leave}")
        values += produce(server, topic, "two", 600, 6)
        assert_exactly_once(everyone, values, info=g.info)

        c.kill()
        started = time.time()
        g.wait_balanced([b], 6, [6], timeout=session_timeout_ms / 1000 + 30)
        # Not before the session timeout: nothing told the broker c is gone.
        assert time.time() - started > session_timeout_ms / 1000 * 0.5
        wait_for(lambda: describe(group) == {"b": list(range(6))}, 20,
                 "the broker's view after the session timeout", info=lambda: describe(group))
        values += produce(server, topic, "three", 600, 6)
        assert_exactly_once(everyone, values, info=g.info)
        committed_offsets_cover(everyone)
        wait_for(lambda: committed(group, topic) == {p: 300 for p in range(6)}, 20,
                 "commits at the end of every partition", info=lambda: committed(group, topic))
        b.close()
        wait_for(lambda: describe(group) == {}, 20, "an empty group after the last member left",
                 info=lambda: describe(group))
