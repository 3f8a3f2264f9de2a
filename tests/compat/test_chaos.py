"""The chaos run of chaos.py (20 rounds of random kills, pauses, dropped
and black-holed links on a three-node cluster under the Jepsen workload),
as a test, about 2 minutes. SLUICETEST_CHAOS=0 skips it;
SLUICETEST_CHAOS_ROUNDS changes the count, SLUICETEST_CHAOS_SEED fixes the
seed (the seed is printed either way, so a failure can be replayed)."""
import os
import random

import pytest

import chaos


@pytest.mark.skipif(os.environ.get("SLUICETEST_CHAOS") == "0", reason="SLUICETEST_CHAOS=0")
def test_twenty_rounds_of_chaos_lose_nothing(tmp_path):
    rounds = int(os.environ.get("SLUICETEST_CHAOS_ROUNDS", "20"))
    seed = int(os.environ.get("SLUICETEST_CHAOS_SEED", random.randrange(1 << 32)))
    chaos.run(rounds, seed, tmp_path, say=lambda line: print(line, flush=True))
