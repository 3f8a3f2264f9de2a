"""The benchmark runner (scripts/bench.py, issue #14) in its smoke mode:
every step runs (limits, both clients' produce shapes, consume, end-to-end
latency, memory, the three-node cluster) and prints its table. The figures
themselves are never checked: they belong in docs/benchmarks.md."""
import subprocess
import sys
from pathlib import Path

from conftest import BIN

ROOT = Path(__file__).resolve().parent.parent.parent


def test_bench_runner_smoke():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--smoke", "--no-docs", "--bin", BIN],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # The results table runs from its header to the first line that is not
    # a table row; the targets table follows it.
    lines = out.stdout.splitlines()
    start = lines.index("| section | shape | sluice | librdkafka | note |")
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    assert "| target | this run | met |" in lines[start + len(table):], out.stdout[-3000:]
    sections = {line.split("|")[1].strip() for line in table[2:]}
    assert sections == {"limits", "produce", "consume", "e2e", "memory", "rf=3"}, sections
    # 2 sizes x 2 acks x 2 partition counts x 2 producer counts, both clients.
    produce = [line for line in table if line.startswith("| produce |")]
    assert len(produce) == 16, produce
    assert all("rec/s" in line.split("|")[3] and "rec/s" in line.split("|")[4] for line in produce), produce
    limits = [line.split("|")[2].strip() for line in table if line.startswith("| limits |")]
    assert "loopback TCP, sendfile from the page cache" in limits, limits
    # End-to-end latency at 5, 20 and 50 % of the peak, on one node and on three.
    e2e = [line for line in table if "% of peak)" in line]
    assert len(e2e) == 6, e2e
