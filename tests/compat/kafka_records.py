#!/usr/bin/env python3
"""Kafka v2 record batches through kafka-python's own record code.

An independent implementation of the batch format for Sluice's format tests
(crates/storage/tests/kafka_python_format.rs). Two commands:

  decode FILE   Parse FILE (a segment .log, or any concatenation of batches)
                with kafka.record.MemoryRecords / DefaultRecordBatch and print
                every batch and record as JSON.
  build FILE    Build batches with kafka.record.MemoryRecordsBuilder (every
                codec, headers, null keys and values), write them back to back
                to FILE and print what was put in them as JSON.

Both print one JSON document on stdout:

  {"kafka_python": VERSION, "file_size": N,  (decode only)
   "batches": [{"base_offset", "last_offset", "records_count",
                "leader_epoch", "crc_valid", "compression", "timestamp_type",
                "first_timestamp", "max_timestamp", "producer_id",
                "producer_epoch", "base_sequence", "size", "records": [
                   {"offset", "timestamp", "key", "value",
                    "headers": [[KEY, VALUE], ...]}]}]}

Keys, values and header keys/values are lowercase hex (header keys are the
UTF-8 bytes of kafka-python's str keys); null is JSON null. `build` reports
offsets relative to the batch (kafka-python produces base offset 0) and
`crc_valid`, `compression` etc. from re-reading the bytes it built.

Exit status 3 means kafka-python or a compression library is missing: run
scripts/test.sh, which installs tests/requirements.txt into target/test-venv.
"""

import json
import sys

MISSING = 3


def missing(what):
    sys.stderr.write(
        "kafka_records.py: %s is not available to %s.\n"
        "Run scripts/test.sh (it installs tests/requirements.txt into "
        "target/test-venv and sets SLUICETEST_PYTHON), or point SLUICETEST_PYTHON at "
        "a Python with those packages.\n" % (what, sys.executable)
    )
    sys.exit(MISSING)


try:
    import kafka
    import kafka.codec
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
except ImportError as e:
    missing("kafka-python (%s)" % e)

for _name, _check in (
    ("snappy (python-snappy)", kafka.codec.has_snappy),
    ("lz4", kafka.codec.has_lz4),
    ("zstd (zstandard)", kafka.codec.has_zstd),
):
    if not _check():
        missing("the %s codec for kafka-python" % _name)

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def hexa(b):
    return None if b is None else bytes(b).hex()


def describe_batch(batch, size):
    """Header fields of a DefaultRecordBatch, checking its CRC first (the
    library requires validate_crc before iteration)."""
    crc_valid = batch.validate_crc()
    return {
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "records_count": batch.records_count,
        "leader_epoch": batch.leader_epoch,
        "crc_valid": bool(crc_valid),
        "compression": CODECS.get(batch.compression_type, str(batch.compression_type)),
        "timestamp_type": batch.timestamp_type,
        "first_timestamp": batch.first_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "size": size,
        "records": [],
    }


def record_json(offset, timestamp, key, value, headers):
    return {
        "offset": offset,
        "timestamp": timestamp,
        "key": hexa(key),
        "value": hexa(value),
        "headers": [[k.encode("utf-8").hex(), hexa(v)] for k, v in headers],
    }


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    records = MemoryRecords(data)
    batches = []
    while records.has_next():
        batch = records.next_batch()
        if not isinstance(batch, DefaultRecordBatch):
            raise SystemExit("%s: batch with magic %d, not 2" % (path, batch.magic))
        out = describe_batch(batch, batch.size_in_bytes)
        for r in batch:
            out["records"].append(
                record_json(r.offset, r.timestamp, r.key, r.value, r.headers)
            )
        if len(out["records"]) != batch.records_count:
            raise SystemExit("%s: batch at %d holds %d records, header says %d" % (
                path, batch.base_offset, len(out["records"]), batch.records_count))
        batches.append(out)
    # MemoryRecords stops silently at a truncated tail: insist on none.
    if records.valid_bytes() != len(data):
        raise SystemExit("%s: %d of %d bytes are whole batches" % (
            path, records.valid_bytes(), len(data)))
    return {"kafka_python": kafka.__version__, "file_size": len(data), "batches": batches}


T0 = 1_700_000_000_000
# Compressible and incompressible-looking bytes: kafka-python sends a batch
# uncompressed when compression does not make it smaller.
TEXT = b"the quick brown fox jumps over the lazy dog; "
BINARY = bytes(range(256))


def build_specs():
    """(codec id, producer state or None, [(timestamp, key, value, headers)])."""
    specs = []
    for codec in sorted(CODECS):
        name = CODECS[codec].encode()
        # A batch of ordinary records with every null/empty combination.
        recs = [
            (T0 + 10, b"key-0", TEXT * 4, []),
            (T0 + 5, None, TEXT * 3 + name, [("h1", b"v1"), ("h-null", None)]),
            (T0 + 20, b"", None, [("", b"")]),
            (T0 + 20, None, None, []),
            (T0 - 50, b"k\x00\xff" + name, BINARY + TEXT * 2,
             [("\u00e9t\u00e9", BINARY), ("\u043a\u043b\u044e\u0447", TEXT)]),
            (T0 + 7, b"key-5", b"", [("dup", b"a"), ("dup", b"b")]),
        ]
        specs.append((codec, None, recs))
        # One record alone.
        specs.append((codec, None, [(T0 + 100 + codec, b"solo", TEXT * 5 + name, [])]))
        # An idempotent producer's batch, large enough for several xerial
        # snappy blocks (32 KiB) and lz4 / zstd blocks.
        big = [
            (T0 + 200 + i, b"big-%d" % i, (TEXT * 600)[: 20_000 + i * 997] + BINARY * (i % 3),
             [("i", b"%d" % i)])
            for i in range(8)
        ]
        specs.append((codec, (4242 + codec, 3, 17 * codec), big))
    return specs


def build(path):
    batches = []
    blob = bytearray()
    for codec, producer, recs in build_specs():
        if producer is None:
            b = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 30)
        else:
            pid, epoch, seq = producer
            b = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 30,
                                     producer_id=pid, producer_epoch=epoch,
                                     base_sequence=seq)
        expected = []
        for i, (ts, key, value, headers) in enumerate(recs):
            if b.append(ts, key, value, headers) is None:
                raise SystemExit("builder refused record %d" % i)
            expected.append(record_json(i, ts, key, value, headers))
        b.close()
        raw = bytes(b.buffer())
        # Re-read what was built: header fields as the library sees them.
        batch = DefaultRecordBatch(raw)
        out = describe_batch(batch, len(raw))
        if out["compression"] != CODECS[codec]:
            raise SystemExit("kafka-python wrote %s instead of %s (payload not "
                             "compressible enough?)" % (out["compression"], CODECS[codec]))
        decoded = [record_json(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
        if decoded != expected:
            raise SystemExit("kafka-python does not read back its own %s batch" % CODECS[codec])
        out["records"] = expected
        batches.append(out)
        blob += raw
    with open(path, "wb") as f:
        f.write(blob)
    return {"kafka_python": kafka.__version__, "batches": batches}


def main(argv):
    if len(argv) != 3 or argv[1] not in ("decode", "build"):
        sys.stderr.write("usage: kafka_records.py decode|build FILE\n")
        return 2
    result = decode(argv[2]) if argv[1] == "decode" else build(argv[2])
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
