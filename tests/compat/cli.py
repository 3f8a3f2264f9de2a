"""Driving the `sluice` CLI from the compatibility tests: one-shot commands
(`topic create`, `produce`, `consume --json`) that fail with their stderr in
the message, and a background `sluice consume` whose JSON lines are
collected by a reader thread and which is stopped by PID (SIGTERM)."""
import base64
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from conftest import BIN


def run(args, input=None, timeout=60, check=True):
    """Runs `sluice ARGS` to completion; returns the CompletedProcess
    (stdout/stderr as bytes). With `check`, a non-zero exit or timeout is an
    AssertionError showing the command and its stderr."""
    cmd = [BIN, *map(str, args)]
    try:
        p = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(cmd)} did not finish in {timeout}s\n"
                             f"stderr: {(e.stderr or b'').decode(errors='replace')[-3000:]}\n"
                             f"stdout tail: {(e.stdout or b'')[-1000:]!r}") from None
    if check:
        assert p.returncode == 0, (f"{' '.join(cmd)} exited with {p.returncode}\n"
                                   f"stderr: {p.stderr.decode(errors='replace')[-3000:]}")
    return p


def help_text(*sub):
    p = run([*sub, "--help"], check=False)
    return (p.stdout + p.stderr).decode(errors="replace")


def create_topic(server, topic, partitions):
    run(["topic", "create", topic, "--partitions", partitions,
         "--bootstrap-server", server.bootstrap])


def produce(server, topic, lines, *extra, timeout=60):
    """`sluice produce`: each of `lines` (str or bytes, no newline) on stdin."""
    data = b"".join((l.encode() if isinstance(l, str) else l) + b"\n" for l in lines)
    return run(["produce", "--bootstrap-server", server.bootstrap, "--topic", topic, *extra],
               input=data, timeout=timeout)


# ---- JSON records ------------------------------------------------------------

def _bytes(v, encoding=None):
    """A JSON key/value/header value as bytes (None stays None). Strings are
    UTF-8 unless the record says it used base64."""
    if v is None:
        return None
    if isinstance(v, str):
        if encoding == "base64":
            return base64.b64decode(v)
        return v.encode()
    if isinstance(v, list):  # a byte array
        return bytes(v)
    raise AssertionError(f"unexpected JSON byte value {v!r}")


def _headers(h, encoding=None):
    """Headers as a list of (bytes key, bytes-or-None value), whatever JSON
    shape the CLI chose: a list of pairs, a list of {key, value} objects or
    an object."""
    if h is None:
        return []
    if isinstance(h, dict):
        return [(k.encode(), _bytes(v, encoding)) for k, v in h.items()]
    out = []
    for item in h:
        if isinstance(item, dict):
            out.append((item["key"].encode(), _bytes(item.get("value"), encoding)))
        else:
            k, v = item
            out.append((k.encode(), _bytes(v, encoding)))
    return out


class Record:
    """One `consume --json` line, with key/value/headers as bytes."""

    def __init__(self, line):
        self.raw = line
        o = json.loads(line)
        self.obj = o
        enc = o.get("encoding")
        self.topic = o["topic"]
        self.partition = o["partition"]
        self.offset = o["offset"]
        self.timestamp = o.get("timestamp")
        self.key = _bytes(o.get("key"), enc)
        self.value = _bytes(o.get("value"), enc)
        self.headers = _headers(o.get("headers"), enc)

    def __repr__(self):
        return f"Record({self.raw})"


def parse_json_lines(out):
    text = out.decode() if isinstance(out, bytes) else out
    return [Record(l) for l in text.splitlines() if l.strip()]


def consume_json(server, topic, n, *extra, timeout=60, idle_timeout_ms=20000):
    """`sluice consume --from-beginning --max-messages N --json`; returns the
    parsed records (exactly `n` of them, else AssertionError)."""
    p = run(["consume", "--bootstrap-server", server.bootstrap, "--topic", topic,
             "--from-beginning", "--max-messages", n, "--json",
             "--idle-timeout-ms", idle_timeout_ms, *extra], timeout=timeout)
    recs = parse_json_lines(p.stdout)
    assert len(recs) == n, (f"sluice consume printed {len(recs)} records, expected {n}\n"
                            f"stderr: {p.stderr.decode(errors='replace')[-3000:]}")
    return recs


class BackgroundConsumer:
    """`sluice consume --json ...` running until `stop()`; `records` fills
    as lines arrive on its stdout."""

    def __init__(self, server, topic, *extra, log_dir):
        self.cmd = [BIN, "consume", "--bootstrap-server", server.bootstrap, "--topic", topic,
                    "--json", *map(str, extra)]
        self.stderr_path = Path(log_dir) / f"sluice-consume-{time.time_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self._stderr)
        self.lock = threading.Lock()
        self.records = []
        self.bad_lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.returncode = None

    def _read(self):
        for line in self.proc.stdout:
            if not line.strip():
                continue
            try:
                r = Record(line.decode())
            except (ValueError, KeyError, AssertionError) as e:
                with self.lock:
                    self.bad_lines.append((line, repr(e)))
                continue
            with self.lock:
                self.records.append(r)

    def snapshot(self):
        with self.lock:
            return list(self.records)

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def info(self):
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return (f"sluice consume ({' '.join(self.cmd)}) {state}, "
                f"{len(self.snapshot())} records, bad lines {self.bad_lines[:3]}\n"
                f"stderr: {self.stderr()}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the process (by PID) and waits for it and its output;
        returns the exit code (negative: killed by a signal)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.reader.join(5)
                self.returncode = self.proc.returncode
                raise AssertionError(f"sluice consume ignored {sig!r} for {timeout}s\n"
                                     f"{self.info()}")
        self.reader.join(10)
        self._stderr.close()
        self.returncode = self.proc.returncode
        return self.returncode
