"""Three `sluice server` processes forming one cluster on 127.0.0.1 (issue
#13): combined nodes (`process.roles=broker,controller`) started from
server.properties files that use only Kafka's keys, on free ports, each
with its own data folder; stopped, killed, paused and resumed by PID.

Timers are shortened so that failover fits a test: a node silent for
`broker.session.timeout.ms` (3 s) is fenced and its leaderships move; a
follower behind for `replica.lag.time.max.ms` (3 s) leaves the ISR.

With `proxied=True` every node's broker and controller listeners are
reached by the other nodes (and by clients after bootstrap) through a
tests/compat/netproxy.py proxy of its own: the advertised listener and
the `controller.quorum.voters` addresses are the proxies'. A proxy knows
which node opened each connection (the process owning its socket), so
`isolate` cuts every link of a node in both directions (what it opens to
the others and what they and clients open to it) and `cut_link` cuts
the two directions between two nodes, while the nodes run on."""
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

import wire
from conftest import BIN, free_port
from netproxy import Proxy, process_of

SESSION_TIMEOUT_MS = 3000
LAG_TIME_MS = 3000


class Node:
    def __init__(self, node_id, folder, broker_port, controller_port, voters, extra, proxies=(),
                 roles="broker,controller", log_dirs=1):
        """`roles` is `process.roles`: a controller-only node has only its
        CONTROLLER listener (`broker_port` None), a broker-only node only
        its PLAINTEXT one (`controller_port` None). `log_dirs` is how many
        data folders `log.dirs` lists (data-<id>, then data-<id>-2, ...)."""
        self.id = node_id
        self.folder = Path(folder)
        self.roles = roles
        self.port = broker_port
        self.controller_port = controller_port
        self.properties = self.folder / f"server-{node_id}.properties"
        self.log_path = self.folder / f"node-{node_id}.log"
        self.proc = None
        self.proxies = list(proxies)
        self.log_dirs = [self.folder / f"data-{node_id}"] + [
            self.folder / f"data-{node_id}-{k}" for k in range(2, log_dirs + 1)]
        listeners = []
        if broker_port is not None:
            listeners.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
        if controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
        keys = {
            "process.roles": roles,
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "replica.lag.time.max.ms": str(LAG_TIME_MS),
            "replica.fetch.wait.max.ms": "200",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.proxies:
            keys["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxies[0].port}"
        keys.update(extra)  # the caller's keys win
        lines = [f"{k}={v}" for k, v in keys.items()]
        self.properties.write_text("\n".join(lines) + "\n")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    @property
    def is_broker(self):
        return "broker" in self.roles.split(",")

    def start(self):
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([BIN, "server", "--config", str(self.properties)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def wait_listening(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.id} exited with {self.proc.returncode}: {self.log()}")
            try:
                port = self.port if self.is_broker else self.controller_port
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"node {self.id} did not start listening: {self.log()}")

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.running():
            os.kill(self.proc.pid, sig)

    def kill(self):
        """SIGKILL, as a crash."""
        if self.running():
            self.proc.send_signal(signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout=30):
        if not self.running():
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def view(self, topic):
        """This node's own answer to Metadata v1 for `topic`:
        {partition: (leader, replicas, isr)} (each node answers from its
        own copy of the metadata, which may lag)."""
        name = topic.encode()
        body = struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
        with wire.connect(self) as s:
            s.sendall(wire.frame(wire.header(3, 1, 1) + body))
            r = Reader(wire.recv_frame(s))
        r.i32()  # correlation id
        for _ in range(r.i32()):  # brokers
            r.i32(), r.string(), r.i32(), r.string()
        r.i32()  # controller id
        out = {}
        for _ in range(r.i32()):
            r.i16(), r.string(), r.u8()
            for _ in range(r.i32()):
                r.i16()
                index, leader = r.i32(), r.i32()
                replicas = [r.i32() for _ in range(r.i32())]
                isr = [r.i32() for _ in range(r.i32())]
                out[index] = (leader, replicas, isr)
        return out


class Reader:
    """Big-endian reads from a response body."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return v

    def u8(self):
        return self.take(">B")

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        v = self.data[self.at:self.at + n].decode()
        self.at += n
        return v


class Cluster:
    """Three combined nodes (ids 1 to 3) of one metadata quorum, each with
    `log_dirs` data folders."""

    def __init__(self, folder, extra=None, proxied=False, log_dirs=1):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        ports = [(free_port(), free_port()) for _ in range(3)]
        proxies = [(Proxy(b, self.node_of), Proxy(c, self.node_of)) if proxied else ()
                   for b, c in ports]
        voters = ",".join(f"{i + 1}@127.0.0.1:{proxies[i][1].port if proxied else c}"
                          for i, (_, c) in enumerate(ports))
        self.nodes = {i + 1: Node(i + 1, folder, b, c, voters, extra or {}, proxies[i],
                                  log_dirs=log_dirs)
                      for i, (b, c) in enumerate(ports)}

    @property
    def bootstrap(self):
        return ",".join(n.bootstrap for n in self.nodes.values())

    def node_of(self, peer_port, proxy_port):
        """The id of the node whose process opened a proxied connection
        from `peer_port` to `proxy_port` (None: a client)."""
        pids = {n.proc.pid: n.id for n in getattr(self, "nodes", {}).values() if n.running()}
        pid = process_of(peer_port, proxy_port, pids) if pids else None
        return pids.get(pid)

    def isolate(self, node_id, mode):
        """Cuts every link of `node_id` ("drop" or "blackhole"): all
        connections to it through its proxies (clients' too) and the
        connections it opens to the other nodes. Only a client that
        bypasses the proxies still reaches it."""
        for n in self.nodes.values():
            for p in n.proxies:
                p.cut(mode, None if n.id == node_id else [node_id])

    def cut_link(self, a, b, mode):
        """Cuts both directions between nodes `a` and `b`."""
        for x, y in ((a, b), (b, a)):
            for p in self.nodes[x].proxies:
                p.cut(mode, [y])

    def links(self):
        """The open proxied connections between nodes, as a set of
        (from node, to node)."""
        out = set()
        for n in self.nodes.values():
            for p in n.proxies:
                with p.lock:
                    out.update((label, n.id) for label, _, _ in p.pairs if label is not None)
        return out

    def heal(self):
        """Ends every cut."""
        for n in self.nodes.values():
            for p in n.proxies:
                p.heal()

    def start(self, timeout=60):
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            n.wait_listening()
        self.wait_for(lambda: len(self.metadata().brokers) == 3, "three registered brokers", timeout)
        return self

    def stop(self):
        for n in self.nodes.values():
            n.stop()
        for n in self.nodes.values():
            for p in n.proxies:
                p.close()

    def admin(self):
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def metadata(self, topic=None):
        return self.admin().list_topics(topic=topic, timeout=10)

    def partition(self, topic, partition):
        """(leader, replicas, isr) as the cluster answers Metadata."""
        p = self.metadata(topic).topics[topic].partitions[partition]
        return p.leader, list(p.replicas), list(p.isrs)

    def wait_for(self, cond, what, timeout=60):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                if cond():
                    return
            except Exception as e:  # a node may be down: ask again
                last = e
            time.sleep(0.2)
        logs = "\n".join(f"--- node {i}\n{n.log()}" for i, n in self.nodes.items())
        raise AssertionError(f"timed out waiting for {what} (last error: {last})\n{logs}")

    def wait_full_isr(self, topic, partitions, timeout=90):
        """Until every node's own metadata has a leader and all three
        replicas in sync for every partition (a node just resumed may
        still answer from its metadata of before the pause)."""
        def full():
            for n in self.nodes.values():
                view = n.view(topic)
                if not all(p in view and view[p][0] >= 0 and len(view[p][2]) == 3
                           for p in range(partitions)):
                    return False
            return True
        self.wait_for(full, f"every replica of {topic} in sync", timeout)


class SplitCluster(Cluster):
    """Kafka's split topology (design 025): `controllers` controller-only
    voters (ids 1 to `controllers`, a CONTROLLER listener each) and
    `brokers` broker-only nodes (the next ids, a PLAINTEXT listener each)
    that observe the quorum. `extra` keys go to every node,
    `broker_extra` to the brokers only."""

    def __init__(self, folder, controllers=3, brokers=2, extra=None, broker_extra=None):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        cports = [free_port() for _ in range(controllers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(cports))
        self.nodes = {}
        for i, p in enumerate(cports):
            self.nodes[i + 1] = Node(i + 1, folder, None, p, voters, extra or {}, roles="controller")
        for j in range(brokers):
            node_id = controllers + j + 1
            keys = dict(extra or {})
            keys.update(broker_extra or {})
            self.nodes[node_id] = Node(node_id, folder, free_port(), None, voters, keys, roles="broker")
        self.brokers = [n for n in self.nodes.values() if n.is_broker]
        self.controllers = [n for n in self.nodes.values() if not n.is_broker]

    @property
    def bootstrap(self):
        return ",".join(n.bootstrap for n in self.brokers)

    def stop(self):
        """Brokers first (their controlled shutdown needs the quorum), then
        the controllers, as Kafka's operations guide says."""
        for n in self.brokers + self.controllers:
            n.stop()

    def start(self, timeout=60):
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            n.wait_listening()
        self.wait_for(lambda: len(self.metadata().brokers) == len(self.brokers),
                      "the brokers registered", timeout)
        return self
