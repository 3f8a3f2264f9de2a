#!/usr/bin/env python3
"""The cost of sequential writes into the page cache and with O_DIRECT
(docs/design/026-page-cache-writes.md).

Usage: scripts/write_cost.py FOLDER GIB MODE...   (MODE: buffered | direct)

Writes files of GIB GiB sequentially in 1 MiB pwrites, buffered or
O_DIRECT, keeping each file (so later buffered writes must reclaim the
earlier ones' pages once free memory is used up); print wall time, this
process's CPU, and the whole machine's busy CPU (kswapd's reclaim and the
flusher threads included). Files are removed at the end."""
import mmap, os, resource, sys, time

def machine_busy():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")

def meminfo():
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        m[k] = int(v.split()[0]) // 1024
    return f"free {m['MemFree']} MiB, cached {m['Cached']} MiB, dirty {m['Dirty']} MiB"

def run(path, gib, direct):
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags, 0o644)
    buf = mmap.mmap(-1, 1 << 20)
    buf.write(os.urandom(1 << 20))
    before = meminfo()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    m0 = machine_busy()
    t0 = time.monotonic()
    off = 0
    for _ in range(gib * 1024):
        off += os.pwritev(fd, [buf], off)
    t1 = time.monotonic()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    m1 = machine_busy()
    os.close(fd)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    gb = off / 1e9
    print(f"{'O_DIRECT' if direct else 'buffered'} {path}: {gib} GiB in {t1-t0:.2f} s = {gb/(t1-t0)*1000:.0f} MB/s; "
          f"writer {cpu/gb:.2f} cpu-s/GB; machine {(m1-m0)/gb:.2f} busy cpu-s/GB; before: {before}", flush=True)

if len(sys.argv) < 4 or any(m not in ("buffered", "direct") for m in sys.argv[3:]):
    sys.exit("usage: write_cost.py FOLDER GIB (buffered|direct)...")
folder, gib = sys.argv[1], int(sys.argv[2])
paths = []
try:
    for i, mode in enumerate(sys.argv[3:]):
        p = os.path.join(folder, f"w{i}")
        paths.append(p)
        run(p, gib, mode == "direct")
finally:
    for p in paths:
        if os.path.exists(p):
            os.unlink(p)
