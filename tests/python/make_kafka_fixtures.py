#!/usr/bin/env python3
"""Writes genuine Kafka record batches for the Kafka-binding tests of lakestream-format.

The batches come from kafka-python's own record builders (pinned in requirements.txt), so
the Rust validator is checked against bytes that a real Kafka client library produces, not
against our own encoder. Output: one .bin file per case and manifest.json, in
crates/lakestream-format/tests/vectors/kafka/ (or the directory given as the only argument).

Each case in the manifest has:
  file            the .bin file
  expect          "ok" (a valid entry payload) or "refused"
  records         for "ok": the record count the payload holds
  refusal         for "refused": a word the error message must contain
  description     what the bytes are

Determinism: timestamps are fixed, and gzip is made deterministic by giving the builders a
gzip encoder whose header time is 0 (kafka-python's own sets the current time). The gzip
data itself is Python's zlib output at level 9, as in kafka-python.

Run: $PYENV/bin/python tests/python/make_kafka_fixtures.py
"""

import gzip
import json
import os
import struct
import sys

import kafka.record.default_records as default_records
import kafka.record.legacy_records as legacy_records
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.util import calc_crc32c

CODEC_NONE = 0
CODEC_GZIP = 1
BASE_TIMESTAMP = 1_700_000_000_000
BATCH_SIZE = 1 << 20


def deterministic_gzip_encode(payload, compresslevel=None):
    return gzip.compress(payload, compresslevel=compresslevel or 9, mtime=0)


# The builders imported gzip_encode by name; replace it where they look it up.
default_records.gzip_encode = deterministic_gzip_encode
legacy_records.gzip_encode = deterministic_gzip_encode


def v2_batch(records, codec=CODEC_NONE, transactional=False, producer_id=-1, producer_epoch=-1,
             base_sequence=-1):
    """records: list of (key, value, headers). Returns the batch bytes."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=BATCH_SIZE)
    for offset, (key, value, headers) in enumerate(records):
        meta = builder.append(offset, timestamp=BASE_TIMESTAMP + offset, key=key, value=value,
                              headers=headers)
        assert meta is not None, "record did not fit the batch"
    return bytes(builder.build())


def legacy_set(magic, records, codec=CODEC_NONE):
    """records: list of (key, value). Returns a magic-0/1 message set."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=BATCH_SIZE)
    for offset, (key, value) in enumerate(records):
        meta = builder.append(offset, timestamp=BASE_TIMESTAMP + offset, key=key, value=value)
        assert meta is not None, "record did not fit the message set"
    return bytes(builder.build())


def as_control_batch(batch):
    """Kafka clients never write control batches (brokers do), so take a builder's batch whose
    record is a commit marker, set the control bit (0x20) and recompute the CRC-32C."""
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def check_v2(payload, expected_records):
    """Reads the payload back with kafka-python's reader and checks its record count."""
    pos, total = 0, 0
    while pos < len(payload):
        (length,) = struct.unpack_from(">i", payload, pos + 8)
        batch = DefaultRecordBatch(payload[pos:pos + 12 + length])
        assert batch.validate_crc(), "kafka-python rejects its own CRC"
        total += sum(1 for _ in batch)
        pos += 12 + length
    assert total == expected_records, (total, expected_records)


def check_legacy(payload, magic, expected_records):
    pos, total = 0, 0
    while pos < len(payload):
        (length,) = struct.unpack_from(">i", payload, pos + 8)
        batch = LegacyRecordBatch(payload[pos:pos + 12 + length], magic)
        total += sum(1 for _ in batch)
        pos += 12 + length
    assert total == expected_records, (total, expected_records)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "crates", "lakestream-format", "tests", "vectors",
        "kafka")
    os.makedirs(out_dir, exist_ok=True)
    cases = []

    def add(name, payload, description, records=None, refusal=None):
        with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
            f.write(payload)
        case = {"file": name + ".bin", "description": description}
        if refusal is None:
            case.update(expect="ok", records=records)
        else:
            case.update(expect="refused", refusal=refusal)
        cases.append(case)

    compressible = [(b"key-%d" % i, b"value " * 40 + b"%d" % i, []) for i in range(5)]

    one = v2_batch([(None, b"hello", [])])
    check_v2(one, 1)
    add("v2_single_record", one, "magic 2, one record, uncompressed, null key", records=1)

    with_headers = v2_batch([
        (b"k0", b"v0", [("trace", b"abc"), ("empty", b"")]),
        (b"k1", None, [("h", None)]),
        (None, b"\x00\x01\x02", []),
    ])
    check_v2(with_headers, 3)
    add("v2_headers", with_headers, "magic 2, three records with headers, a null value and a null "
        "header value", records=3)

    gz = v2_batch(compressible, codec=CODEC_GZIP)
    assert gz[22] & 0x07 == CODEC_GZIP, "gzip did not pay off, the builder sent it uncompressed"
    check_v2(gz, 5)
    add("v2_gzip", gz, "magic 2, five records, gzip", records=5)

    several = v2_batch([(None, b"a", [])]) + gz + v2_batch([(b"x", b"y", []), (b"z", b"w", [])])
    check_v2(several, 8)
    add("v2_three_batches", several, "three magic-2 batches concatenated (1 + 5 gzip + 2 records)",
        records=8)

    transactional = v2_batch([(None, b"tx", [])], transactional=True, producer_id=42,
                             producer_epoch=0, base_sequence=0)
    assert DefaultRecordBatch(transactional).is_transactional
    add("v2_transactional", transactional, "magic 2 transactional batch (producer 42)",
        refusal="transactional")

    # A commit marker's key: version 0, type 1 (commit); value: version 0, coordinator epoch 0.
    control = as_control_batch(v2_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [])]))
    assert DefaultRecordBatch(control).is_control_batch
    assert DefaultRecordBatch(control).validate_crc()
    add("v2_control", control, "magic 2 control batch (commit marker; control bit set after "
        "building, CRC recomputed)", refusal="control")

    valid_then_control = one + control
    add("v2_valid_then_control", valid_then_control, "a valid batch followed by a control batch",
        refusal="control")

    for magic in (0, 1):
        plain = legacy_set(magic, [(b"k", b"v%d" % i) for i in range(3)])
        check_legacy(plain, magic, 3)
        add("v%d_plain" % magic, plain, "magic %d message set, three uncompressed messages" % magic,
            records=3)

        wrapped = legacy_set(magic, [(k, v) for k, v, _ in compressible], codec=CODEC_GZIP)
        assert wrapped[17] & 0x07 == CODEC_GZIP
        check_legacy(wrapped, magic, 5)
        add("v%d_gzip_wrapper" % magic, wrapped, "magic %d gzip wrapper holding five messages" % magic,
            records=5)

        mixed = plain + wrapped
        check_legacy(mixed, magic, 8)
        add("v%d_plain_then_gzip" % magic, mixed, "magic %d: three plain messages, then a gzip "
            "wrapper of five" % magic, records=8)

    manifest = {
        "generator": "tests/python/make_kafka_fixtures.py",
        "kafka_python": __import__("kafka").__version__,
        "cases": cases,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), os.path.normpath(out_dir)))


if __name__ == "__main__":
    main()
