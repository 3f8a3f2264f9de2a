"""A small TCP proxy for network-fault tests: listens on a free 127.0.0.1
port and forwards every connection to a target port, until told to fail.

Every connection is labelled at accept time with who opened it: the
`identify(peer_port, proxy_port)` function the proxy was given names the
process that owns the connecting socket (cluster.py maps it to a node id
with `process_of`); connections it cannot name (clients) get `None`. Faults
apply to all connections or only to those of some labels, so a test cuts
one direction of a link between two nodes, or all of a node's links:

- `cut("drop", sources)`: their open connections are closed and new ones
  closed at once (the peer sees resets and refusals quickly);
- `cut("blackhole", sources)`: nothing of theirs is forwarded any more in
  either direction and new connections are accepted but never answered
  (the peer sees only timeouts);
- `heal(sources)`: their held connections are closed (the peers reconnect)
  and new connections are forwarded again.

`sources=None` means every connection, labelled or not.
"""
import os
import socket
import threading

from conftest import free_port

EVERYONE = "*"


def _tcp_inode(local_port, remote_port):
    """The inode of the 127.0.0.1 TCP socket bound to `local_port` and
    connected to `remote_port`, from /proc/net/tcp (None when absent)."""
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if int(local.split(":")[1], 16) == local_port and int(remote.split(":")[1], 16) == remote_port:
                    return fields[9]
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return None


def process_of(peer_port, proxy_port, pids):
    """Which of `pids` owns the socket connected from `peer_port` to
    `proxy_port` (None when none of them does)."""
    inode = _tcp_inode(peer_port, proxy_port)
    if inode is None:
        return None
    wanted = f"socket:[{inode}]"
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                    return pid
            except OSError:
                continue
    return None


class Proxy:
    def __init__(self, target_port, identify=None):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.identify = identify or (lambda peer_port, proxy_port: None)
        self.cuts = {}  # label (or EVERYONE) -> "drop" | "blackhole"
        self.lock = threading.Lock()
        self.pairs = []  # (label, client, upstream)
        self.held = []  # (label, socket)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(128)
        self.closed = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def mode_of(self, label):
        """The fault that applies to a connection labelled `label` (the
        caller holds the lock): "pass", "drop" or "blackhole"."""
        return self.cuts.get(EVERYONE) or self.cuts.get(label) or "pass"

    def accept_loop(self):
        while not self.closed:
            try:
                client, peer = self.listener.accept()
            except OSError:
                return
            try:
                label = self.identify(peer[1], self.port)
            except Exception:  # noqa: BLE001 (a process gone meanwhile)
                label = None
            with self.lock:
                mode = self.mode_of(label)
                if mode == "blackhole":
                    self.held.append((label, client))
            if mode == "drop":
                client.close()
                continue
            if mode == "blackhole":
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.pairs.append((label, client, upstream))
            threading.Thread(target=self.pump, args=(label, client, upstream), daemon=True).start()
            threading.Thread(target=self.pump, args=(label, upstream, client), daemon=True).start()

    def pump(self, label, src, dst):
        try:
            src.settimeout(0.2)
        except OSError:
            return  # closed by cut() before this thread started
        while True:
            with self.lock:
                mode = self.mode_of(label)
            if mode != "pass":
                return  # held (blackhole) or closed (drop) by cut()
            try:
                data = src.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            with self.lock:
                if self.mode_of(label) != "pass":
                    return  # cut while this was read: not forwarded
            try:
                dst.sendall(data)
            except OSError:
                return

    def cut(self, mode, sources=None):
        """Cuts the connections of `sources` (labels; None: everyone)."""
        assert mode in ("drop", "blackhole")
        keys = [EVERYONE] if sources is None else list(sources)
        with self.lock:
            for k in keys:
                self.cuts[k] = mode
            affected = [p for p in self.pairs if self.mode_of(p[0]) != "pass"]
            self.pairs = [p for p in self.pairs if self.mode_of(p[0]) == "pass"]
            if mode == "blackhole":
                self.held.extend((label, s) for label, *socks in affected for s in socks)
        if mode == "drop":
            for _, *socks in affected:
                for s in socks:
                    _close(s)

    def heal(self, sources=None):
        """Ends the cuts of `sources` (None: every cut)."""
        with self.lock:
            if sources is None:
                self.cuts.clear()
            else:
                for k in sources:
                    self.cuts.pop(k, None)
            release = [s for label, s in self.held if self.mode_of(label) == "pass"]
            self.held = [(label, s) for label, s in self.held if self.mode_of(label) != "pass"]
        for s in release:
            _close(s)

    def close(self):
        self.closed = True
        self.cut("drop")
        self.listener.close()


def _close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
