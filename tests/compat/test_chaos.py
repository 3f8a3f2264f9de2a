"""The chaos run of chaos.py (20 rounds of random kills, pauses, dropped
and black-holed links on a three-node cluster under the Jepsen workload),
as a test. Opt-in (SLUICETEST_CHAOS=1): it finds a known, not yet fixed
quorum bug (one run of six on 2026-12-01: a follower's Raft log lacks entries
the leader saw it acknowledge after a SIGKILL, and the leader's openraft
core panics: "follower log reversion is not allowed"; docs/cluster.md),
and a suite that fails at random would hide every other failure.
SLUICETEST_CHAOS_ROUNDS changes the count, SLUICETEST_CHAOS_SEED fixes the
seed (the seed is printed either way)."""
import os
import random

import pytest

import chaos


@pytest.mark.skipif(os.environ.get("SLUICETEST_CHAOS") != "1",
                    reason="opt-in: SLUICETEST_CHAOS=1 (a known quorum bug fails it at times; docs/cluster.md)")
def test_twenty_rounds_of_chaos_lose_nothing(tmp_path):
    rounds = int(os.environ.get("SLUICETEST_CHAOS_ROUNDS", "20"))
    seed = int(os.environ.get("SLUICETEST_CHAOS_SEED", random.randrange(1 << 32)))
    chaos.run(rounds, seed, tmp_path, say=lambda line: print(line, flush=True))
