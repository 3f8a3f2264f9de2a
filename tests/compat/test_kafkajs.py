"""kafkajs 2.x (npm, installed into tests/kafkajs/node_modules by
scripts/test.sh) against a real `sluice server`. kafkajs speaks only old,
non-flexible API versions (Produce v7, Fetch v11, ListOffsets v3, Metadata
v6, JoinGroup v5, ...), so these checks guard the low end of the broker's
version ranges. Each node script (tests/kafkajs/*.js) runs its checks in
order, printing `ok NAME` per check, and exits non-zero with the failure."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

KAFKAJS = Path(__file__).resolve().parents[1] / "kafkajs"


def run_node(server, script, timeout=180):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/test.sh needs node and npm)"
    assert (KAFKAJS / "node_modules" / "kafkajs").is_dir(), (
        "kafkajs is not installed: run `npm ci` in tests/kafkajs (scripts/test.sh does)")
    env = dict(os.environ, SLUICE_BOOTSTRAP=server.bootstrap)
    p = subprocess.run([node, str(KAFKAJS / script)], cwd=KAFKAJS, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    assert p.returncode == 0, (f"{script} failed ({p.returncode})\nstdout:\n{out}\n"
                               f"stderr:\n{err[-6000:]}\nserver log:\n{server.log()}")
    return [l for l in out.splitlines() if l.startswith("ok ")]


@pytest.fixture
def js_server(server_factory):
    # No initial rebalance delay: the scripts form many groups.
    return server_factory("--override", "group.initial.rebalance.delay.ms=0")


def test_producer(js_server):
    ok = run_node(js_server, "producer.js")
    assert [l.split()[1] for l in ok] == ["acks_keys_headers_partitions", "gzip_batches_and_null_values"]


def test_consumer_group(js_server):
    ok = run_node(js_server, "consumer.js")
    assert [l.split()[1] for l in ok] == ["group_rebalance_and_commits"]


def test_admin(js_server):
    ok = run_node(js_server, "admin.js")
    assert [l.split()[1] for l in ok] == ["topics", "offsets_and_groups"]


def test_fetch_range(js_server):
    ok = run_node(js_server, "fetch.js")
    assert [l.split()[1] for l in ok] == ["range_from_beginning_and_seek"]


def test_transactions(js_server):
    ok = run_node(js_server, "transactions.js")
    assert [l.split()[1] for l in ok] == ["commit_abort_send_offsets", "zombie_is_fenced"]
