//! Compacted Parquet files ("Parquet files", "Compacted object names"; addendum §6.1, §6.2,
//! §12 row 14): layout, footer keys, the exact binding check, ranged reads and round trips.

use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use lakestream_format::compacted::{
    self, Binding, Codec, CompactedFileReader, FOOTER_TAIL_LEN, KNOWN_BINDINGS, RangedChunks, WriteOptions,
    write_compacted_file,
};
use lakestream_format::kafka::KAFKA_BINDING;
use lakestream_format::native::NATIVE_BINDING;
use lakestream_format::{ErrorClass, FormatError};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::basic::{Repetition, Type as PhysicalType};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use proptest::prelude::*;

fn sample_payloads() -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"first entry"),
        Bytes::new(),
        Bytes::from_static(&[0x00, 0xff, 0x00, 0x01, 0x00]),
        Bytes::from(vec![0xab; 70_000]),
    ]
}

fn write(payloads: &[Bytes], options: WriteOptions) -> Vec<u8> {
    write_compacted_file(KAFKA_BINDING, "ursa-1.parquet", payloads.iter().cloned(), options).unwrap()
}

fn open(file: Vec<u8>) -> Result<CompactedFileReader<Bytes>, FormatError> {
    CompactedFileReader::open(Bytes::from(file), KNOWN_BINDINGS)
}

// spec-rule: 828de80d36 [Compactor] The payload of each row MUST hold the entry's payload unchanged.
#[test]
fn each_row_holds_its_entry_payload_unchanged() {
    let payloads = sample_payloads();
    let reader = open(write(&payloads, WriteOptions::default())).unwrap();
    assert_eq!(reader.binding(), KAFKA_BINDING);
    assert_eq!(reader.row_count(), 4);
    assert_eq!(reader.read_payloads(0..4).unwrap(), payloads);
    assert_eq!(reader.read_payloads(1..3).unwrap(), payloads[1..3]);
    assert_eq!(reader.read_payloads(4..4).unwrap(), Vec::<Bytes>::new());
    let err = reader.read_payloads(3..5).unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidInput, "{err}");
}

// spec-rule: 525bf9b7ca [Compactor] A compactor MUST write each compacted file with an Avro record schema…
#[test]
fn schema_is_one_nullable_binary_column_under_the_binding_record_name() {
    let reader = open(write(&sample_payloads(), WriteOptions::default())).unwrap();
    let schema = reader.footer().file_metadata().schema_descr();
    assert_eq!(schema.root_schema().name(), "KafkaMessage");
    assert_eq!(schema.num_columns(), 1);
    let column = schema.column(0);
    assert_eq!(column.name(), "payload");
    assert_eq!(column.physical_type(), PhysicalType::BYTE_ARRAY);
    assert_eq!(column.self_type().get_basic_info().repetition(), Repetition::OPTIONAL);
    assert_eq!(column.logical_type_ref(), None);
    assert_eq!(column.converted_type(), parquet::basic::ConvertedType::NONE);
}

#[test]
fn footer_carries_the_binding_keys() {
    let reader = open(write(&sample_payloads(), WriteOptions::default())).unwrap();
    let pairs = reader.footer().file_metadata().key_value_metadata().unwrap();
    let value = |key: &str| pairs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone());
    assert_eq!(value("entrySerDeType").as_deref(), Some("KAFKA_BATCHED_RAW_PARQUET"));
    assert_eq!(value("rowMetadata").as_deref(), Some("ursa-1.index"));
    assert_eq!(value("schemaType").as_deref(), Some("avro"));
    assert_eq!(
        value("parquet.avro.schema").as_deref(),
        Some(
            r#"{"type":"record","name":"KafkaMessage","fields":[{"name":"payload","type":["null","bytes"],"default":null}]}"#
        )
    );
    assert_eq!(value("writer.model.name").as_deref(), Some("avro"));
    assert_eq!(value("ARROW:schema"), None, "no Arrow schema key");
}

#[test]
fn every_codec_round_trips() {
    let payloads = sample_payloads();
    for codec in [Codec::Uncompressed, Codec::Snappy, Codec::Zstd(3), Codec::Lz4Raw, Codec::Gzip(6)] {
        let options = WriteOptions { codec, ..WriteOptions::default() };
        let reader = open(write(&payloads, options)).unwrap();
        assert_eq!(reader.read_payloads(0..4).unwrap(), payloads, "{codec:?}");
    }
    let bad = WriteOptions { codec: Codec::Zstd(99), ..WriteOptions::default() };
    assert!(write_compacted_file(KAFKA_BINDING, "a.parquet", sample_payloads(), bad).is_err());
}

#[test]
fn writer_refuses_bad_file_names() {
    for name in ["a.parquet.parquet", "a.index", "dir/a.parquet", ".parquet"] {
        let err = write_compacted_file(KAFKA_BINDING, name, sample_payloads(), WriteOptions::default())
            .unwrap_err();
        assert_eq!(err.class(), ErrorClass::InvalidInput, "{name}: {err}");
    }
}

/// A Parquet file with the right schema but the given footer pairs.
fn file_with_footer(pairs: Vec<(&str, Option<&str>)>) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("payload", DataType::Binary, true)]));
    let footer = pairs.into_iter().map(|(k, v)| KeyValue::new(k.to_owned(), v.map(str::to_owned))).collect();
    let properties = WriterProperties::builder().set_key_value_metadata(Some(footer)).build();
    let options = ArrowWriterOptions::new().with_properties(properties).with_skip_arrow_metadata(true);
    write_batch(schema, vec![Arc::new(BinaryArray::from_iter_values([b"x"]))], options)
}

fn write_batch(schema: Arc<Schema>, columns: Vec<ArrayRef>, options: ArrowWriterOptions) -> Vec<u8> {
    let mut writer = ArrowWriter::try_new_with_options(Vec::new(), Arc::clone(&schema), options).unwrap();
    writer.write(&RecordBatch::try_new(schema, columns).unwrap()).unwrap();
    writer.into_inner().unwrap()
}

// spec-rule: 2c254dbc1b [Reader] A reader MUST reject a compacted file whose entrySerDeType is not the ide…
#[test]
fn reader_rejects_an_entry_serde_type_it_does_not_implement() {
    for value in [
        "kafka_batched_raw_parquet",
        "Kafka_Batched_Raw_Parquet",
        "KAFKA_PARQUET",
        " KAFKA_BATCHED_RAW_PARQUET",
    ] {
        let err = open(file_with_footer(vec![("entrySerDeType", Some(value))])).unwrap_err();
        assert!(matches!(err, FormatError::Unsupported { .. }), "{value}: {err}");
        assert!(err.to_string().contains(&format!("{value:?}")), "error does not name {value:?}: {err}");
    }
    assert!(open(file_with_footer(vec![("entrySerDeType", Some("KAFKA_BATCHED_RAW_PARQUET"))])).is_ok());
}

#[test]
fn reader_rejects_a_missing_or_repeated_entry_serde_type() {
    let err = open(file_with_footer(vec![("schemaType", Some("avro"))])).unwrap_err();
    assert!(err.to_string().contains("no entrySerDeType"), "{err}");
    let err = open(file_with_footer(vec![("entrySerDeType", None)])).unwrap_err();
    assert!(err.to_string().contains("has no value"), "{err}");
    let twice = vec![("entrySerDeType", Some("KAFKA_BATCHED_RAW_PARQUET")), ("entrySerDeType", Some("X"))];
    let err = open(file_with_footer(twice)).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
}

// spec-rule: 525bf9b7ca [Compactor] A compactor MUST write each compacted file with an Avro record schema…
#[test]
fn native_binding_files_carry_our_identifiers_byte_for_byte() {
    // The native binding (docs/format.md): the structure of every compacted file, under
    // identifiers of our own. These footer values and the schema name are its golden bytes.
    let file =
        write_compacted_file(NATIVE_BINDING, "ls-7-a.parquet", sample_payloads(), WriteOptions::default())
            .unwrap();
    let reader = open(file).unwrap();
    assert_eq!(reader.binding(), NATIVE_BINDING);
    assert_eq!(reader.read_payloads(0..4).unwrap(), sample_payloads());
    let schema = reader.footer().file_metadata().schema_descr();
    assert_eq!(schema.root_schema().name(), "LakestreamEntry");
    assert_eq!(schema.num_columns(), 1);
    assert_eq!(schema.column(0).name(), "payload");
    assert_eq!(schema.column(0).physical_type(), PhysicalType::BYTE_ARRAY);
    assert_eq!(schema.column(0).self_type().get_basic_info().repetition(), Repetition::OPTIONAL);
    let pairs = reader.footer().file_metadata().key_value_metadata().unwrap();
    let got: Vec<(&str, &str)> =
        pairs.iter().map(|kv| (kv.key.as_str(), kv.value.as_deref().unwrap_or(""))).collect();
    assert_eq!(
        got,
        [
            ("entrySerDeType", "LAKESTREAM_RAW_PARQUET"),
            ("rowMetadata", "ls-7-a.index"),
            ("schemaType", "avro"),
            (
                "parquet.avro.schema",
                r#"{"type":"record","name":"LakestreamEntry","fields":[{"name":"payload","type":["null","bytes"],"default":null}]}"#
            ),
            ("writer.model.name", "avro"),
        ]
    );
}

// spec-rule: 2c254dbc1b [Reader] A reader MUST reject a compacted file whose entrySerDeType is not the ide…
#[test]
fn readers_accept_both_bindings_and_refuse_an_unknown_one() {
    // [Reader] MUST reject a file whose entrySerDeType is not a binding it implements: ours are
    // the Kafka binding and the native one; a foreign identifier is refused, naming it.
    for binding in [KAFKA_BINDING, NATIVE_BINDING] {
        let file =
            write_compacted_file(binding, "b.parquet", sample_payloads(), WriteOptions::default()).unwrap();
        assert_eq!(open(file).unwrap().binding(), binding);
        let file = file_with_footer(vec![("entrySerDeType", Some(binding.entry_serde_type))]);
        assert_eq!(open(file).unwrap().binding(), binding);
    }
    for foreign in ["LAKESTREAM_PARQUET", "lakestream_raw_parquet", "OTHER_RAW_PARQUET"] {
        let err = open(file_with_footer(vec![("entrySerDeType", Some(foreign))])).unwrap_err();
        assert!(matches!(err, FormatError::Unsupported { .. }), "{foreign}: {err}");
        assert!(err.to_string().contains(&format!("{foreign:?}")), "{err}");
    }
}

#[test]
fn reader_accepts_only_the_bindings_it_is_given() {
    const OTHER: Binding =
        Binding { entry_serde_type: "OTHER_RAW_PARQUET", avro_record_name: "OtherMessage" };
    let file = write_compacted_file(OTHER, "o.parquet", sample_payloads(), WriteOptions::default()).unwrap();
    assert!(open(file.clone()).is_err());
    let reader = CompactedFileReader::open(Bytes::from(file), &[KAFKA_BINDING, OTHER]).unwrap();
    assert_eq!(reader.binding(), OTHER);
    assert_eq!(reader.footer().file_metadata().schema_descr().root_schema().name(), "OtherMessage");
}

#[test]
fn reader_rejects_other_schemas() {
    let kafka = || {
        let footer = vec![KeyValue::new("entrySerDeType".to_owned(), "KAFKA_BATCHED_RAW_PARQUET".to_owned())];
        let properties = WriterProperties::builder().set_key_value_metadata(Some(footer)).build();
        ArrowWriterOptions::new().with_properties(properties).with_skip_arrow_metadata(true)
    };
    let binary = |name: &str, nullable| Field::new(name, DataType::Binary, nullable);
    let one = || -> ArrayRef { Arc::new(BinaryArray::from_iter_values([b"x"])) };

    let required = Arc::new(Schema::new(vec![binary("payload", false)]));
    let err = open(write_batch(required, vec![one()], kafka())).unwrap_err();
    assert!(err.to_string().contains("nullable"), "{err}");

    let renamed = Arc::new(Schema::new(vec![binary("value", true)]));
    let err = open(write_batch(renamed, vec![one()], kafka())).unwrap_err();
    assert!(err.to_string().contains("named payload"), "{err}");

    let two = Arc::new(Schema::new(vec![binary("payload", true), binary("key", true)]));
    let err = open(write_batch(two, vec![one(), one()], kafka())).unwrap_err();
    assert!(err.to_string().contains("2 top-level fields"), "{err}");

    let string = Arc::new(Schema::new(vec![Field::new("payload", DataType::Utf8, true)]));
    let err = open(write_batch(string, vec![Arc::new(StringArray::from(vec!["x"]))], kafka())).unwrap_err();
    assert!(err.to_string().contains("logical type"), "{err}");
}

#[test]
fn a_null_payload_is_corrupt() {
    let schema = Arc::new(Schema::new(vec![Field::new("payload", DataType::Binary, true)]));
    let footer = vec![KeyValue::new("entrySerDeType".to_owned(), "KAFKA_BATCHED_RAW_PARQUET".to_owned())];
    let properties = WriterProperties::builder().set_key_value_metadata(Some(footer)).build();
    let options = ArrowWriterOptions::new().with_properties(properties);
    let column: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"a"[..]), None]));
    let reader = open(write_batch(schema, vec![column], options)).unwrap();
    assert_eq!(reader.read_payloads(0..1).unwrap(), vec![Bytes::from_static(b"a")]);
    let err = reader.read_payloads(0..2).unwrap_err();
    assert!(err.to_string().contains("row 1 has a null payload"), "{err}");
}

#[test]
fn garbage_and_truncated_files_are_corrupt() {
    let file = write(&sample_payloads(), WriteOptions::default());
    for bad in
        [Vec::new(), b"PAR1".to_vec(), vec![0u8; 100], file[..file.len() - 1].to_vec(), file[8..].to_vec()]
    {
        match open(bad) {
            Ok(reader) => {
                // A file cut at the front keeps its footer; its column chunks are then wrong.
                assert!(reader.read_payloads(0..reader.row_count()).is_err());
            }
            Err(err) => assert_eq!(err.class(), ErrorClass::CorruptData, "{err}"),
        }
    }
}

/// Reads like a client of object storage would: the tail, then the footer, then only the
/// column chunks of the row groups a row range needs.
#[test]
fn ranged_reads_fetch_only_the_footer_and_needed_row_groups() {
    let payloads: Vec<Bytes> =
        (0..40u32).map(|i| Bytes::from(format!("entry {i} ").repeat(i as usize))).collect();
    let options =
        WriteOptions { max_rows_per_row_group: 8, codec: Codec::Uncompressed, ..WriteOptions::default() };
    let file = Bytes::from(write(&payloads, options));
    let len = file.len() as u64;

    let tail = file.slice(file.len() - FOOTER_TAIL_LEN..);
    let metadata_len = compacted::footer_metadata_len(&tail).unwrap();
    let metadata_start = file.len() - FOOTER_TAIL_LEN - metadata_len;
    let footer = compacted::decode_footer(&file[metadata_start..file.len() - FOOTER_TAIL_LEN]).unwrap();

    // Rows 10..12 lie in row group 1 (rows 8..16).
    let footer_only = RangedChunks::new(len, vec![]).unwrap();
    let reader = CompactedFileReader::with_footer(footer_only, Arc::clone(&footer), KNOWN_BINDINGS).unwrap();
    let ranges = reader.byte_ranges(10..12).unwrap();
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    let err = reader.read_payloads(10..12).unwrap_err();
    assert!(err.to_string().contains("not fetched"), "{err}");

    let fetched = ranges.iter().map(|r| (r.start, file.slice(r.start as usize..r.end as usize))).collect();
    let chunks = RangedChunks::new(len, fetched).unwrap();
    let fetched_bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    assert!(fetched_bytes * 3 < len, "fetched {fetched_bytes} of {len} bytes");
    let reader = CompactedFileReader::with_footer(chunks, footer, KNOWN_BINDINGS).unwrap();
    assert_eq!(reader.read_payloads(10..12).unwrap(), payloads[10..12]);
    assert_eq!(reader.read_payloads(8..16).unwrap(), payloads[8..16]);
    assert!(reader.read_payloads(7..9).is_err(), "row 7 lies in a row group that was not fetched");

    assert!(compacted::footer_metadata_len(b"short").is_err());
    assert!(compacted::footer_metadata_len(b"\0\0\0\0XXXX").is_err());
    assert!(compacted::decode_footer(b"not thrift").is_err());
    assert!(RangedChunks::new(4, vec![(2, Bytes::from_static(b"abc"))]).is_err());
}

fn codec_strategy() -> impl Strategy<Value = Codec> {
    prop_oneof![Just(Codec::Uncompressed), Just(Codec::Snappy), Just(Codec::Zstd(1)), Just(Codec::Lz4Raw)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn compacted_write_then_read_returns_every_payload(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..40),
        max_rows_per_row_group in 1usize..12,
        codec in codec_strategy(),
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
    ) {
        let payloads: Vec<Bytes> = payloads.into_iter().map(Bytes::from).collect();
        let options = WriteOptions { codec, max_rows_per_row_group, ..WriteOptions::default() };
        let reader = open(write(&payloads, options)).unwrap();
        let n = payloads.len();
        prop_assert_eq!(reader.row_count(), n as u64);
        prop_assert_eq!(reader.read_payloads(0..n as u64).unwrap(), payloads.clone());
        let (x, y) = (a.index(n + 1), b.index(n + 1));
        let (start, end) = (x.min(y), x.max(y));
        prop_assert_eq!(reader.read_payloads(start as u64..end as u64).unwrap(), payloads[start..end].to_vec());
    }
}
