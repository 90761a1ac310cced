//! Regression inputs for the compacted-file reader, found by `fuzz/fuzz_targets/compacted.rs`.
//! Each is a mutated compacted file on which `parquet` 60.1 itself panicked before the reader
//! checked column-chunk ranges and stopped using `parquet`'s row skipping, or that still panics
//! inside `parquet`/`arrow` and is contained by the reader. The reader must return an error (or
//! rows) and never panic, whichever `parquet` version decodes it (the workspace moved from
//! 60.1 to 58.4, the line `iceberg` builds on; each file is refused on both).

use bytes::Bytes;
use lakestream_format::compacted::{
    self, CompactedFileReader, CompactedFileWriter, KNOWN_BINDINGS, WriteOptions,
};
use lakestream_format::kafka::KAFKA_BINDING;
use parquet::file::metadata::ParquetMetaDataWriter;

/// a footer whose column chunk has a negative offset: `ColumnChunkMetaData::byte_range` asserts (parquet 60.1, metadata/mod.rs:1043).
const NEGATIVE_COLUMN_OFFSET: &str = concat!(
    "0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100",
    "fe0100fe0100fe0100da0100191c160815a00316000019169e2f001502192c480c4b61666b614d657373616765150200150c",
    "250218077061796c6f6164001608191c191c26001c150c192500001918077061796c6f61641502160816f02f16a003264d49",
    "1c150015001502000016a803151e0016f02f1608260816a003140000195c180e656e74727953657244655479706518194b41",
    "464b415f424154434845445f5241575f5041525155455400180b726f774d65746164617461182f757273612d303030303030",
    "30302d303030302d343030302d383030302d3030303030303030303030312e696e64657800180a736368656d615479706518",
    "046176726f001813706172717565742e6176726f2e736368656d61186c7b2274797065223a227265636f7264222c226e616d",
    "65223a224b61666b614d657373616765222c226669656c6473223a5b7b226e616d65223a227061796c6f6164222c22747970",
    "65223a5b226e757c6c222c226279746573225d2c2264656661756c74223a6e756c6c7d7d005d18480c4b61466b3030312e69",
    "6e64657800180a736368656d615479706518046176726f001813706172717565742e6176726f312e30191c1c000000a40100",
    "0050415231",
);

/// a DATA_PAGE header without its data_page_header: parquet's skip path unwraps it (page.rs:365).
const DATA_PAGE_WITHOUT_HEADER: &str = concat!(
    "50415231150015ca2f15fa0802152c15001506150600d30000000000000000e5177c0200000008011100000068feffffffff",
    "ffffef6b6573747265616d00000000060105240100fffe00b80b00005afe0100fe0100fe0100fe0100fe0100fe0100fe0100",
    "fe0100fe0100fe01007e0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe01",
    "00fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe",
    "0100fe0100fe0100fe0100191c160815a00316000019169e2f001502192c480c4b61666b614d657373616765150200150c25",
    "0218077061796c6f6164001608191c191c26001c150c192500061918077061796c6f61641502160816f02f16a0032608491c",
    "150015001502000016a803151e0016f02f1608260816a003140000195c180e656e74727953657244655479706518194b4146",
    "4b415f424154434845445f5241575f5041525155455400180b726f774d65746164617461182f757273612d30393535313631",
    "352d303030302d343030302d373939392d3030303030303030303030312e696e64657800180a736368656d61547970651804",
    "6176726f001813706172717565742e6176726f2e736368656d61186c7b2274797065223a227265636f7264222c226e616d65",
    "223a224b61666b614d657373616765222c226669656c6473223a5b7b226e616d65223a227061796c6f6164222c2274797065",
    "223a5b226e756c6c222c226279746573225d2c2264656661756c74223a6e756c6c7d5d7d0018117772697465722e6d6f6465",
    "6c2e6e616d6518046176726f001819706172717565742d72732076657273696f6e2036312e312e30191c1c000000a4010000",
    "50415231",
);

/// a page whose values overrun it: with overflow checks, parquet's plain byte-array decoder subtracts past zero after a skip (byte_array.rs:384).
const PLAIN_BYTE_ARRAY_OVERRUN: &str = concat!(
    "50415231150015ca2f15fa022c15081500150615060000e5177c0200000008011100000068656c6c6f2c206c616b65737472",
    "65616d00000006060105240100fffe00b80b00005afe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe01",
    "00fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fef600fe0100fe",
    "0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100",
    "fe0100fe0100fe0100da0100191c160815a0031600b619169e2f001502192c480c4b61666b614d657373616765150200150c",
    "250218077061796c6f6164001608191c191c26001c150c192500061918077061796c6f61641502160816f02f16a003260849",
    "1c150015041502000016a803151e0016f02f1608260816a003140000195c180e656e74727953657244655479706518194b41",
    "464b415f424154434845445f5241575f5041525155455400180b726f774d65746164617461182f757273612d303030303030",
    "30302d303030302d343030302d383030302d3030303030303030303030312e696e64657800180a736368656d615479706518",
    "046176726f001813706172717565742e6176726f2e736368656d61186c7b2274797065223a227265636f7264222c226e616d",
    "65223a224b61666b614d657373616765222c226669656c6473223a5b7b226e616d65223a227061796c6f6164222c22747970",
    "65223a5b226e756c6c222c226279746573225d2c2264656661756c74223a6e756c6c7d5d7d0018117772697465722e6d6f64",
    "656c2e6e616d6518046176726f001819706172717565742d72732076657273696f6e2036302e312e30191c1c000000a40100",
    "0050415231",
);

/// Definition levels that overrun their page: `arrow-buffer` 60.1 asserts in
/// `BitChunks::new` (bit_chunk_iterator.rs:235), reached from parquet's definition-level decoder
/// (definition_levels.rs:447) on the ordinary read path, so the reader cannot route around it.
const DEFINITION_LEVELS_OVERRUN: &str = concat!(
    "50415231150015ca2f15fa022c15081500150615060000e5177c0200000001110800006800656c6c6f2c206c616b65737472",
    "65616d20000000060105240100fffe00b80b00005afe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe01",
    "00fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe",
    "0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100fe0100",
    "fe0100fe0100fe0100da0100191c160815a00316000019169e2f001502192c480c4b61666b614d657373616765150200150c",
    "250218077061796c6f6164001608191c191c26001c150c192500061918077061796c6f61641502160816f02f16a003260849",
    "1c150015001502000016a803151e0016f02f1608260816a003140000195c180e656e74727953657244655479706518194b41",
    "464b415f424154434845445f5241575f5041525155455400180b726f774d65746164617461182f757273616d303935353136",
    "31352d303030302d343030302d383030302d3030303030303030303030312e696e64657800180a736368656d615479706518",
    "046176726f001813706172717565742e6176726f2e736368656d61186c7b2274797065223a227265636f7264222c226e616d",
    "65223a224b61666b614d657373616765222c226669656c6473223a5b7b226e616d65223a227061796c6f6164222c22747970",
    "65223a5b226e756c6c222c226279746573225d2c2264656661756c74223a6e756c6c7d5d7d0018117772697465722e6d6f64",
    "656c2e6e616d6518046176726f001819706172717565742d72732076657273696f6e2036302e312e30191c1c000000a40100",
    "0050415231",
);

/// Opens the file and reads every row, then the second half, as the fuzz target does.
fn read_all(hex_text: &str) -> Result<(), lakestream_format::FormatError> {
    let reader = CompactedFileReader::open(Bytes::from(hex::decode(hex_text).unwrap()), KNOWN_BINDINGS)?;
    let rows = reader.row_count().min(1024);
    reader.byte_ranges(0..rows)?;
    reader.read_payloads(0..rows)?;
    reader.read_payloads(rows / 2..rows)?;
    Ok(())
}

/// parquet 60.1 decoded this footer and asserted on the chunk's range; 58.4's footer decoder
/// refuses it first. Our own range check is pinned by the next test, on a well-formed footer.
#[test]
fn compacted_negative_column_offset_is_refused_not_a_panic() {
    let err = read_all(NEGATIVE_COLUMN_OFFSET).unwrap_err();
    assert_eq!(err.class(), lakestream_format::ErrorClass::CorruptData, "{err}");
}

/// A footer that decodes cleanly but places the column chunk before the file's start or past
/// its end: the reader checks every chunk's range against the file length on open, before
/// `parquet` could assert on it.
#[test]
fn compacted_column_chunk_outside_the_file_is_refused() {
    let name = "ls-7-00000000-0000-4000-8000-000000000001.parquet";
    let mut writer = CompactedFileWriter::new(KAFKA_BINDING, name, WriteOptions::default()).unwrap();
    for payload in ["first", "second", "third"] {
        writer.push(Bytes::from(payload)).unwrap();
    }
    let file = writer.finish().unwrap();
    let tail = file.len() - 8;
    let footer_start = tail - compacted::footer_metadata_len(&file[tail..]).unwrap();
    let footer = compacted::decode_footer(&file[footer_start..tail]).unwrap();
    for (offset, why) in [(-5, "a negative offset"), (file.len() as i64, "an offset past the end")] {
        let row_groups = footer
            .row_groups()
            .iter()
            .map(|group| {
                let columns = group
                    .columns()
                    .iter()
                    .map(|column| {
                        let builder = column.clone().into_builder().set_dictionary_page_offset(None);
                        builder.set_data_page_offset(offset).build().unwrap()
                    })
                    .collect();
                group.clone().into_builder().set_column_metadata(columns).build().unwrap()
            })
            .collect();
        let metadata = footer.as_ref().clone().into_builder().set_row_groups(row_groups).build();
        let mut mutated = file[..footer_start].to_vec();
        ParquetMetaDataWriter::new(&mut mutated, &metadata).finish().unwrap();
        let err = CompactedFileReader::open(Bytes::from(mutated), KNOWN_BINDINGS).unwrap_err();
        assert!(err.to_string().contains("lies outside the file"), "{why}: {err}");
    }
}

#[test]
fn compacted_data_page_without_header_is_refused_not_a_panic() {
    let err = read_all(DATA_PAGE_WITHOUT_HEADER).unwrap_err();
    assert_eq!(err.class(), lakestream_format::ErrorClass::CorruptData, "{err}");
}

#[test]
fn compacted_plain_byte_array_overrun_is_refused_not_a_panic() {
    let err = read_all(PLAIN_BYTE_ARRAY_OVERRUN).unwrap_err();
    assert_eq!(err.class(), lakestream_format::ErrorClass::CorruptData, "{err}");
}

/// `arrow-buffer` 60.1 still panics on this file (an upstream bug); the reader contains the
/// panic and reports the file as corrupt.
#[test]
fn compacted_definition_levels_overrun_is_refused_not_a_panic() {
    let err = read_all(DEFINITION_LEVELS_OVERRUN).unwrap_err();
    assert_eq!(err.class(), lakestream_format::ErrorClass::CorruptData, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("compacted Parquet file") && message.contains("decoder panicked"),
        "the error should name the structure and the contained panic: {message}"
    );
}

/// a footer whose field 2 (the schema) is declared an i64: `parquet` 58.4 reads it as a list
/// anyway, whose count the bytes make about 40 million, and reserves room for them first
/// (5 GB), so the fuzz run stopped on out-of-memory. The reader checks the footer's encoding
/// before `parquet` sees it (declared types of `FileMetaData`'s fields, container sizes).
const SCHEMA_LIST_LARGER_THAN_THE_FOOTER: &str = concat!(
    "5000000000000000000000000000000000fe0100fe0100fe0100fe0100fe0100da0100191c160815a00316000019169e2f00",
    "1502192c480c4b61666b614d657373616765150200150c250218077061796c6f6164001608191c191c26f1ffffff19250006",
    "1918077061796c6f61641502160816f02f16a0032608491c150015001502000016a803151e0016f02f1608260816a0031400",
    "00195c180e656e74727953657244655479706518194b41464b415f424154434845445f5241575f5041525155455400180b72",
    "6f774d65746164617461182f757273612d30303030303030302d303030302d343030302d383030302d303030303030303030",
    "3030312e696e64657800180a736368656d615479706518046176726f001813706172717565742e6176726f2e736368656d61",
    "186c7b2274ffffffffffffffff636f7264222c226e616d65223a224b61666b614d657373616765222c226669656c6473223a",
    "5b7b226e616d656e74727953657244655479706518194b41464b415f424154434845445f52416573225d2c2264656661756c",
    "2500061918077061316c6f616400000000000000000000000000000000000000000000000000000000000000000000000000",
    "0000000015021668656d61186c7b2274797065223a227265636f7264222c226e61f02f1608260816a003140000195c180e65",
    "2e2e312e30191c1c000000a401000050415231",
);

#[test]
fn compacted_footer_whose_schema_parquet_would_read_as_a_huge_list_is_refused_first() {
    let err = read_all(SCHEMA_LIST_LARGER_THAN_THE_FOOTER).unwrap_err();
    assert_eq!(err.class(), lakestream_format::ErrorClass::CorruptData, "{err}");
    assert!(err.to_string().contains("FileMetaData field 2"), "{err}");
}
