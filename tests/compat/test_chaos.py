"""The chaos run of chaos.py (20 rounds of random kills, pauses, dropped
and black-holed links on a three-node cluster under the Jepsen workload),
as part of the test suite; SLUICETEST_CHAOS_ROUNDS changes the count,
SLUICETEST_CHAOS_SEED fixes the seed (the seed is printed either way)."""
import os
import random

import chaos


def test_twenty_rounds_of_chaos_lose_nothing(tmp_path):
    rounds = int(os.environ.get("SLUICETEST_CHAOS_ROUNDS", "20"))
    seed = int(os.environ.get("SLUICETEST_CHAOS_SEED", random.randrange(1 << 32)))
    chaos.run(rounds, seed, tmp_path, say=lambda line: print(line, flush=True))
