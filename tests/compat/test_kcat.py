"""kcat (librdkafka 2.0) against sluice: metadata, and 100,000 keyed records
with headers per compression codec, produced from a file and consumed back
byte for byte."""
import random
import re
import struct
import subprocess

import pytest

import wire
from conftest import Server

N = 100_000
KEY_SEP = b"\t"
HEADERS = [("trace", "t-1"), ("source", "kcat")]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
FIND_COORDINATOR = 10
# Any byte but the record delimiter (\n) and the key separator (\t): binary
# keys and values, including NUL and bytes >= 0x80.
ALPHABET = bytes(b for b in range(256) if b not in (0x0A, 0x09))


@pytest.fixture(scope="module")
def kcat_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("kcat") / "data").start()
    yield s
    s.stop()


def kcat(server, *args, input=None, timeout=120):
    p = subprocess.run(["kcat", "-b", server.bootstrap, "-m", "10", *args], input=input,
                       capture_output=True, timeout=timeout)
    assert p.returncode == 0, (p.returncode, p.stderr.decode(errors="replace")[-2000:],
                               server.log())
    return p


def records(seed):
    rng = random.Random(seed)
    out = []
    for i in range(N):
        key = b"k%06d-" % i + bytes(rng.choices(ALPHABET, k=rng.randrange(0, 8)))
        # Half the value compressible text, half random bytes.
        value = (b"value %d " % i) * rng.randrange(0, 4) + bytes(
            rng.choices(ALPHABET, k=rng.randrange(0, 40)))
        out.append((key, value))
    return out


def batch_codecs(partition_dir):
    """The compression codecs of every v2 batch in the partition's segments,
    the number of records in them, and the records per codec."""
    codecs, count, per_codec = set(), 0, {}
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0:
                break  # preallocated tail
            magic = data[pos + 16]
            assert magic == 2, (seg, pos, magic)
            attrs = struct.unpack_from(">h", data, pos + 21)[0]
            n = struct.unpack_from(">i", data, pos + 57)[0]
            codecs.add(attrs & 7)
            count += n
            per_codec[attrs & 7] = per_codec.get(attrs & 7, 0) + n
            pos += 12 + length
    return codecs, count, per_codec


def test_metadata(kcat_server):
    kcat(kcat_server, "-t", "meta-topic", "-P", input=b"x\n")
    out = kcat(kcat_server, "-L").stdout.decode()
    assert "1 brokers:" in out, out
    assert re.search(rf"broker \d+ at 127\.0\.0\.1:{kcat_server.port}", out), out
    assert '1 topics:' in out or 'topics:' in out, out
    assert re.search(r'topic "meta-topic" with 1 partitions:', out), out
    assert re.search(r"partition 0, leader \d+, replicas: \d+, isrs: \d+", out), out
    assert "__cluster_metadata" not in out
    # One topic only.
    one = kcat(kcat_server, "-L", "-t", "meta-topic").stdout.decode()
    assert 'topic "meta-topic" with 1 partitions' in one and "1 topics:" in one, one


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip(kcat_server, tmp_path, codec):
    topic = f"kcat-{codec}"
    recs = records(codec)
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(k + KEY_SEP + v + b"\n" for k, v in recs))
    hdr_args = [a for k, v in HEADERS for a in ("-H", f"{k}={v}")]
    kcat(kcat_server, "-P", "-t", topic, "-K", "\\t", "-z", codec, *hdr_args,
         "-X", "linger.ms=20", "-l", str(src))

    # The batches on disk carry the codec (the broker keeps the producer's
    # compression by default), so the codec really was exercised. librdkafka
    # only uses lz4 with brokers that offer FindCoordinator (its stand-in
    # for "Kafka 0.8.2 or later"), so until the group coordinator exists
    # the lz4 producer sends uncompressed batches.
    codecs, count, per_codec = batch_codecs(kcat_server.data_dir / f"{topic}-0")
    lz4_withheld = codec == "lz4" and FIND_COORDINATOR not in wire.advertised(kcat_server)
    want = CODEC_IDS["none" if lz4_withheld else codec]
    # librdkafka sends a batch uncompressed when compressing does not make it
    # smaller (a few records when linger.ms expires on a loaded machine):
    # allow those, but the codec must carry the bulk.
    assert want in codecs and codecs <= {want, 0} and count == N, (codecs, count)
    assert per_codec[want] >= N * 0.9, per_codec

    out = kcat(kcat_server, "-C", "-t", topic, "-e", "-o", "beginning",
               "-f", "%p|%o|%K|%k|%S|%s|%h\\n").stdout
    hdrs = ",".join(f"{k}={v}" for k, v in HEADERS).encode()
    expected = b"".join(b"0|%d|%d|%s|%d|%s|%s\n" % (i, len(k), k, len(v), v, hdrs)
                        for i, (k, v) in enumerate(recs))
    if out != expected:
        at = next((i for i, (a, b) in enumerate(zip(out, expected)) if a != b),
                  min(len(out), len(expected)))
        pytest.fail(f"{codec}: output differs at byte {at} (got {len(out)} bytes, "
                    f"expected {len(expected)}): got {out[at - 80:at + 80]!r} "
                    f"expected {expected[at - 80:at + 80]!r}")
    if lz4_withheld:
        pytest.xfail("round trip ok, but librdkafka sends lz4 uncompressed: it enables lz4 only "
                     "when the broker offers FindCoordinator (consumer groups not implemented)")


def test_lz4_batches_read_by_kcat(kcat_server):
    """lz4 batches (written by kafka-python, which does not withhold lz4)
    read back by kcat byte for byte."""
    from kafka import KafkaProducer
    topic = "kcat-lz4-kafka-python"
    recs = records("lz4-kp")[:20_000]
    p = KafkaProducer(bootstrap_servers=kcat_server.bootstrap, acks="all",
                      compression_type="lz4", linger_ms=20, batch_size=256 * 1024)
    for k, v in recs:
        p.send(topic, key=k, value=v, partition=0,
               headers=[(hk, hv.encode()) for hk, hv in HEADERS])
    p.flush(timeout=60)
    p.close()
    codecs, count, _ = batch_codecs(kcat_server.data_dir / f"{topic}-0")
    assert codecs == {CODEC_IDS["lz4"]} and count == len(recs), (codecs, count)
    out = kcat(kcat_server, "-C", "-t", topic, "-e", "-o", "beginning",
               "-f", "%o|%k|%s|%h\\n").stdout
    hdrs = ",".join(f"{k}={v}" for k, v in HEADERS).encode()
    assert out == b"".join(b"%d|%s|%s|%s\n" % (i, k, v, hdrs) for i, (k, v) in enumerate(recs))
