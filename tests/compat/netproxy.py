"""A small TCP proxy for network-fault tests: listens on a free 127.0.0.1
port and forwards every connection to a target port, until told to fail.

- `cut("drop")`: open connections are closed and new ones closed at once
  (the peer sees resets and refusals quickly);
- `cut("blackhole")`: nothing is forwarded any more in either direction and
  new connections are accepted but never answered (the peer sees only
  timeouts);
- `heal()`: held connections are closed (their peers reconnect) and new
  connections are forwarded again.
"""
import socket
import threading

from conftest import free_port


class Proxy:
    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.mode = "pass"
        self.lock = threading.Lock()
        self.pairs = []  # (client, upstream)
        self.held = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(128)
        self.closed = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                mode = self.mode
            if mode == "drop":
                client.close()
                continue
            if mode == "blackhole":
                with self.lock:
                    self.held.append(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self.pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client), daemon=True).start()

    def pump(self, src, dst):
        try:
            src.settimeout(0.2)
        except OSError:
            return  # closed by cut() before this thread started
        while True:
            with self.lock:
                mode = self.mode
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
                if self.mode != "pass":
                    return  # cut while this was read: not forwarded
            try:
                dst.sendall(data)
            except OSError:
                return

    def cut(self, mode):
        assert mode in ("drop", "blackhole")
        with self.lock:
            self.mode = mode
            pairs, self.pairs = self.pairs, []
            if mode == "blackhole":
                self.held.extend(s for pair in pairs for s in pair)
        if mode == "drop":
            for pair in pairs:
                for s in pair:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()

    def heal(self):
        with self.lock:
            self.mode = "pass"
            held, self.held = self.held, []
        for s in held:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.closed = True
        self.cut("drop")
        self.listener.close()
