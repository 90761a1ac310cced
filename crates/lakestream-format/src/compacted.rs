//! Compacted Parquet files ("Compacted objects", "Parquet files"; addendum §6.1, §6.2).
//!
//! A compacted file holds consecutive entries of one log, one row per entry, in ascending
//! offset order. Its schema is one nullable BINARY column `payload` without a logical type,
//! under a message named after the binding's Avro record:
//!
//! ```text
//! message KafkaMessage {
//!   optional binary payload;
//! }
//! ```
//!
//! The footer's key-value metadata names the binding and the companion:
//!
//! | key | value |
//! |---|---|
//! | `entrySerDeType` | the binding identifier, e.g. `KAFKA_BATCHED_RAW_PARQUET` (readers check it exactly) |
//! | `rowMetadata` | the companion's file name (informative; readers derive it from the file name) |
//! | `schemaType` | `avro` |
//! | `parquet.avro.schema` | the binding's Avro record schema |
//! | `writer.model.name` | `avro` |
//!
//! The reader is built around `parquet`'s [`ChunkReader`], so a caller can serve it from
//! ranged reads: decode the footer from the file's tail ([`footer_metadata_len`],
//! [`decode_footer`]), ask which byte ranges a row range needs ([`CompactedFileReader::byte_ranges`]),
//! fetch only those, and serve them with [`RangedChunks`].

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, BinaryArray};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::{Compression, Repetition, Type as PhysicalType, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::metadata::{FooterTail, KeyValue, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type as SchemaType;

use crate::error::{FormatError, Result};

const STRUCTURE: &str = "compacted Parquet file";
const NAME_STRUCTURE: &str = "compacted file name";

/// The suffix of every compacted file name.
pub const PARQUET_SUFFIX: &str = ".parquet";
/// The suffix of every companion file name.
pub const INDEX_SUFFIX: &str = ".index";

/// Footer key: the binding identifier.
pub const KEY_ENTRY_SERDE_TYPE: &str = "entrySerDeType";
/// Footer key: the companion's file name.
pub const KEY_ROW_METADATA: &str = "rowMetadata";
/// Footer key: the schema kind, `avro`.
pub const KEY_SCHEMA_TYPE: &str = "schemaType";
/// Footer key: the Avro schema, as parquet-avro writes it.
pub const KEY_AVRO_SCHEMA: &str = "parquet.avro.schema";
/// Footer key: the writer's object model, as parquet-mr writes it.
pub const KEY_WRITER_MODEL: &str = "writer.model.name";

/// The name of the single column.
pub const PAYLOAD_COLUMN: &str = "payload";

/// The two identifiers a binding defines for compacted objects (Appendix A).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Binding {
    /// The value of the footer key `entrySerDeType`.
    pub entry_serde_type: &'static str,
    /// The Avro record name of a row, which is also the Parquet schema's message name. It must
    /// be a plain Avro name (letters, digits, `_`), so it needs no JSON escaping.
    pub avro_record_name: &'static str,
}

impl Binding {
    /// The Avro schema of a row: one field `payload` of type `["null","bytes"]`, default null.
    pub fn avro_schema(&self) -> String {
        format!(
            r#"{{"type":"record","name":"{}","fields":[{{"name":"payload","type":["null","bytes"],"default":null}}]}}"#,
            self.avro_record_name
        )
    }
}

/// The bindings this crate implements, which readers accept: the Kafka binding (Appendix A)
/// and the native binding of every other stream ([`crate::native`]). A file of any other
/// binding is refused (spec: \[Reader\] MUST reject an `entrySerDeType` it does not implement).
pub const KNOWN_BINDINGS: &[Binding] = &[crate::kafka::KAFKA_BINDING, crate::native::NATIVE_BINDING];

/// The checks a compacted file name must pass: it ends in `.parquet`, contains `.parquet`
/// nowhere else, has a non-empty stem, and contains no `/` (names are relative to the
/// stream's directory).
pub fn validate_compacted_name(name: &str) -> Result<()> {
    let invalid = |why: &str| FormatError::invalid(NAME_STRUCTURE, format!("{name:?} {why}"));
    let Some(stem) = name.strip_suffix(PARQUET_SUFFIX) else {
        return Err(invalid("does not end in .parquet"));
    };
    if stem.contains(PARQUET_SUFFIX) {
        return Err(invalid("contains .parquet before its suffix"));
    }
    if stem.is_empty() {
        return Err(invalid("has nothing before .parquet"));
    }
    if name.contains('/') {
        return Err(invalid("contains '/'; names are relative to the stream directory"));
    }
    Ok(())
}

/// The companion of a compacted file: the same name with the `.parquet` suffix replaced by
/// `.index`.
pub fn companion_name(compacted_name: &str) -> Result<String> {
    validate_compacted_name(compacted_name)?;
    let stem = &compacted_name[..compacted_name.len() - PARQUET_SUFFIX.len()];
    Ok(format!("{stem}{INDEX_SUFFIX}"))
}

/// The Parquet compression codec of the `payload` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// No compression.
    Uncompressed,
    /// Snappy: fast, modest ratio.
    Snappy,
    /// Zstandard at the given level (1 to 22): better ratio, slower writes.
    Zstd(i32),
    /// LZ4 raw blocks.
    Lz4Raw,
    /// Gzip at the given level (0 to 9), for readers that lack the others.
    Gzip(u32),
}

impl Codec {
    fn to_parquet(self) -> Result<Compression> {
        let bad_level =
            |e: parquet::errors::ParquetError| FormatError::invalid(STRUCTURE, format!("codec level: {e}"));
        Ok(match self {
            Codec::Uncompressed => Compression::UNCOMPRESSED,
            Codec::Snappy => Compression::SNAPPY,
            Codec::Zstd(level) => Compression::ZSTD(ZstdLevel::try_new(level).map_err(bad_level)?),
            Codec::Lz4Raw => Compression::LZ4_RAW,
            Codec::Gzip(level) => {
                Compression::GZIP(parquet::basic::GzipLevel::try_new(level).map_err(bad_level)?)
            }
        })
    }
}

/// Settings of a [`CompactedFileWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// The codec. Default [`Codec::Snappy`]: cheap to write and read; entry payloads are
    /// often already compressed by their producer.
    pub codec: Codec,
    /// The most rows in a row group. Default 10,000. Smaller row groups let a reader fetch
    /// less for a short read, at the cost of a larger footer.
    pub max_rows_per_row_group: usize,
    /// The most bytes a row group holds before it is flushed. Default 128 MiB.
    pub max_row_group_bytes: usize,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self { codec: Codec::Snappy, max_rows_per_row_group: 10_000, max_row_group_bytes: 128 * 1024 * 1024 }
    }
}

/// Writes one compacted Parquet file in memory, one entry payload per row.
///
/// Rows are collected as [`ByteArray`] handles on the payloads (no copy) and written one row
/// group at a time through the column writer, which encodes each page straight from them:
/// no Arrow array is built, and no encoded row group is buffered before the file's buffer.
pub struct CompactedFileWriter {
    writer: SerializedFileWriter<Vec<u8>>,
    pending: Vec<ByteArray>,
    pending_bytes: usize,
    max_rows: usize,
    max_bytes: usize,
    rows: u64,
}

impl std::fmt::Debug for CompactedFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactedFileWriter").field("rows", &self.rows).finish_non_exhaustive()
    }
}

impl CompactedFileWriter {
    /// A writer of the file `file_name` (which must pass [`validate_compacted_name`]) for
    /// `binding`. The footer's `rowMetadata` names the file's companion.
    pub fn new(binding: Binding, file_name: &str, options: WriteOptions) -> Result<Self> {
        let companion = companion_name(file_name)?;
        if options.max_rows_per_row_group == 0 || options.max_row_group_bytes == 0 {
            return Err(FormatError::invalid(STRUCTURE, "row-group limits must be at least 1"));
        }
        let footer = vec![
            KeyValue::new(KEY_ENTRY_SERDE_TYPE.to_owned(), binding.entry_serde_type.to_owned()),
            KeyValue::new(KEY_ROW_METADATA.to_owned(), companion),
            KeyValue::new(KEY_SCHEMA_TYPE.to_owned(), "avro".to_owned()),
            KeyValue::new(KEY_AVRO_SCHEMA.to_owned(), binding.avro_schema()),
            KeyValue::new(KEY_WRITER_MODEL.to_owned(), "avro".to_owned()),
        ];
        let properties = WriterProperties::builder()
            .set_compression(options.codec.to_parquet()?)
            // Min/max of opaque payloads help no reader; they only grow the footer.
            .set_statistics_enabled(EnabledStatistics::None)
            // Entry payloads are unique blobs: a dictionary would hash every payload for nothing.
            .set_dictionary_enabled(false)
            .set_key_value_metadata(Some(footer))
            .build();
        let start_failed = |e: parquet::errors::ParquetError| {
            FormatError::invalid(STRUCTURE, format!("cannot start the Parquet writer: {e}"))
        };
        // `optional binary payload` without a logical type, under the binding's record name:
        // the schema parquet-avro writes for `["null","bytes"]`.
        let payload = SchemaType::primitive_type_builder(PAYLOAD_COLUMN, PhysicalType::BYTE_ARRAY)
            .with_repetition(Repetition::OPTIONAL)
            .build()
            .map_err(start_failed)?;
        let schema = SchemaType::group_type_builder(binding.avro_record_name)
            .with_fields(vec![Arc::new(payload)])
            .build()
            .map_err(start_failed)?;
        let writer = SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(properties))
            .map_err(start_failed)?;
        Ok(Self {
            writer,
            pending: Vec::new(),
            pending_bytes: 0,
            max_rows: options.max_rows_per_row_group,
            max_bytes: options.max_row_group_bytes,
            rows: 0,
        })
    }

    /// Appends one row holding `payload` unchanged.
    pub fn push(&mut self, payload: Bytes) -> Result<()> {
        // The PLAIN encoding stores a value's length as a 4-byte integer that readers take as
        // signed.
        if payload.len() > i32::MAX as usize {
            return Err(FormatError::invalid(
                STRUCTURE,
                format!("a payload of {} bytes is larger than a Parquet value can hold", payload.len()),
            ));
        }
        self.pending_bytes += payload.len();
        self.pending.push(ByteArray::from(payload));
        self.rows += 1;
        if self.pending.len() >= self.max_rows || self.pending_bytes >= self.max_bytes {
            self.write_row_group()?;
        }
        Ok(())
    }

    /// Writes the rows pushed so far as one row group now (none when there are none), for a
    /// caller that cuts row groups itself.
    pub fn flush_row_group(&mut self) -> Result<()> {
        self.write_row_group()
    }

    /// The number of rows so far.
    pub fn row_count(&self) -> u64 {
        self.rows
    }

    fn write_row_group(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let failed = |e: parquet::errors::ParquetError| {
            FormatError::invalid(STRUCTURE, format!("Parquet write failed: {e}"))
        };
        // Grow the file's buffer once for the whole row group rather than doubling page by
        // page (each doubling copies the file so far and faults in fresh pages). Each value
        // costs its bytes plus a 4-byte length, one definition-level bit, and page headers.
        let estimate = self.pending_bytes + self.pending.len() * 5 + 4096;
        self.writer.inner_mut().reserve(estimate);
        let mut group = self.writer.next_row_group().map_err(failed)?;
        let Some(mut column) = group.next_column().map_err(failed)? else {
            return Err(FormatError::invalid(STRUCTURE, "the schema has no column to write"));
        };
        // Every row holds a value (an empty payload is an empty value, never null).
        let levels = vec![1i16; self.pending.len()];
        column.typed::<ByteArrayType>().write_batch(&self.pending, Some(&levels), None).map_err(failed)?;
        column.close().map_err(failed)?;
        group.close().map_err(failed)?;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }

    /// The file's bytes written so far and not yet taken (after [`Self::flush_row_group`],
    /// everything up to the end of that row group), for a caller that uploads the file while
    /// writing it: the file is the concatenation of every `take_written` and of what
    /// [`Self::finish`] returns. Offsets in the footer count every byte, taken or not.
    pub fn take_written(&mut self) -> Result<Vec<u8>> {
        self.writer
            .flush()
            .map_err(|e| FormatError::invalid(STRUCTURE, format!("Parquet write failed: {e}")))?;
        Ok(std::mem::take(self.writer.inner_mut()))
    }

    /// Writes the remaining rows and the footer, and returns the file's bytes (those not
    /// taken by [`Self::take_written`]).
    pub fn finish(mut self) -> Result<Vec<u8>> {
        self.write_row_group()?;
        self.writer
            .into_inner()
            .map_err(|e| FormatError::invalid(STRUCTURE, format!("Parquet close failed: {e}")))
    }
}

/// Writes a whole compacted file named `file_name` holding `payloads`, one row each.
pub fn write_compacted_file<I>(
    binding: Binding,
    file_name: &str,
    payloads: I,
    options: WriteOptions,
) -> Result<Vec<u8>>
where
    I: IntoIterator<Item = Bytes>,
{
    let mut writer = CompactedFileWriter::new(binding, file_name, options)?;
    for payload in payloads {
        writer.push(payload)?;
    }
    writer.finish()
}

/// The number of bytes at the end of every Parquet file that give the footer's length: the
/// first ranged read of a file.
pub const FOOTER_TAIL_LEN: usize = 8;

/// The length of the footer metadata, from the file's last [`FOOTER_TAIL_LEN`] bytes. The
/// metadata is the `len` bytes before those.
pub fn footer_metadata_len(tail: &[u8]) -> Result<usize> {
    let tail: &[u8; FOOTER_TAIL_LEN] = tail.try_into().map_err(|_| {
        FormatError::corrupt(
            STRUCTURE,
            format!("footer tail is {} bytes, expected {FOOTER_TAIL_LEN}", tail.len()),
        )
    })?;
    let footer = FooterTail::try_new(tail).map_err(|e| corrupt(&e))?;
    if footer.is_encrypted_footer() {
        return Err(FormatError::unsupported(STRUCTURE, "the footer is encrypted"));
    }
    Ok(footer.metadata_length())
}

/// Decodes the footer metadata (the bytes before the tail).
pub fn decode_footer(metadata: &[u8]) -> Result<Arc<ParquetMetaData>> {
    crate::thrift_sizes::check(metadata)
        .map_err(|why| FormatError::corrupt(STRUCTURE, format!("footer: {why}")))?;
    guarded("decoding the footer", || {
        ParquetMetaDataReader::decode_metadata(metadata).map(Arc::new).map_err(|e| corrupt(&e))
    })
}

fn corrupt(error: &parquet::errors::ParquetError) -> FormatError {
    FormatError::corrupt(STRUCTURE, error.to_string())
}

/// Runs `decode`, a call into `parquet`/`arrow`, turning a panic into a corrupt-data error.
///
/// `parquet` / `arrow-buffer` 60.1 still assert on some crafted files (docs/format.md, "Known
/// limits of the Parquet reader"), and bytes from storage must never take a reader down.
/// Unwind safety: `decode` only reads the caller's state, and whatever it built is dropped
/// with the panic, so nothing half-updated is observed afterwards. The panic hook still
/// prints its message to stderr once; the error returned names the file's rows or footer.
/// Under `panic = "abort"` (not our profiles; cargo-fuzz's) nothing can be caught.
fn guarded<T>(what: &str, decode: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        Err(FormatError::corrupt(STRUCTURE, format!("{what}: the Parquet decoder panicked: {message}")))
    })
}

/// Reads a compacted file through a [`ChunkReader`]: the whole file as [`Bytes`], or only the
/// ranges a read needs (see [`RangedChunks`]).
pub struct CompactedFileReader<R> {
    chunks: R,
    metadata: ArrowReaderMetadata,
    binding: Binding,
    /// The first row of each row group, then the row count.
    row_group_starts: Vec<u64>,
    /// The byte range of each row group's `payload` column chunk.
    chunk_ranges: Vec<Range<u64>>,
}

impl<R> std::fmt::Debug for CompactedFileReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactedFileReader")
            .field("binding", &self.binding)
            .field("rows", &self.row_count())
            .finish_non_exhaustive()
    }
}

impl<R> CompactedFileReader<R> {
    /// The binding the footer names.
    pub fn binding(&self) -> Binding {
        self.binding
    }

    /// The number of rows (entries) in the file.
    pub fn row_count(&self) -> u64 {
        self.row_group_starts.last().copied().unwrap_or(0)
    }

    /// The decoded footer.
    pub fn footer(&self) -> &Arc<ParquetMetaData> {
        self.metadata.metadata()
    }
}

impl<R: ChunkReader + Clone + 'static> CompactedFileReader<R> {
    /// Reads the footer from `chunks` and checks the file against `bindings` (usually
    /// [`KNOWN_BINDINGS`]).
    pub fn open(chunks: R, bindings: &[Binding]) -> Result<Self> {
        // The footer's declared container sizes, before `parquet` reserves room for them.
        let len = chunks.len();
        let tail_start = len.saturating_sub(8);
        if let Ok(tail) = chunks.get_bytes(tail_start, (len - tail_start) as usize)
            && tail.len() == 8
            && &tail[4..] == b"PAR1"
        {
            let metadata_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
            if let Some(start) = tail_start.checked_sub(metadata_len)
                && let Ok(metadata) = chunks.get_bytes(start, metadata_len as usize)
            {
                crate::thrift_sizes::check(&metadata)
                    .map_err(|why| FormatError::corrupt(STRUCTURE, format!("footer: {why}")))?;
            }
        }
        let footer = guarded("decoding the footer", || {
            ParquetMetaDataReader::new().parse_and_finish(&chunks).map_err(|e| corrupt(&e))
        })?;
        Self::with_footer(chunks, Arc::new(footer), bindings)
    }

    /// Opens the file with a footer the caller has already decoded ([`decode_footer`]).
    ///
    /// Checks, in order: the footer names a binding in `bindings` exactly (case and all;
    /// addendum §12 row 14), and the schema is the one nullable BINARY column `payload`.
    pub fn with_footer(chunks: R, footer: Arc<ParquetMetaData>, bindings: &[Binding]) -> Result<Self> {
        let binding = check_binding(&footer, bindings)?;
        check_schema(&footer)?;
        let mut row_group_starts = Vec::with_capacity(footer.num_row_groups() + 1);
        let mut next = 0u64;
        for group in footer.row_groups() {
            row_group_starts.push(next);
            let rows = u64::try_from(group.num_rows()).map_err(|_| {
                FormatError::corrupt(STRUCTURE, format!("a row group declares {} rows", group.num_rows()))
            })?;
            next = next
                .checked_add(rows)
                .ok_or_else(|| FormatError::corrupt(STRUCTURE, "row count overflows"))?;
        }
        row_group_starts.push(next);
        let chunk_ranges = column_chunk_ranges(&footer, chunks.len())?;
        // Decode `payload` as Binary whatever Arrow schema a foreign writer stored.
        let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
        let metadata = guarded("reading the schema", || {
            ArrowReaderMetadata::try_new(footer, options).map_err(|e| corrupt(&e))
        })?;
        Ok(Self { chunks, metadata, binding, row_group_starts, chunk_ranges })
    }

    /// The row groups that hold some row of `rows`.
    fn row_groups_for(&self, rows: &Range<u64>) -> Range<usize> {
        let groups = self.row_group_starts.len() - 1;
        let first =
            self.row_group_starts[..groups].partition_point(|start| *start <= rows.start).saturating_sub(1);
        let end = self.row_group_starts[..groups].partition_point(|start| *start < rows.end);
        first..end.max(first)
    }

    /// The byte ranges of the file that reading `rows` touches: the `payload` column chunk of
    /// each row group that holds one of the rows.
    pub fn byte_ranges(&self, rows: Range<u64>) -> Result<Vec<Range<u64>>> {
        self.check_rows(&rows)?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.row_groups_for(&rows).map(|group| self.chunk_ranges[group].clone()).collect())
    }

    fn check_rows(&self, rows: &Range<u64>) -> Result<()> {
        if rows.start > rows.end || rows.end > self.row_count() {
            return Err(FormatError::invalid(
                STRUCTURE,
                format!("rows {}..{} are outside the file's {} rows", rows.start, rows.end, self.row_count()),
            ));
        }
        Ok(())
    }

    /// The payloads of `rows`, in row order.
    pub fn read_payloads(&self, rows: Range<u64>) -> Result<Vec<Bytes>> {
        self.check_rows(&rows)?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        guarded(&format!("reading rows {}..{}", rows.start, rows.end), || self.decode_payloads(rows.clone()))
    }

    /// [`Self::read_payloads`] for a checked, non-empty row range.
    fn decode_payloads(&self, rows: Range<u64>) -> Result<Vec<Bytes>> {
        let groups = self.row_groups_for(&rows);
        let first_row = self.row_group_starts[groups.start];
        let wanted = rows.end - rows.start;
        // Rows before `rows.start` in the first row group are decoded and dropped here rather
        // than skipped by `parquet` (`with_offset`): its skip path (`peek_next_page`) panics on
        // a DATA_PAGE header without its data_page_header (parquet 60.1, page.rs:365), while
        // the decode path reports an error. Found by fuzzing; costs at most one row group.
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(self.chunks.clone(), self.metadata.clone())
                .with_row_groups(groups.collect())
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| corrupt(&e))?;
        // The row count comes from the footer: do not let a corrupt one size an allocation.
        let mut payloads = Vec::with_capacity(usize::try_from(wanted).unwrap_or(usize::MAX).min(BATCH_ROWS));
        let mut row = first_row;
        for batch in reader {
            let batch = batch.map_err(|e| FormatError::corrupt(STRUCTURE, e.to_string()))?;
            let column = batch.column(0).as_any().downcast_ref::<BinaryArray>().ok_or_else(|| {
                FormatError::corrupt(
                    STRUCTURE,
                    format!("payload column decoded as {}", batch.column(0).data_type()),
                )
            })?;
            for index in 0..column.len() {
                if row >= rows.start {
                    if column.is_null(index) {
                        return Err(FormatError::corrupt(
                            STRUCTURE,
                            format!("row {row} has a null payload; every row holds an entry"),
                        ));
                    }
                    payloads.push(Bytes::copy_from_slice(column.value(index)));
                }
                row += 1;
                if row == rows.end {
                    return Ok(payloads);
                }
            }
        }
        Err(FormatError::corrupt(
            STRUCTURE,
            format!("the file ends at row {row}, but the footer promises {} rows", self.row_count()),
        ))
    }
}

/// Rows per decoded batch: bounds memory with large payloads, amortizes per-batch work with
/// small ones.
const BATCH_ROWS: usize = 1024;

fn check_binding(footer: &ParquetMetaData, bindings: &[Binding]) -> Result<Binding> {
    let pairs = footer.file_metadata().key_value_metadata().map(Vec::as_slice).unwrap_or_default();
    let mut values = pairs.iter().filter(|kv| kv.key == KEY_ENTRY_SERDE_TYPE);
    let Some(pair) = values.next() else {
        return Err(FormatError::corrupt(STRUCTURE, "the footer has no entrySerDeType"));
    };
    if values.next().is_some() {
        return Err(FormatError::corrupt(STRUCTURE, "the footer has entrySerDeType twice"));
    }
    let Some(value) = pair.value.as_deref() else {
        return Err(FormatError::corrupt(STRUCTURE, "the footer's entrySerDeType has no value"));
    };
    bindings.iter().find(|binding| binding.entry_serde_type == value).copied().ok_or_else(|| {
        let known: Vec<&str> = bindings.iter().map(|b| b.entry_serde_type).collect();
        FormatError::unsupported(
            STRUCTURE,
            format!("entrySerDeType {value:?} is not a binding this reader implements (exact match against {known:?})"),
        )
    })
}

fn check_schema(footer: &ParquetMetaData) -> Result<()> {
    let schema = footer.file_metadata().schema_descr();
    let fields = schema.root_schema().get_fields();
    let [field] = fields else {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("the schema has {} top-level fields; expected the one column payload", fields.len()),
        ));
    };
    let info = field.get_basic_info();
    let wrong = |what: String| FormatError::corrupt(STRUCTURE, format!("column {:?}: {what}", info.name()));
    if info.name() != PAYLOAD_COLUMN {
        return Err(wrong("expected the one column to be named payload".into()));
    }
    if !field.is_primitive() || field.get_physical_type() != PhysicalType::BYTE_ARRAY {
        return Err(wrong("expected a BINARY (BYTE_ARRAY) column".into()));
    }
    if !info.has_repetition() || info.repetition() != Repetition::OPTIONAL {
        return Err(wrong("expected an optional (nullable) column".into()));
    }
    if let Some(logical) = info.logical_type_ref() {
        return Err(wrong(format!("expected no logical type, found {logical:?}")));
    }
    Ok(())
}

/// The byte range of each row group's one column chunk, checked to lie inside the file before
/// the footer. `parquet` itself asserts (panics) on negative offsets, so corrupt footers are
/// refused here, before any read.
fn column_chunk_ranges(footer: &ParquetMetaData, file_len: u64) -> Result<Vec<Range<u64>>> {
    footer
        .row_groups()
        .iter()
        .enumerate()
        .map(|(group, row_group)| {
            let [column] = row_group.columns() else {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!("row group {group} has {} column chunks; expected 1", row_group.columns().len()),
                ));
            };
            let start = column.dictionary_page_offset().unwrap_or(column.data_page_offset());
            let len = column.compressed_size();
            let range = u64::try_from(start)
                .ok()
                .zip(u64::try_from(len).ok())
                .and_then(|(start, len)| Some(start..start.checked_add(len)?))
                .filter(|range| range.end <= file_len);
            range.ok_or_else(|| {
                FormatError::corrupt(
                    STRUCTURE,
                    format!(
                        "row group {group}: column chunk at {start} of {len} bytes lies outside the file"
                    ),
                )
            })
        })
        .collect()
}

/// A [`ChunkReader`] over some byte ranges of a file, for reading after ranged fetches. It
/// serves a request only from one fetched range that contains it, and fails otherwise.
#[derive(Debug, Clone)]
pub struct RangedChunks {
    file_len: u64,
    /// `(start, bytes)`, sorted by start.
    ranges: Arc<Vec<(u64, Bytes)>>,
}

impl RangedChunks {
    /// Chunks of a file of `file_len` bytes; each pair is a fetched range's start and bytes.
    pub fn new(file_len: u64, mut ranges: Vec<(u64, Bytes)>) -> Result<Self> {
        ranges.sort_by_key(|(start, _)| *start);
        for (start, bytes) in &ranges {
            if start.checked_add(bytes.len() as u64).is_none_or(|end| end > file_len) {
                return Err(FormatError::invalid(
                    "ranged chunks",
                    format!(
                        "range at {start} of {} bytes ends beyond the file's {file_len} bytes",
                        bytes.len()
                    ),
                ));
            }
        }
        Ok(Self { file_len, ranges: Arc::new(ranges) })
    }

    fn find(&self, start: u64, len: u64) -> parquet::errors::Result<Bytes> {
        let after = self.ranges.partition_point(|(range_start, _)| *range_start <= start);
        after
            .checked_sub(1)
            .map(|i| &self.ranges[i])
            .filter(|(range_start, bytes)| start + len <= range_start + bytes.len() as u64)
            .map(|(range_start, bytes)| {
                let from = (start - range_start) as usize;
                bytes.slice(from..from + len as usize)
            })
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "bytes {start}..{} were not fetched",
                    start.saturating_add(len)
                ))
            })
    }
}

impl Length for RangedChunks {
    fn len(&self) -> u64 {
        self.file_len
    }
}

impl ChunkReader for RangedChunks {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf as _;
        // A reader runs to the end of the fetched range that holds `start`.
        let after = self.ranges.partition_point(|(range_start, _)| *range_start <= start);
        let (range_start, bytes) = after
            .checked_sub(1)
            .map(|i| &self.ranges[i])
            .ok_or_else(|| parquet::errors::ParquetError::General(format!("byte {start} was not fetched")))?;
        let remaining = (range_start + bytes.len() as u64).saturating_sub(start);
        Ok(self.find(start, remaining)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.find(start, length as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::KAFKA_BINDING;

    // spec-rule: 9bc0ff7256 [Compactor] A compactor MUST give each compacted file a name that ends in .par…
    #[test]
    fn compacted_names_end_in_parquet_once() {
        assert_eq!(companion_name("7-0.parquet").unwrap(), "7-0.index");
        assert_eq!(companion_name("ursa-x.y.parquet").unwrap(), "ursa-x.y.index");
        for bad in ["7-0.parq", "a.parquet.parquet", ".parquet", "x/7.parquet", "a.parquetx.parquet", ""] {
            assert!(companion_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    // spec-rule: 525bf9b7ca [Compactor] A compactor MUST write each compacted file with an Avro record sch…
    #[test]
    fn kafka_avro_schema_is_byte_exact() {
        assert_eq!(
            KAFKA_BINDING.avro_schema(),
            r#"{"type":"record","name":"KafkaMessage","fields":[{"name":"payload","type":["null","bytes"],"default":null}]}"#
        );
    }

    #[test]
    fn a_file_taken_row_group_by_row_group_is_the_same_file() {
        let payloads: Vec<Bytes> = (0..10u8).map(|i| Bytes::from(vec![i; 1000 + usize::from(i)])).collect();
        let options = WriteOptions { max_rows_per_row_group: usize::MAX, ..WriteOptions::default() };
        let whole = {
            let mut w = CompactedFileWriter::new(KAFKA_BINDING, "a.parquet", options).unwrap();
            for (i, p) in payloads.iter().enumerate() {
                w.push(p.clone()).unwrap();
                if i % 3 == 2 {
                    w.flush_row_group().unwrap();
                }
            }
            w.finish().unwrap()
        };
        let mut w = CompactedFileWriter::new(KAFKA_BINDING, "a.parquet", options).unwrap();
        let mut taken = w.take_written().unwrap(); // the magic bytes
        for (i, p) in payloads.iter().enumerate() {
            w.push(p.clone()).unwrap();
            if i % 3 == 2 {
                w.flush_row_group().unwrap();
                taken.extend(w.take_written().unwrap());
            }
        }
        taken.extend(w.finish().unwrap());
        assert_eq!(taken, whole);
        let reader = CompactedFileReader::open(Bytes::from(taken), KNOWN_BINDINGS).unwrap();
        assert_eq!(reader.read_payloads(0..10).unwrap(), payloads);
    }

    #[test]
    fn row_groups_for_a_row_range() {
        let payloads = (0..10u8).map(|i| Bytes::from(vec![i; 3]));
        let options = WriteOptions { max_rows_per_row_group: 3, ..WriteOptions::default() };
        let file = write_compacted_file(KAFKA_BINDING, "a.parquet", payloads, options).unwrap();
        let reader = CompactedFileReader::open(Bytes::from(file), KNOWN_BINDINGS).unwrap();
        assert_eq!(reader.row_count(), 10);
        assert_eq!(reader.row_groups_for(&(0..1)), 0..1);
        assert_eq!(reader.row_groups_for(&(2..4)), 0..2);
        assert_eq!(reader.row_groups_for(&(9..10)), 3..4);
        assert_eq!(reader.byte_ranges(4..4).unwrap(), Vec::<Range<u64>>::new());
        let got = reader.read_payloads(2..7).unwrap();
        assert_eq!(got, (2..7u8).map(|i| Bytes::from(vec![i; 3])).collect::<Vec<_>>());
    }
}
