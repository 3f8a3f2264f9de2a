"""Smoke test: kcat sees the broker and round-trips a record."""
import subprocess


def test_kcat_metadata_and_roundtrip(server):
    out = subprocess.run(["kcat", "-b", server.bootstrap, "-L"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert "1 brokers" in out
    subprocess.run(["kcat", "-b", server.bootstrap, "-t", "smoke", "-P", "-K:"],
                   input="k:v\n", text=True, timeout=30, check=True)
    got = subprocess.run(["kcat", "-b", server.bootstrap, "-t", "smoke", "-C", "-e",
                          "-f", "%k=%s\n"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    assert got == "k=v\n"
