#!/usr/bin/env python3
"""The benchmark runner (issue #14): how close Sluice gets to what this
machine can do, next to librdkafka (confluent-kafka) in the same run.

    scripts/bench.sh                 # release build, full run, rewrites docs/benchmarks.md
    scripts/bench.py --smoke --bin target/debug/sluice --no-docs   # seconds; what the test suite runs

Measures, in this order, and prints one table:
- the limits: loopback TCP (`sluice perf loopback`; iperf3 too when it is
  installed), the same bytes sent with sendfile(2) from a page-cache file
  over loopback (`--sendfile-dir`: how a broker serves a fetch, the bytes
  alone) and sequential writes of the same bytes into the broker's data
  folder, without and with fdatasync at the end (`sluice perf disk`, best
  of two runs), and once after an idle pause (cold memory: see
  `limits`);
- against a fresh single `sluice server`: produce of 1 KiB and 100 B
  records, acks=1 and acks=all, 1 and 16 partitions, 1 and 4 producers,
  through `sluice perf produce` and through librdkafka (one process per
  producer); broker CPU seconds per GB ingested (utime+stime from
  /proc/<pid>/stat around each run) for each; each run (and each e2e run)
  follows a write and delete of as many bytes in the data folder's file
  system, so that every run's page cache grows into warm memory (`warm`);
- consume from the page cache (`sluice perf consume`, and librdkafka);
- end-to-end latency percentiles (`sluice perf e2e`) at 5, 20 and 50 % of
  the peak produce rate measured above (the target is set at 50 %), three
  5-second runs at each, the run with the median p99 shown;
- broker resident memory (VmRSS) before and after a --gb GB produce run;
- on a local three-node cluster (tests/compat/cluster.py): produce with
  acks=all to a replication factor 3 topic (min.insync.replicas=2) of 16
  and of 1 partition, both clients, and end-to-end latency at 5, 20 and
  50 % of the one-partition peak (the e2e topic has one partition, as on
  one node; three runs each).

Only delivered records count: `sluice perf` reports acknowledged ones, and
the librdkafka producer counts delivery callbacks without an error. The
figures are never pass/fail: --smoke only checks that every step runs.
Without --no-docs, the section between the `bench-suite` markers in
docs/benchmarks.md is replaced with the table and the machine it ran on.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench-suite:begin -->", "<!-- bench-suite:end -->"
MB = 1024 * 1024
# Both clients produce with the same batching (librdkafka's settings below).
BATCH_SIZE = 1 << 20
LINGER_MS = 5
# End-to-end latency runs, as shares of the peak produce rate: the target
# is set at 50 %; the lower ones show where the latency holds.
E2E_SHARES = (0.05, 0.2, 0.5)
# Runs per share, each on a new topic: one run's p99 moves by tens of
# milliseconds with the VM's memory (docs/benchmarks.md), so the table
# shows the run with the median p99 and lists every run's p99.
E2E_RUNS = 3
E2E_SECONDS = 5
# The brokers remove a deleted topic's folders at once rather than after
# Kafka's default of 60 s (log.segment.delete.delay.ms): each shape's
# topics are deleted after it, and freeing gigabytes of files costs the
# broker CPU that would otherwise land in a later shape's figures.
DELETE_DELAY_MS = 0
# Idle pause before the cold-memory write (the host reclaims free guest
# memory after a few seconds).
COLD_IDLE_S = 25


def cpu_note(r):
    """The CPU seconds per GB a `sluice perf loopback|disk` run spent."""
    g = r.get("cpu_s_per_gb")
    return "" if g is None else f"{g:.2f} cpu-s/GB"


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_json(cmd, timeout):
    """Runs a command that prints one JSON object as its last line."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_seconds(pid):
    """utime + stime of a process (clock ticks converted to seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_times():
    """(busy, total) clock ticks of all cores since boot, from /proc/stat
    (busy leaves out idle and iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(ticks[:8])  # guest time is counted in user already
    return total - ticks[3] - ticks[4], total


def busy_share(before, after):
    """The share of all cores busy between two `cpu_times` readings."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return busy / total if total > 0 else float("nan")


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    """A fresh single `sluice server` on a free port, stopped by PID."""

    def __init__(self, binary, folder):
        self.folder = Path(folder)
        self.data = self.folder / "data"
        self.port = free_port()
        self.log = open(self.folder / "server.log", "ab")
        env = dict(os.environ, RUST_LOG="warn")
        self.proc = subprocess.Popen(
            [binary, "server", "--data-dir", str(self.data),
             "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}",
             "--override", f"log.segment.delete.delay.ms={DELETE_DELAY_MS}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_listening(self.port, self.proc)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait_listening(port, proc, timeout=30):
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


class Runner:
    def __init__(self, args):
        self.args = args
        self.bin = str(Path(args.bin).resolve())
        self.rows = []  # (section, shape, sluice, librdkafka, note)
        self.produced = {}  # (size, acks, partitions, producers) -> produce_pair's result
        self.consume_mbs = None
        self.e2e_p99 = {}
        self.e2e_load = {}  # rf -> (asked rate, delivered rate, busy share) of the 50 % run shown
        self.rss = None
        self.memory_cpu_gb = None
        self.smoke = args.smoke
        self.warm_dir = None  # set by `limits`

    # -- helpers ---------------------------------------------------------
    def sluice(self, *argv, timeout=900):
        return run_json([self.bin, *argv], timeout)

    def create_topic(self, bootstrap, partitions, rf=1, configs=()):
        name = f"bench-{uuid.uuid4().hex[:8]}"
        cmd = [self.bin, "topic", "create", name, "--partitions", str(partitions),
               "--replication-factor", str(rf), "--bootstrap-server", bootstrap]
        for c in configs:
            cmd += ["--config", c]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        return name

    def delete_topic(self, bootstrap, name):
        subprocess.run([self.bin, "topic", "delete", name, "--bootstrap-server", bootstrap],
                       check=True, capture_output=True, timeout=120)

    def row(self, section, shape, sluice, rdkafka="", note=""):
        self.rows.append((section, shape, sluice, rdkafka, note))
        print(f"  {section:<10} {shape:<44} {sluice:<34} {rdkafka:<30} {note}", flush=True)

    def warm(self, nbytes):
        """Writes `nbytes` (at most the limits' size) into a file beside the
        data folder (same file system) and deletes it, right before a produce or
        e2e run: the run's page cache then grows into memory just freed
        (warm), as a broker's does once its page cache fills memory, and
        not into memory this VM's host took back during an idle moment
        (cold, design 026), whose cost depends on what ran before. Every
        client's run starts from that same state."""
        nbytes = int(min(max(nbytes, MB), self.args.limit_mb * MB))
        self.sluice("perf", "disk", "--dir", str(self.warm_dir), "--bytes", str(nbytes), "--json")

    def records_for(self, size):
        """Records per produce run: --mb megabytes of values."""
        n = int(self.args.mb * MB / size)
        return max(n, 100)

    # -- limits ----------------------------------------------------------
    def limits(self, folder):
        nbytes = str(int(self.args.limit_mb * MB))
        lo = self.sluice("perf", "loopback", "--bytes", nbytes, "--json")
        self.loopback = lo["mb_per_sec"]
        note = cpu_note(lo)
        if shutil.which("iperf3") and not self.smoke:
            note += f"; iperf3 {iperf3():.0f} MB/s"
        self.row("limits", "loopback TCP", f"{self.loopback:.0f} MB/s", "", note)
        self.loopback_cpu_gb = lo.get("cpu_s_per_gb")
        folder.mkdir(parents=True, exist_ok=True)
        # The bytes of a fetch: sendfile(2) from the page cache over loopback,
        # as the broker serves a consumer (no protocol, no decoding).
        sf = self.sluice("perf", "loopback", "--bytes", nbytes, "--sendfile-dir", str(folder), "--json")
        self.sendfile = sf["mb_per_sec"]
        self.row("limits", "loopback TCP, sendfile from the page cache", f"{self.sendfile:.0f} MB/s", "",
                 cpu_note(sf))
        # Beside the broker's data folder (same file system), not in it.
        self.warm_dir = folder.parent / "warm"
        self.warm_dir.mkdir(parents=True, exist_ok=True)
        # Cold memory: on a virtual machine whose host takes back guest
        # memory left free for a few seconds (free page reporting), the
        # first write into each page-cache page then faults on the host.
        # A write after an idle pause measures that; the broker's page
        # cache grows into such memory too, so its produce figures fall
        # between the cold and the warm write.
        if not self.smoke:
            time.sleep(COLD_IDLE_S)
        cold = self.sluice("perf", "disk", "--dir", str(folder), "--bytes", nbytes, "--json")
        self.disk_cold = cold["mb_per_sec"]
        self.disk_cold_cpu_gb = cold.get("cpu_s_per_gb")
        # Best of two: the first write of a run also pays for reclaiming
        # page cache that earlier work left (that cost moves between runs).
        def disk(*extra):
            runs = [self.sluice("perf", "disk", "--dir", str(folder), "--bytes", nbytes, *extra, "--json")
                    for _ in range(2)]
            best = max(runs, key=lambda r: r["mb_per_sec"])
            best["runs"] = " and ".join(f"{r['mb_per_sec']:.0f}" for r in runs)
            return best
        d = disk()
        ds = disk("--fdatasync")
        self.disk = d["mb_per_sec"]
        self.disk_sync = ds["mb_per_sec"]
        # The kernel's own cost of writing a GB through the page cache: a
        # floor under the broker's CPU per GB ingested.
        self.disk_cpu_gb = d.get("cpu_s_per_gb")
        self.row("limits", f"sequential write {int(self.args.limit_mb)} MiB (best of 2)", f"{self.disk:.0f} MB/s", "",
                 f"{cpu_note(d)}; runs: {d['runs']} MB/s")
        self.row("limits", "  + fdatasync at the end", f"{self.disk_sync:.0f} MB/s", "",
                 f"{cpu_note(ds)}; runs: {ds['runs']} MB/s")
        self.row("limits", f"sequential write {int(self.args.limit_mb)} MiB, cold memory "
                 f"(after {0 if self.smoke else COLD_IDLE_S} s idle)", f"{self.disk_cold:.0f} MB/s", "",
                 cpu_note(cold))

    # -- single node -----------------------------------------------------
    def produce_pair(self, bootstrap, pid, size, acks, partitions, producers, section="produce", rf=1,
                     configs=(), keep=False):
        n = self.records_for(size)
        out = {}
        for client in ("sluice", "librdkafka"):
            topic = self.create_topic(bootstrap, partitions, rf, configs)
            self.warm(n * size * producers * rf)
            before = cpu_seconds(pid) if pid else None
            if client == "sluice":
                r = self.sluice("perf", "produce", "--topic", topic, "--num-records", str(n),
                                "--record-size", str(size), "--acks", acks, "--producers", str(producers),
                                "--batch-size", str(BATCH_SIZE), "--linger-ms", str(LINGER_MS),
                                "--json", "--bootstrap-server", bootstrap)
                rec = r["records"]
                rate = r.get("records_per_sec")
                mbs = r.get("mb_per_sec")
                p99 = (r.get("latency_ms") or {}).get("p99")
            else:
                rec, rate, mbs, p99 = confluent_produce(bootstrap, topic, n, size, acks, producers)
            cpu = (cpu_seconds(pid) - before) if pid else None
            gb = rec * size / 1e9
            out[client] = (rec, rate, mbs, p99, cpu / gb if cpu is not None and gb > 0 else None, topic)
        if not keep:
            # Each shape writes --mb MiB per client: the disk would fill.
            for client in out:
                self.delete_topic(bootstrap, out[client][5])
        shape = f"{'1 KiB' if size == 1024 else f'{size} B'} acks={acks} p={partitions} x{producers}"
        self.row(section, shape, fmt_produce(out["sluice"]), fmt_produce(out["librdkafka"]))
        return out

    def single_node(self, folder):
        server = Server(self.bin, folder / "single")
        try:
            self.server_pid = server.pid
            peak = None
            for size in (1024, 100):
                for acks in ("1", "all"):
                    for partitions in (1, 16):
                        for producers in (1, 4):
                            shape = (size, acks, partitions, producers)
                            out = self.produce_pair(server.bootstrap, server.pid, size, acks, partitions,
                                                    producers, keep=shape == (1024, "1", 16, 1))
                            self.produced[shape] = out
                            if shape == (1024, "1", 1, 1):
                                peak = out["sluice"][1]
                            if shape == (1024, "1", 16, 1):
                                # Read back at once, while it is in the page cache.
                                self.consume(server.bootstrap, out["sluice"][5], out["sluice"][0])
                                for client in out:
                                    self.delete_topic(server.bootstrap, out[client][5])
            self.e2e(server.bootstrap, peak, "e2e", "1 node, 1 KiB acks=1 p=1")
            self.memory(server)
        finally:
            server.stop()

    def consume(self, bootstrap, topic, n):
        c = self.sluice("perf", "consume", "--topic", topic, "--num-records", str(n), "--json",
                        "--bootstrap-server", bootstrap)
        rk = confluent_consume(bootstrap, topic, n)
        self.consume_mbs = c["mb_per_sec"]
        self.row("consume", f"page cache, 1 KiB p=16, {n} records",
                 f"{c['mb_per_sec']:.0f} MB/s ({100 * c['mb_per_sec'] / self.loopback:.0f}% of loopback)",
                 f"{rk:.0f} MB/s")

    def e2e(self, bootstrap, peak, section, shape, rf=1):
        """End-to-end latency at E2E_SHARES of the peak rate, lowest first:
        the target is the 50 % run; the lower rates show how far the
        latency holds below it. Each share runs E2E_RUNS times (once in
        smoke mode), each on a new topic after a warm-up; the row shows
        the run with the median p99."""
        for share in E2E_SHARES:
            rate = max(int((peak or 2000) * share), 100)
            n = max(min(rate * (2 if self.smoke else E2E_SECONDS), 2_000_000), 200)
            runs = []
            for _ in range(1 if self.smoke else E2E_RUNS):
                topic = self.create_topic(bootstrap, 1, rf, ("min.insync.replicas=2",) if rf == 3 else ())
                self.warm(n * 1024 * rf)
                t0 = cpu_times()
                r = self.sluice("perf", "e2e", "--topic", topic, "--num-records", str(n), "--record-size", "1024",
                                "--throughput", str(rate), "--acks", "1" if rf == 1 else "all",
                                "--batch-size", str(BATCH_SIZE), "--json",
                                "--bootstrap-server", bootstrap)
                busy = busy_share(t0, cpu_times())
                self.delete_topic(bootstrap, topic)
                runs.append(dict(r.get("latency_ms") or {}, rate=r.get("records_per_sec"), busy=busy))
            nan = float("nan")
            # A run without a p99 sorts last (a NaN key would leave the
            # order undefined).
            runs.sort(key=lambda lat: lat.get("p99") if lat.get("p99") is not None else float("inf"))
            lat = runs[len(runs) // 2]
            if share == 0.5:
                self.e2e_p99[rf] = lat.get("p99")
                self.e2e_load[rf] = (rate, lat.get("rate"), lat.get("busy"))
            # A run that falls behind the asked rate measures queueing; the
            # share of both cores busy during it (clients and broker(s)
            # together, from /proc/stat) shows how full the machine was.
            note = (f"{lat.get('rate') or nan:,.0f} rec/s delivered, "
                    f"{100 * lat.get('busy', nan):.0f}% of the cores busy")
            if len(runs) > 1:
                note += "; p99 of each run: " + ", ".join(f"{x.get('p99') or nan:.2f}" for x in runs) + " ms"
            self.row(section, f"{shape}, {rate} rec/s ({100 * share:g}% of peak)",
                     f"p50 {lat.get('p50') or nan:.2f} p99 {lat.get('p99') or nan:.2f} "
                     f"p99.9 {lat.get('p999') or nan:.2f} ms", "", note)

    def memory(self, server):
        size = 1024
        n = int(self.args.gb * 1e9 / size)
        topic = self.create_topic(server.bootstrap, 4)
        before = rss_mib(server.pid)
        cpu0 = cpu_seconds(server.pid)
        r = self.sluice("perf", "produce", "--topic", topic, "--num-records", str(n), "--record-size",
                        str(size), "--acks", "1", "--json", "--bootstrap-server", server.bootstrap,
                        timeout=3600)
        cpu = cpu_seconds(server.pid) - cpu0
        after = rss_mib(server.pid)
        gb = r["records"] * size / 1e9
        self.rss = (before, after)
        self.memory_cpu_gb = cpu / gb if gb > 0 else None
        self.row("memory", f"{gb:.2f} GB produced (1 KiB, p=4)",
                 f"RSS {before:.0f} -> {after:.0f} MiB", "", f"{cpu / gb:.2f} cpu-s/GB")

    # -- three nodes -------------------------------------------------------
    def cluster(self, folder):
        os.environ["SLUICETEST_BIN"] = self.bin
        sys.path.insert(0, str(ROOT / "tests" / "compat"))
        from cluster import Cluster  # noqa: E402
        os.environ["RUST_LOG"] = "warn"
        c = Cluster(folder / "cluster", extra={"log.segment.delete.delay.ms": str(DELETE_DELAY_MS)})
        c.start()
        c.wait_for(lambda: len(c.metadata().brokers) == 3, "three brokers")
        try:
            configs = ("min.insync.replicas=2",)
            self.produce_pair(c.bootstrap, None, 1024, "all", 16, 1, section="rf=3", rf=3, configs=configs)
            # The e2e runs use one partition, as on one node, so their peak
            # is that of one partition too: a follower fetches at most
            # replica.fetch.max.bytes (1 MiB) of a partition per round
            # trip, so one partition replicates less than sixteen do.
            one = self.produce_pair(c.bootstrap, None, 1024, "all", 1, 1, section="rf=3", rf=3,
                                    configs=configs)
            self.e2e(c.bootstrap, one["sluice"][1], "rf=3", "3 nodes, 1 KiB acks=all p=1", rf=3)
        finally:
            c.stop()

    # -- output ----------------------------------------------------------
    def targets(self):
        """Issue #14's targets as ratios from this run: (target, figure, met)."""
        out = []
        nan = float("nan")

        def sluice(shape, i):
            r = self.produced.get(shape)
            return r["sluice"][i] if r and r["sluice"][i] is not None else nan

        cpu = sluice((1024, "1", 1, 1), 4)
        floor = self.disk_cpu_gb if self.disk_cpu_gb is not None else nan
        cold = self.disk_cold_cpu_gb if self.disk_cold_cpu_gb is not None else nan
        out.append(("broker CPU per GB ingested <= 0.4 s (1 KiB acks=1 p=1 x1)",
                    f"{cpu:.2f} cpu-s/GB (the page-cache write alone: {floor:.2f} warm, {cold:.2f} cold)",
                    cpu <= 0.4))
        mbs = sluice((1024, "1", 1, 1), 2)
        # Every produced byte crosses loopback and is written into the page
        # cache: the CPU those two cost alone (the limits rows) caps what
        # the machine's cores can ingest, before any client or broker work.
        moved = (self.loopback_cpu_gb or nan) + (self.disk_cpu_gb or nan)
        cap = (os.cpu_count() or 1) / moved * 1e9 / MB
        out.append(("produce 1 KiB acks=1 >= 70% of the sequential write rate",
                    f"{mbs:.0f} MB/s = {100 * mbs / self.disk:.0f}% of {self.disk:.0f} MB/s "
                    f"(cold memory: {self.disk_cold:.0f} MB/s; loopback plus the page-cache write cost "
                    f"{moved:.2f} cpu-s/GB, so {os.cpu_count()} cores move at most {cap:.0f} MB/s = "
                    f"{100 * cap / self.disk:.0f}% of the write rate)",
                    mbs >= 0.7 * self.disk))
        cons = self.consume_mbs if self.consume_mbs is not None else nan
        out.append(("consume from page cache >= 50% of loopback",
                    f"{cons:.0f} MB/s = {100 * cons / self.loopback:.0f}% of {self.loopback:.0f} MB/s "
                    f"(sendfile from the page cache alone: {self.sendfile:.0f} MB/s = "
                    f"{100 * self.sendfile / self.loopback:.0f}% of loopback; the consume is "
                    f"{100 * cons / self.sendfile:.0f}% of that)",
                    cons >= 0.5 * self.loopback))
        rate = sluice((100, "1", 1, 1), 1)
        out.append(("100 B records >= 1.5M rec/s, one producer", f"{rate:,.0f} rec/s", rate >= 1.5e6))
        for rf, limit in ((1, 1.0), (3, 5.0)):
            p99 = self.e2e_p99.get(rf)
            p99 = p99 if p99 is not None else nan
            runs = "" if self.smoke else f" (median of {E2E_RUNS} runs)"
            asked, got, busy = self.e2e_load.get(rf, (nan, nan, nan))
            load = (f"; that run delivered {got or nan:,.0f} of {asked:,.0f} rec/s asked, "
                    f"with {100 * (busy if busy is not None else nan):.0f}% of the cores busy")
            out.append((f"e2e p99 < {limit:g} ms at 50% of peak, rf={rf}", f"{p99:.2f} ms{runs}{load}",
                        p99 < limit))
        if self.rss:
            before, after = self.rss
            out.append(("broker memory flat over the long run", f"RSS {before:.0f} -> {after:.0f} MiB",
                        after <= before * 1.5 + 64))
        return out

    def table(self):
        lines = ["| section | shape | sluice | librdkafka | note |", "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append("| " + " | ".join(x.replace("|", "/") for x in r) + " |")
        return "\n".join(lines)


def fmt_produce(r):
    rec, rate, mbs, p99, cpu_gb, _ = r
    s = f"{rate:,.0f} rec/s {mbs:.1f} MB/s"
    if p99 is not None:
        s += f" p99 {p99:.0f} ms"
    if cpu_gb is not None:
        s += f" {cpu_gb:.2f} cpu-s/GB"
    return s


def iperf3():
    port = free_port()
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = run_json(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"], 60)
        return out["end"]["sum_received"]["bytes"] / out["end"]["sum_received"]["seconds"] / MB
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()


# -- librdkafka, each producer in its own process --------------------------
def confluent_produce(bootstrap, topic, n, size, acks, producers):
    per = [n // producers + (1 if i < n % producers else 0) for i in range(producers)]
    procs = [subprocess.Popen([sys.executable, __file__, "_rdkafka-produce", bootstrap, topic, str(k), str(size),
                               acks], stdout=subprocess.PIPE, text=True) for k in per]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"librdkafka producer failed: {out}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    delivered = sum(r["delivered"] for r in results)
    secs = max(r["seconds"] for r in results)
    return delivered, delivered / secs, delivered * size / MB / secs, None


def rdkafka_produce_main(bootstrap, topic, n, size, acks):
    from confluent_kafka import Producer
    n, size = int(n), int(size)
    ok = [0]
    failed = [0]

    def cb(err, _msg):
        if err is None:
            ok[0] += 1
        else:
            failed[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": LINGER_MS,
                  "batch.size": BATCH_SIZE, "queue.buffering.max.kbytes": 1 << 20,
                  "enable.idempotence": acks == "all"})
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(600)
    secs = time.perf_counter() - start
    print(json.dumps({"delivered": ok[0], "failed": failed[0], "seconds": secs}))


def confluent_consume(bootstrap, topic, n):
    out = subprocess.run([sys.executable, __file__, "_rdkafka-consume", bootstrap, topic, str(n)],
                         check=True, capture_output=True, text=True, timeout=1800).stdout
    return json.loads(out.strip().splitlines()[-1])["mb_per_sec"]


def rdkafka_consume_main(bootstrap, topic, n):
    from confluent_kafka import Consumer
    n = int(n)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800})
    c.subscribe([topic])
    got = 0
    nbytes = 0
    start = None
    deadline = time.time() + 600
    while got < n and time.time() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error():
                continue
            if start is None:
                start = time.perf_counter()
            got += 1
            nbytes += len(m.value() or b"")
    secs = time.perf_counter() - (start or time.perf_counter())
    c.close()
    print(json.dumps({"records": got, "mb_per_sec": nbytes / MB / max(secs, 1e-9)}))


def machine():
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return (f"{os.cpu_count()} cores ({model}), {int(mem) / 1024 / 1024:.0f} GiB RAM, "
            f"Linux {platform.release()}, load average before the run "
            f"{os.getloadavg()[0]:.1f}")


def rewrite_doc(text):
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        doc = doc.rstrip() + f"\n\n## Benchmark runner (`scripts/bench.sh`)\n\n{BEGIN}\n{END}\n"
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_rdkafka-produce":
        return rdkafka_produce_main(*sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "_rdkafka-consume":
        return rdkafka_consume_main(*sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "sluice"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every step runs")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--mb", type=float, default=512, help="MiB of values per produce run")
    ap.add_argument("--limit-mb", type=float, default=2048, help="MiB for the loopback and disk limits")
    ap.add_argument("--gb", type=float, default=10, help="GB produced for the memory figure")
    ap.add_argument("--no-cluster", action="store_true", help="skip the three-node runs")
    args = ap.parse_args()
    if args.smoke:
        args.mb, args.limit_mb, args.gb = 0.2, 8, 0.002
    if not Path(args.bin).exists():
        sys.exit(f"--bin {args.bin}: no such file (build it: cargo build --release -p sluice-cli)")
    r = Runner(args)
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        folder = Path(tmp)
        r.limits(folder / "single" / "data")
        r.single_node(folder)
        if not args.no_cluster:
            r.cluster(folder)
    table = r.table()
    targets = "\n".join(["| target | this run | met |", "|---|---|---|"] +
                         [f"| {t} | {f} | {'yes' if ok else 'no'} |" for t, f, ok in r.targets()])
    table = (f"Both producers use {BATCH_SIZE >> 20} MiB batches and linger.ms={LINGER_MS}; "
             f"CPU-s/GB is the broker's.\n\n{table}\n\nIssue #14's targets, from this run:\n\n{targets}")
    print()
    print(table)
    if not args.no_docs and not args.smoke:
        took = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
        rewrite_doc(f"Run {started:%Y-%m-%d %H:%M} UTC, {took:.0f} s, `{' '.join(sys.argv)}`; "
                    f"{machine()}. Client and broker share the machine.\n\n{table}")
        print(f"\nrewrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
