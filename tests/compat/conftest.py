"""Shared fixtures for the compatibility tests: a real `sluice server`
process on a free 127.0.0.1 port with its own data folder, stopped by PID.

The binary comes from `target/debug/sluice` (built by scripts/test.sh) or
from the SLUICETEST_BIN environment variable.
"""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SLUICETEST_BIN", str(ROOT / "target" / "debug" / "sluice"))


def _port_range():
    """Ports below the kernel's ephemeral range (ip_local_port_range): an
    outgoing connection never takes one of them as its local port, so a
    node restarted on its old port finds it free. Falls back to the
    kernel's choice when the ephemeral range leaves no room below it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if low < 12_000:
        return None
    return range(low - 10_000, low)


_PORTS = _port_range()
_next_port = [None]


def free_port():
    """A port on 127.0.0.1 that nothing listens on and that this process
    has not handed out before."""
    if _PORTS is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    if _next_port[0] is None:
        _next_port[0] = (os.getpid() * 7919) % len(_PORTS)
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port[0] % len(_PORTS)]
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


class Server:
    """A sluice server process; `restart()` keeps the data folder."""

    def __init__(self, data_dir, extra_args=(), env=None):
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.extra_args = list(extra_args)
        self.env = env
        self.proc = None
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self, timeout=30):
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        if self.env:
            env.update(self.env)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [BIN, "server", "--data-dir", str(self.data_dir),
             "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluice exited with {self.proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sluice did not start listening: {self.log()}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def restart(self, sig=signal.SIGTERM):
        code = self.stop(sig)
        self.start()
        return code

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "data").start()
    yield s
    s.stop()


@pytest.fixture
def server_factory(tmp_path):
    """Start servers with extra arguments; all are stopped at the end."""
    started = []

    def make(*extra_args, env=None, name="data"):
        s = Server(tmp_path / name, extra_args, env).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
