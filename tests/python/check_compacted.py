#!/usr/bin/env python3
"""Outside-reader check: pyarrow opens the compacted Parquet file that
`cargo run -p lakestream-format --example write_compacted -- DIR` wrote, and the companion is
decoded with the Python standard library, independently of our Rust code.

Usage: check_compacted.py DIR

Checks, against DIR/expected.json:
  * the Parquet schema is exactly one column, `payload`, nullable, binary, named after the
    binding's Avro record;
  * the rows equal the expected payloads byte for byte;
  * the footer key-value metadata holds our keys with our values;
  * the companion is one gzip stream of blocks, the 0x7FFFFFFF sentinel and an offset map whose
    keys are the entry offsets, mapping each to its row.
Exits non-zero with a message naming the first mismatch.
"""

import base64
import gzip
import json
import os
import struct
import sys

import pyarrow as pa
import pyarrow.parquet as pq

SENTINEL = 0x7FFFFFFF


class Mismatch(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Mismatch(message)


def check_parquet(directory, expected):
    path = os.path.join(directory, expected["parquet_file"])
    parquet_file = pq.ParquetFile(path)

    schema = parquet_file.schema_arrow
    expect(len(schema) == 1, "expected exactly one column, found %d: %s" % (len(schema), schema.names))
    field = schema.field(0)
    expect(field.name == "payload", "the column is named %r, expected 'payload'" % field.name)
    expect(field.nullable, "the payload column is not nullable")
    expect(pa.types.is_binary(field.type), "the payload column is %s, expected binary" % field.type)

    parquet_schema = parquet_file.schema
    # pyarrow exposes the root group's name only in the schema's text form:
    # "required group field_id=-1 KafkaMessage {".
    root_line = str(parquet_schema).splitlines()[1].split()
    root_name = root_line[-2] if len(root_line) >= 2 else None
    expect(root_name == expected["schema_name"],
           "the Parquet schema is named %r, expected %r" % (root_name, expected["schema_name"]))
    column = parquet_schema.column(0)
    expect(column.physical_type == "BYTE_ARRAY", "physical type %s, expected BYTE_ARRAY" % column.physical_type)
    expect(column.logical_type.type == "NONE", "logical type %s, expected none" % column.logical_type)
    expect(column.max_definition_level == 1, "payload is not optional (max definition level %d)"
           % column.max_definition_level)

    rows = parquet_file.read().column("payload").to_pylist()
    wanted = [bytes.fromhex(h) for h in expected["payloads_hex"]]
    expect(len(rows) == len(wanted), "the file has %d rows, expected %d" % (len(rows), len(wanted)))
    for index, (got, want) in enumerate(zip(rows, wanted)):
        expect(got is not None, "row %d is null" % index)
        expect(got == want, "row %d differs: got %s, expected %s" % (index, got[:32].hex(), want[:32].hex()))

    footer = {k.decode(): v.decode() for k, v in (parquet_file.metadata.metadata or {}).items()}
    for key, value in expected["footer"].items():
        expect(key in footer, "the footer has no key %r (keys: %s)" % (key, sorted(footer)))
        expect(footer[key] == value, "footer %r is %r, expected %r" % (key, footer[key], value))
    return len(rows)


def check_companion(directory, expected):
    path = os.path.join(directory, expected["companion_file"])
    with open(path, "rb") as f:
        content = gzip.decompress(f.read())
    pos, rows = 0, []

    def read_len():
        nonlocal pos
        expect(pos + 4 <= len(content), "companion ends at byte %d inside a length" % pos)
        (length,) = struct.unpack_from(">i", content, pos)
        pos += 4
        return length

    while True:
        length = read_len()
        if length == SENTINEL:
            break
        expect(0 <= length <= len(content) - pos, "companion block length %d at byte %d" % (length, pos - 4))
        block = json.loads(content[pos:pos + length].decode("utf-8"))
        pos += length
        expect(isinstance(block, list), "a companion block is not a JSON array")
        for row in block:
            base64.b64decode(row["metadata"], validate=True)
            rows.append(row["offset"])
    length = read_len()
    offset_map = json.loads(content[pos:pos + length].decode("utf-8"))
    expect(pos + length == len(content), "bytes follow the companion's offset map")
    expect(rows == expected["entry_offsets"], "companion row offsets %s, expected %s"
           % (rows, expected["entry_offsets"]))
    expect(offset_map == {offset: row for row, offset in enumerate(rows)},
           "companion offset map %s does not map each entry offset to its row" % offset_map)
    return len(rows)


def main():
    if len(sys.argv) != 2:
        print("usage: check_compacted.py DIR", file=sys.stderr)
        return 2
    directory = sys.argv[1]
    with open(os.path.join(directory, "expected.json")) as f:
        expected = json.load(f)
    try:
        parquet_rows = check_parquet(directory, expected)
        companion_rows = check_companion(directory, expected)
        expect(parquet_rows == companion_rows, "Parquet has %d rows, the companion %d"
               % (parquet_rows, companion_rows))
    except Mismatch as mismatch:
        print("check_compacted: MISMATCH: %s" % mismatch, file=sys.stderr)
        return 1
    print("check_compacted: pyarrow %s read %d rows; schema, payloads, footer and companion match"
          % (pa.__version__, parquet_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
