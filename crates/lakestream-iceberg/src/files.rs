//! Rows and data files: a log's entries become rows of the stream's [`Layout`], grouped by
//! the day of their timestamp (the partition), and written as Parquet with the workspace's
//! `parquet` crate; each file's Iceberg [`DataFile`] carries its partition value, row count,
//! size and the bounds of `partition`, `offset` and `timestamp`.
//!
//! Pure and synchronous: the caller runs [`encode_range`] on a blocking thread and puts the
//! bytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StructArray, TimestampMicrosecondArray,
};
use arrow_buffer::OffsetBuffer;
use bytes::Bytes;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, Literal, Struct};
use lakestream_format::kafka::{self, KafkaRecord};
use lakestream_format::{Entry, Offset};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::config::Codec;
use crate::schema::{self, Layout, OFFSET_ID, PARTITION_ID, TIMESTAMP_ID};

/// The header a row of an undecodable Kafka entry carries (its value: why it did not decode).
pub const UNDECODED_HEADER: &str = "lakestream.undecoded";

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// How files are cut and encoded.
#[derive(Debug, Clone, Copy)]
pub struct FileOptions {
    /// Close a file once it holds about this many bytes.
    pub target_file_bytes: u64,
    /// Flush a row group once it holds about this many uncompressed bytes.
    pub row_group_bytes: usize,
    /// The codec.
    pub codec: Codec,
}

/// One log's offsets `[start, end)` to append, with the entries still in the log (a trimmed
/// prefix is simply absent).
#[derive(Debug, Clone)]
pub struct LogRange {
    /// The log.
    pub log_id: u64,
    /// The stream partition the log serves (the `partition` column).
    pub partition: u32,
    /// The first offset covered: the log's watermark in the table when the range was read.
    pub start: Offset,
    /// The offset after the last one covered.
    pub end: Offset,
    /// The entries, in offset order, inside `[start, end)`.
    pub entries: Vec<Entry>,
}

/// One encoded data file, not yet written anywhere.
#[derive(Debug, Clone)]
pub struct EncodedFile {
    /// Days since the epoch of every row's timestamp (the partition value).
    pub day: i32,
    /// The Parquet bytes.
    pub bytes: Bytes,
    /// Rows.
    pub rows: u64,
    stats: Stats,
}

/// What [`encode_range`] produced for one range.
#[derive(Debug, Clone, Default)]
pub struct EncodedRange {
    /// The files, at most one open per day at a time.
    pub files: Vec<EncodedFile>,
    /// Rows written.
    pub rows: u64,
    /// Kafka entries that did not decode, each written as one row holding the payload.
    pub undecodable_entries: u64,
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    min_offset: i64,
    max_offset: i64,
    min_ts: i64,
    max_ts: i64,
    partition: i32,
    key_nulls: u64,
    value_nulls: u64,
}

impl Stats {
    fn new(partition: i32) -> Stats {
        Stats {
            min_offset: i64::MAX,
            max_offset: i64::MIN,
            min_ts: i64::MAX,
            max_ts: i64::MIN,
            partition,
            key_nulls: 0,
            value_nulls: 0,
        }
    }

    fn merge(&mut self, o: &Stats) {
        self.min_offset = self.min_offset.min(o.min_offset);
        self.max_offset = self.max_offset.max(o.max_offset);
        self.min_ts = self.min_ts.min(o.min_ts);
        self.max_ts = self.max_ts.max(o.max_ts);
        self.key_nulls += o.key_nulls;
        self.value_nulls += o.value_nulls;
    }
}

/// Columnar rows of one partition day, until they make a row group.
struct Rows {
    layout: Layout,
    partition: i32,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    header_offsets: Vec<i32>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
    record_counts: Vec<i32>,
    bytes: usize,
    stats: Stats,
}

impl Rows {
    fn new(layout: Layout, partition: i32) -> Rows {
        Rows {
            layout,
            partition,
            offsets: Vec::new(),
            timestamps: Vec::new(),
            keys: BinaryBuilder::new(),
            values: BinaryBuilder::new(),
            header_offsets: vec![0],
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
            record_counts: Vec::new(),
            bytes: 0,
            stats: Stats::new(partition),
        }
    }

    fn len(&self) -> usize {
        self.offsets.len()
    }

    fn note(&mut self, offset: Offset, ts_micros: i64) {
        let offset = offset as i64;
        self.offsets.push(offset);
        self.timestamps.push(ts_micros);
        self.stats.min_offset = self.stats.min_offset.min(offset);
        self.stats.max_offset = self.stats.max_offset.max(offset);
        self.stats.min_ts = self.stats.min_ts.min(ts_micros);
        self.stats.max_ts = self.stats.max_ts.max(ts_micros);
        self.bytes += 24;
    }

    fn push_record(&mut self, record: &KafkaRecord, ts_micros: i64) {
        self.note(record.offset, ts_micros);
        self.keys.append_option(record.key.as_deref());
        self.values.append_option(record.value.as_deref());
        self.stats.key_nulls += u64::from(record.key.is_none());
        self.stats.value_nulls += u64::from(record.value.is_none());
        self.bytes += record.key.as_ref().map_or(0, Vec::len) + record.value.as_ref().map_or(0, Vec::len);
        for header in &record.headers {
            self.header_keys.append_value(&header.key);
            self.header_values.append_option(header.value.as_deref());
            self.bytes += header.key.len() + header.value.as_ref().map_or(0, Vec::len) + 8;
        }
        let last = *self.header_offsets.last().unwrap_or(&0);
        self.header_offsets.push(last + record.headers.len() as i32);
    }

    fn push_undecoded(&mut self, entry: &Entry, ts_micros: i64, why: &str) {
        self.note(entry.offset, ts_micros);
        self.keys.append_null();
        self.values.append_value(&entry.payload);
        self.stats.key_nulls += 1;
        self.header_keys.append_value(UNDECODED_HEADER);
        self.header_values.append_value(why.as_bytes());
        let last = *self.header_offsets.last().unwrap_or(&0);
        self.header_offsets.push(last + 1);
        self.bytes += entry.payload.len() + why.len();
    }

    fn push_entry(&mut self, entry: &Entry, ts_micros: i64) {
        self.note(entry.offset, ts_micros);
        self.record_counts.push(entry.record_count as i32);
        self.values.append_value(&entry.payload);
        self.bytes += entry.payload.len() + 4;
    }

    /// The rows as one batch; the builders start empty again.
    fn take_batch(&mut self) -> Result<RecordBatch, String> {
        let n = self.len();
        let partition: ArrayRef = Arc::new(Int32Array::from(vec![self.partition; n]));
        let offsets: ArrayRef = Arc::new(Int64Array::from(std::mem::take(&mut self.offsets)));
        let timestamps: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(std::mem::take(&mut self.timestamps)).with_timezone("UTC"),
        );
        let mut columns = vec![partition, offsets, timestamps];
        match self.layout {
            Layout::Kafka => {
                columns.push(Arc::new(self.keys.finish()));
                columns.push(Arc::new(self.values.finish()));
                let header_offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
                let headers = StructArray::try_new(
                    schema::header_fields(),
                    vec![Arc::new(self.header_keys.finish()), Arc::new(self.header_values.finish())],
                    None,
                )
                .map_err(|e| e.to_string())?;
                let list = ListArray::try_new(
                    Arc::new(schema::header_element()),
                    OffsetBuffer::new(header_offsets.into()),
                    Arc::new(headers),
                    None,
                )
                .map_err(|e| e.to_string())?;
                columns.push(Arc::new(list));
            }
            Layout::Entries => {
                columns.push(Arc::new(Int32Array::from(std::mem::take(&mut self.record_counts))));
                columns.push(Arc::new(self.values.finish()));
            }
        }
        self.bytes = 0;
        RecordBatch::try_new(self.layout.arrow_schema(), columns).map_err(|e| e.to_string())
    }
}

/// One partition day's open file and the rows not yet handed to it.
struct OpenDay {
    writer: ArrowWriter<Vec<u8>>,
    rows: Rows,
    written_rows: u64,
    stats: Stats,
}

/// Encodes one range's entries as data files: rows grouped by day, a file closed past the
/// target size. Kafka entries that do not decode become one row each (value: the payload,
/// header [`UNDECODED_HEADER`]: why), counted in the result.
pub fn encode_range(layout: Layout, range: &LogRange, options: FileOptions) -> Result<EncodedRange, String> {
    let partition =
        i32::try_from(range.partition).map_err(|_| format!("partition {} too large", range.partition))?;
    let mut days: BTreeMap<i32, OpenDay> = BTreeMap::new();
    let mut out = EncodedRange::default();
    let properties = writer_properties(options)?;
    let day_of = |days: &mut BTreeMap<i32, OpenDay>, day: i32| -> Result<(), String> {
        if let std::collections::btree_map::Entry::Vacant(slot) = days.entry(day) {
            let writer = ArrowWriter::try_new(Vec::new(), layout.arrow_schema(), Some(properties.clone()))
                .map_err(|e| e.to_string())?;
            slot.insert(OpenDay {
                writer,
                rows: Rows::new(layout, partition),
                written_rows: 0,
                stats: Stats::new(partition),
            });
        }
        Ok(())
    };
    for entry in &range.entries {
        if entry.offset < range.start || entry.end_offset() > range.end {
            return Err(format!(
                "entry [{}, {}) lies outside the range [{}, {})",
                entry.offset,
                entry.end_offset(),
                range.start,
                range.end
            ));
        }
        let entry_micros = entry.timestamp_ms.saturating_mul(1000);
        let mut touched = Vec::new();
        match layout {
            Layout::Entries => {
                let day = day_of_micros(entry_micros);
                day_of(&mut days, day)?;
                days.get_mut(&day).ok_or("day missing")?.rows.push_entry(entry, entry_micros);
                touched.push(day);
            }
            Layout::Kafka => match kafka::decode_records(&entry.payload, entry.offset) {
                Ok(records) => {
                    for record in &records {
                        // Magic-0 messages (and producers sending -1) carry no time: the
                        // entry's append time stands in.
                        let micros = match record.timestamp_ms {
                            Some(ms) if ms >= 0 => ms.saturating_mul(1000),
                            _ => entry_micros,
                        };
                        let day = day_of_micros(micros);
                        day_of(&mut days, day)?;
                        days.get_mut(&day).ok_or("day missing")?.rows.push_record(record, micros);
                        if touched.last() != Some(&day) {
                            touched.push(day);
                        }
                    }
                }
                Err(e) => {
                    let day = day_of_micros(entry_micros);
                    day_of(&mut days, day)?;
                    days.get_mut(&day).ok_or("day missing")?.rows.push_undecoded(
                        entry,
                        entry_micros,
                        &e.to_string(),
                    );
                    out.undecodable_entries += 1;
                    touched.push(day);
                }
            },
        }
        touched.sort_unstable();
        touched.dedup();
        for day in touched {
            let open = days.get_mut(&day).ok_or("day missing")?;
            if open.rows.bytes >= options.row_group_bytes {
                flush_rows(open)?;
                open.writer.flush().map_err(|e| e.to_string())?;
            }
            let size = (open.writer.bytes_written() + open.writer.in_progress_size()) as u64;
            if size >= options.target_file_bytes
                && let Some(open) = days.remove(&day)
            {
                out.files.push(close_day(day, open)?);
            }
        }
    }
    for (day, open) in days {
        out.files.push(close_day(day, open)?);
    }
    out.files.retain(|f| f.rows > 0);
    out.rows = out.files.iter().map(|f| f.rows).sum();
    Ok(out)
}

fn flush_rows(open: &mut OpenDay) -> Result<(), String> {
    if open.rows.len() == 0 {
        return Ok(());
    }
    open.written_rows += open.rows.len() as u64;
    open.stats.merge(&open.rows.stats);
    open.rows.stats = Stats::new(open.rows.partition);
    let batch = open.rows.take_batch()?;
    open.writer.write(&batch).map_err(|e| e.to_string())
}

fn close_day(day: i32, mut open: OpenDay) -> Result<EncodedFile, String> {
    flush_rows(&mut open)?;
    let bytes = open.writer.into_inner().map_err(|e| e.to_string())?;
    Ok(EncodedFile { day, bytes: Bytes::from(bytes), rows: open.written_rows, stats: open.stats })
}

fn writer_properties(options: FileOptions) -> Result<WriterProperties, String> {
    let compression = match options.codec {
        Codec::Zstd => Compression::ZSTD(ZstdLevel::try_new(3).map_err(|e| e.to_string())?),
        Codec::Snappy => Compression::SNAPPY,
        Codec::Uncompressed => Compression::UNCOMPRESSED,
    };
    Ok(WriterProperties::builder()
        .set_compression(compression)
        // Row groups are cut by bytes (`row_group_bytes`); this only bounds tiny rows.
        .set_max_row_group_row_count(Some(1 << 20))
        .set_created_by(format!("lakestream {}", env!("CARGO_PKG_VERSION")))
        .build())
}

/// The day (since 1970-01-01) of a time in microseconds, as Iceberg's `day` transform.
pub fn day_of_micros(micros: i64) -> i32 {
    micros.div_euclid(MICROS_PER_DAY) as i32
}

/// `yyyy-mm-dd` of a day since the epoch (proleptic Gregorian).
pub fn day_name(day: i32) -> String {
    // Howard Hinnant's civil_from_days.
    let z = i64::from(day) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

impl EncodedFile {
    /// The Iceberg data file entry for this file at `path`, in partition spec `spec_id`.
    pub fn data_file(&self, path: String, spec_id: i32, layout: Layout) -> Result<DataFile, String> {
        let s = &self.stats;
        let mut lower = HashMap::new();
        let mut upper = HashMap::new();
        lower.insert(PARTITION_ID, Datum::int(s.partition));
        upper.insert(PARTITION_ID, Datum::int(s.partition));
        lower.insert(OFFSET_ID, Datum::long(s.min_offset));
        upper.insert(OFFSET_ID, Datum::long(s.max_offset));
        lower.insert(TIMESTAMP_ID, Datum::timestamptz_micros(s.min_ts));
        upper.insert(TIMESTAMP_ID, Datum::timestamptz_micros(s.max_ts));
        let mut value_counts =
            HashMap::from([(PARTITION_ID, self.rows), (OFFSET_ID, self.rows), (TIMESTAMP_ID, self.rows)]);
        let mut null_counts = HashMap::from([(PARTITION_ID, 0), (OFFSET_ID, 0), (TIMESTAMP_ID, 0)]);
        match layout {
            Layout::Kafka => {
                value_counts.extend([(4, self.rows), (5, self.rows)]);
                null_counts.extend([(4, s.key_nulls), (5, s.value_nulls)]);
            }
            Layout::Entries => {
                value_counts.extend([(4, self.rows), (5, self.rows)]);
                null_counts.extend([(4, 0), (5, 0)]);
            }
        }
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path)
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::from_iter([Some(Literal::date(self.day))]))
            .partition_spec_id(spec_id)
            .record_count(self.rows)
            .file_size_in_bytes(self.bytes.len() as u64)
            .value_counts(value_counts)
            .null_value_counts(null_counts)
            .lower_bounds(lower)
            .upper_bounds(upper)
            .build()
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_names_are_civil_dates() {
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(-1), "1969-12-31");
        assert_eq!(day_name(19_675), "2023-11-14");
        assert_eq!(day_of_micros(1_700_000_000_000_000), 19_675);
        assert_eq!(day_of_micros(-1), -1);
    }

    fn entry(offset: Offset, ts: i64, payload: &'static [u8]) -> Entry {
        Entry { offset, record_count: 1, timestamp_ms: ts, payload: Bytes::from_static(payload) }
    }

    #[test]
    fn rows_split_by_day_and_files_hold_their_rows() {
        let day0 = 1_700_000_000_000; // 2023-11-14
        let range = LogRange {
            log_id: 3,
            partition: 2,
            start: 10,
            end: 13,
            entries: vec![
                entry(10, day0, b"a"),
                entry(11, day0 + 86_400_000, b"b"),
                entry(12, day0 + 1, b"c"),
            ],
        };
        let options =
            FileOptions { target_file_bytes: 1 << 20, row_group_bytes: 1 << 16, codec: Codec::Zstd };
        let encoded = encode_range(Layout::Entries, &range, options).unwrap();
        assert_eq!(encoded.rows, 3);
        assert_eq!(encoded.files.len(), 2);
        assert_eq!((encoded.files[0].day, encoded.files[0].rows), (19_675, 2));
        assert_eq!((encoded.files[1].day, encoded.files[1].rows), (19_676, 1));
        let file = encoded.files[0].data_file("file:///t/a.parquet".into(), 0, Layout::Entries).unwrap();
        assert_eq!(file.record_count(), 2);
        assert_eq!(file.lower_bounds()[&OFFSET_ID], Datum::long(10));
        assert_eq!(file.upper_bounds()[&OFFSET_ID], Datum::long(12));
    }

    #[test]
    fn an_entry_outside_the_range_is_refused() {
        let range = LogRange { log_id: 1, partition: 0, start: 5, end: 6, entries: vec![entry(4, 0, b"x")] };
        let options =
            FileOptions { target_file_bytes: 1 << 20, row_group_bytes: 1 << 16, codec: Codec::Snappy };
        assert!(encode_range(Layout::Entries, &range, options).unwrap_err().contains("outside the range"));
    }
}
