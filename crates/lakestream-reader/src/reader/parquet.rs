//! PARQUET records read by ranges ("Reading a PARQUET record"). A read of offset X in a
//! compacted file fetches:
//!
//! 1. the file's companion (whole: a gzip file of about 60 bytes per row) and, in parallel,
//!    the file's length (HEAD) and its last [`FOOTER_GUESS`] bytes, which hold the Parquet
//!    footer (one more ranged GET when the footer is larger);
//! 2. the row group holding X's row (the companion's offset map gives the row, the footer the
//!    row group and its byte range), and the following row groups while the read's byte
//!    budget lasts, each with one ranged GET of its column chunk.
//!
//! Never the file from its start: with the compactor's row groups of a few MiB, a read near
//! the end of a 128 MiB file fetches a few MiB. Every part is kept, decoded, in the reader's
//! file cache with single-flight loads (companions parsed, footers decoded, row groups as
//! their payloads), so concurrent reads of one file fetch each part once and later reads of
//! a row group cost no decoding. Row groups after the one being read (into the record's
//! next files) are read ahead within `read_ahead_bytes`. Decoding runs on a blocking thread.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use lakestream_format::compacted::{
    self, CompactedFileReader, FOOTER_TAIL_LEN, KNOWN_BINDINGS, RangedChunks,
};
use lakestream_format::companion::{self, Companion};
use lakestream_format::entry_index::ParquetRecord;
use lakestream_format::{Entry, LogId, LogRef, Offset};
use lakestream_meta::Record;
use lakestream_objstore::{ByteRange, ObjectPath, ObjectStoreError};

use super::{Attempt, Reader};
use crate::error::ReadError;

/// The first GET of a compacted file's tail: enough for the footer of a file of hundreds of
/// row groups, so that one request usually gets it.
pub(crate) const FOOTER_GUESS: u64 = 64 << 10;

/// What the file cache holds: parts of compacted files (and whole legacy WAL objects).
#[derive(Debug, Clone)]
pub(super) enum CachedFile {
    /// A whole object's bytes (legacy WAL objects).
    Whole(Bytes),
    /// A parsed companion.
    Companion(Arc<Companion>),
    /// A compacted file's length, footer and row-group layout.
    Layout(Arc<FileLayout>),
    /// The payloads of one row group, in row order.
    RowGroup(Arc<Vec<Bytes>>),
}

/// A compacted file's layout, from its footer.
#[derive(Debug)]
pub(super) struct FileLayout {
    len: u64,
    /// A reader holding only the decoded footer, its binding and schema checked.
    footer: CompactedFileReader<RangedChunks>,
    /// The first row of each row group, then the row count.
    group_starts: Vec<u64>,
    /// The byte range of each row group's column chunk (empty for a group of no rows).
    chunks: Vec<Range<u64>>,
    /// The whole file, when the first GET of its tail got all of it.
    whole: Option<Bytes>,
}

impl FileLayout {
    fn rows(&self) -> u64 {
        self.group_starts.last().copied().unwrap_or(0)
    }

    fn groups(&self) -> usize {
        self.chunks.len()
    }

    /// The row group holding `row` (< rows).
    fn group_of(&self, row: u64) -> usize {
        self.group_starts[..self.groups()].partition_point(|start| *start <= row).saturating_sub(1)
    }

    fn group_rows(&self, group: usize) -> Range<u64> {
        self.group_starts[group]..self.group_starts[group + 1]
    }

    /// Bytes a fetch of `group` costs (none when the whole file is held).
    fn fetch_bytes(&self, group: usize) -> u64 {
        if self.whole.is_some() { 0 } else { self.chunks[group].end - self.chunks[group].start }
    }
}

fn corrupt(log_id: LogId, path: &str, detail: impl std::fmt::Display) -> ReadError {
    ReadError::Corrupt { log_id, what: format!("compacted file {path}"), detail: detail.to_string() }
}

impl Reader {
    /// A PARQUET record: the file holding `from`, its companion's row for `from`, then rows
    /// onward (into later row groups and files of the record) within `budget`.
    pub(super) async fn read_parquet(
        &self,
        log: &LogRef,
        record: &Record,
        start: Offset,
        from: Offset,
        pq: &ParquetRecord,
        budget: usize,
    ) -> Result<Attempt<Vec<Entry>>, ReadError> {
        let log_id = log.log_id;
        let first = pq.file_index.locate(start, from).map_err(|e| ReadError::Corrupt {
            log_id,
            what: record.key.clone(),
            detail: e.to_string(),
        })?;
        let dir = format!("{}/{}", log.namespace, log.stream);
        let files = &pq.file_index.entries()[first.position..];
        let mut entries = Vec::new();
        let mut taken = 0usize;
        let mut next = from;
        for (i, file) in files.iter().enumerate() {
            let data_path = format!("{dir}/{}", file.name);
            let companion_name = compacted::companion_name(&file.name).map_err(|e| ReadError::Corrupt {
                log_id,
                what: record.key.clone(),
                detail: e.to_string(),
            })?;
            let companion_path = format!("{dir}/{companion_name}");
            let (companion, layout) =
                tokio::join!(self.companion(log_id, &companion_path), self.layout(log_id, &data_path));
            let companion = match companion? {
                Attempt::Done(c) => c,
                Attempt::Missing(o) => return Ok(Attempt::Missing(o)),
            };
            let layout = match layout? {
                Attempt::Done(l) => l,
                Attempt::Missing(o) => return Ok(Attempt::Missing(o)),
            };
            let rows = companion.rows();
            if layout.rows() != rows.len() as u64 {
                return Err(corrupt(
                    log_id,
                    &data_path,
                    format!("{} rows, but its companion describes {}", layout.rows(), rows.len()),
                ));
            }
            let Some(first_row) = companion.row_holding(next) else {
                return Err(ReadError::Corrupt {
                    log_id,
                    what: format!("companion {companion_path}"),
                    detail: format!("no row holds offset {next} (file index says {} holds it)", file.name),
                });
            };
            // Take rows while within budget (at least one row overall).
            let mut end_row = first_row;
            while end_row < rows.len() && (taken == 0 || taken < budget) {
                taken += rows[end_row].entry_size as usize;
                end_row += 1;
            }
            // The row groups after the first this read needs load in the background, with
            // those that follow within the read-ahead budget.
            let first_group = layout.group_of(first_row as u64);
            let later: Vec<String> = files[i + 1..].iter().map(|f| format!("{dir}/{}", f.name)).collect();
            self.read_ahead_parquet(log_id, &data_path, &layout, first_group + 1, later);
            let mut row = first_row;
            while row < end_row {
                let group = layout.group_of(row as u64);
                let payloads = match self.row_group(log_id, &data_path, &layout, group).await? {
                    Attempt::Done(p) => p,
                    Attempt::Missing(o) => return Ok(Attempt::Missing(o)),
                };
                let group_rows = layout.group_rows(group);
                let group_end = (group_rows.end as usize).min(end_row);
                for (r, companion_row) in rows.iter().enumerate().take(group_end).skip(row) {
                    let payload = payloads[r - group_rows.start as usize].clone();
                    if payload.len() != companion_row.entry_size as usize {
                        return Err(corrupt(
                            log_id,
                            &data_path,
                            format!(
                                "row {r} holds {} bytes, its companion row says {}",
                                payload.len(),
                                companion_row.entry_size
                            ),
                        ));
                    }
                    entries.push(Entry {
                        offset: companion_row.offset,
                        record_count: companion_row.record_count,
                        timestamp_ms: companion_row.timestamp_ms, // from the row (spec MUST)
                        payload,
                    });
                    next = companion_row.end_offset();
                }
                row = group_end;
            }
            if taken >= budget || end_row < rows.len() {
                break;
            }
        }
        Ok(Attempt::Done(entries))
    }

    /// The companion at `path`, parsed, from the file cache or the store.
    pub(super) async fn companion(
        &self,
        log_id: LogId,
        path: &str,
    ) -> Result<Attempt<Arc<Companion>>, ReadError> {
        let load = async {
            let bytes = match self.get_object(&self.inner.deps.compacted, log_id, path).await? {
                Attempt::Done(b) => b,
                Attempt::Missing(_) => return Ok(None),
            };
            let parsed =
                companion::read_companion(&bytes, companion::ReadOptions::default()).map_err(|e| {
                    ReadError::Corrupt { log_id, what: format!("companion {path}"), detail: e.to_string() }
                })?;
            // A row takes about 48 bytes decoded, and its offset-map pair 16.
            let weight = parsed.rows().len() * 64 + 256;
            Ok::<_, ReadError>(Some((CachedFile::Companion(Arc::new(parsed)), weight)))
        };
        match self.inner.files.get_or_load(&format!("c/{path}#companion"), load).await? {
            Some(CachedFile::Companion(c)) => Ok(Attempt::Done(c)),
            Some(_) => Err(ReadError::Corrupt {
                log_id,
                what: format!("companion {path}"),
                detail: "another kind of value was cached under its name".into(),
            }),
            None => Ok(Attempt::Missing(path.to_string())),
        }
    }

    /// The layout of the compacted file at `path`: its length (HEAD) and footer (a GET of its
    /// last [`FOOTER_GUESS`] bytes, in parallel; one more GET when the footer is larger).
    async fn layout(&self, log_id: LogId, path: &str) -> Result<Attempt<Arc<FileLayout>>, ReadError> {
        let load = async {
            let store = &self.inner.deps.compacted;
            let object = ObjectPath::new(path.to_string()).map_err(|e| corrupt(log_id, path, e))?;
            let failed = |source| ReadError::Object { log_id, object: path.to_string(), source };
            let (head, tail) =
                tokio::join!(store.head(&object), store.get_range(&object, ByteRange::Suffix(FOOTER_GUESS)));
            let len = match head {
                Ok(meta) => meta.size,
                Err(ObjectStoreError::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(failed(e)),
            };
            let tail = match tail {
                Ok(b) => b,
                Err(ObjectStoreError::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(failed(e)),
            };
            if tail.len() < FOOTER_TAIL_LEN || tail.len() as u64 > len {
                return Err(corrupt(
                    log_id,
                    path,
                    format!("its last bytes are {} bytes long, of a {len}-byte file", tail.len()),
                ));
            }
            let metadata_len = compacted::footer_metadata_len(&tail[tail.len() - FOOTER_TAIL_LEN..])
                .map_err(|e| corrupt(log_id, path, e))? as u64;
            let footer_len = metadata_len + FOOTER_TAIL_LEN as u64;
            if footer_len > len {
                return Err(corrupt(
                    log_id,
                    path,
                    format!("a {metadata_len}-byte footer in a {len}-byte file"),
                ));
            }
            let metadata = if footer_len <= tail.len() as u64 {
                tail.slice(tail.len() - footer_len as usize..tail.len() - FOOTER_TAIL_LEN)
            } else {
                let range = ByteRange::Bounded(len - footer_len..len - FOOTER_TAIL_LEN as u64);
                match store.get_range(&object, range).await {
                    Ok(b) => b,
                    Err(ObjectStoreError::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(failed(e)),
                }
            };
            let footer = compacted::decode_footer(&metadata).map_err(|e| corrupt(log_id, path, e))?;
            let chunks = RangedChunks::new(len, Vec::new()).map_err(|e| corrupt(log_id, path, e))?;
            let footer = CompactedFileReader::with_footer(chunks, footer, KNOWN_BINDINGS)
                .map_err(|e| corrupt(log_id, path, e))?;
            let mut group_starts = Vec::with_capacity(footer.footer().num_row_groups() + 1);
            let mut chunk_ranges = Vec::with_capacity(footer.footer().num_row_groups());
            let mut row = 0u64;
            for group in footer.footer().row_groups() {
                // `with_footer` checked the counts: non-negative, and no overflow in the sum.
                let rows = u64::try_from(group.num_rows()).unwrap_or(0);
                let mut ranges = footer.byte_ranges(row..row + rows).map_err(|e| corrupt(log_id, path, e))?;
                group_starts.push(row);
                chunk_ranges.push(if rows == 0 { 0..0 } else { ranges.pop().unwrap_or(0..0) });
                row += rows;
            }
            group_starts.push(row);
            let whole = (tail.len() as u64 == len).then_some(tail);
            let weight =
                metadata.len() * 4 + 64 * chunk_ranges.len() + whole.as_ref().map_or(0, Bytes::len) + 1024;
            let layout = FileLayout { len, footer, group_starts, chunks: chunk_ranges, whole };
            Ok::<_, ReadError>(Some((CachedFile::Layout(Arc::new(layout)), weight)))
        };
        match self.inner.files.get_or_load(&format!("c/{path}#footer"), load).await? {
            Some(CachedFile::Layout(l)) => Ok(Attempt::Done(l)),
            Some(_) => Err(corrupt(log_id, path, "another kind of value was cached under its footer's name")),
            None => Ok(Attempt::Missing(path.to_string())),
        }
    }

    fn row_group_key(path: &str, group: usize) -> String {
        format!("c/{path}#{group}")
    }

    /// The payloads of row group `group` of the file at `path`: one ranged GET of its column
    /// chunk, decoded on a blocking thread, cached.
    async fn row_group(
        &self,
        log_id: LogId,
        path: &str,
        layout: &Arc<FileLayout>,
        group: usize,
    ) -> Result<Attempt<Arc<Vec<Bytes>>>, ReadError> {
        let load = async {
            let range = layout.chunks[group].clone();
            let bytes = match &layout.whole {
                Some(file) => file.slice(range.start as usize..range.end as usize),
                None => {
                    let object = ObjectPath::new(path.to_string()).map_err(|e| corrupt(log_id, path, e))?;
                    match self
                        .inner
                        .deps
                        .compacted
                        .get_range(&object, ByteRange::Bounded(range.clone()))
                        .await
                    {
                        Ok(b) => b,
                        Err(ObjectStoreError::NotFound { .. }) => return Ok(None),
                        Err(source) => {
                            return Err(ReadError::Object { log_id, object: path.to_string(), source });
                        }
                    }
                }
            };
            if bytes.len() as u64 != range.end - range.start {
                return Err(corrupt(
                    log_id,
                    path,
                    format!(
                        "row group {group}: got {} bytes of its {}",
                        bytes.len(),
                        range.end - range.start
                    ),
                ));
            }
            let (layout, rows) = (layout.clone(), layout.group_rows(group));
            let decoded = tokio::task::spawn_blocking(move || {
                let chunks = RangedChunks::new(layout.len, vec![(range.start, bytes)])?;
                CompactedFileReader::with_footer(chunks, layout.footer.footer().clone(), KNOWN_BINDINGS)?
                    .read_payloads(rows)
            })
            .await
            .map_err(|e| corrupt(log_id, path, format!("decoding row group {group}: {e}")))?
            .map_err(|e| corrupt(log_id, path, format!("row group {group}: {e}")))?;
            let weight = decoded.iter().map(Bytes::len).sum::<usize>() + 32 * decoded.len() + 64;
            Ok::<_, ReadError>(Some((CachedFile::RowGroup(Arc::new(decoded)), weight)))
        };
        match self.inner.files.get_or_load(&Self::row_group_key(path, group), load).await? {
            Some(CachedFile::RowGroup(p)) => Ok(Attempt::Done(p)),
            Some(_) => {
                Err(corrupt(log_id, path, "another kind of value was cached under a row group's name"))
            }
            None => Ok(Attempt::Missing(path.to_string())),
        }
    }

    /// Read-ahead of compacted files: loads, in the background, row groups from `first_group`
    /// of the file at `path` on, then of the files at `later` (their layouts and companions
    /// first), while the bytes being fetched ahead stay within `read_ahead_bytes` and no group
    /// lies further than that budget past the read.
    fn read_ahead_parquet(
        &self,
        log_id: LogId,
        path: &str,
        layout: &Arc<FileLayout>,
        first_group: usize,
        later: Vec<String>,
    ) {
        let budget = self.inner.config.read_ahead_bytes;
        if budget == 0 || (first_group >= layout.groups() && later.is_empty()) {
            return;
        }
        let (reader, path, layout) = (self.clone(), path.to_string(), layout.clone());
        tokio::spawn(async move {
            let mut ahead = 0usize;
            let files = std::iter::once(path).chain(later);
            for (i, path) in files.enumerate() {
                let (layout, from) = if i == 0 {
                    (layout.clone(), first_group)
                } else {
                    let companion =
                        format!("{}.index", path.strip_suffix(compacted::PARQUET_SUFFIX).unwrap_or(&path));
                    let (_, got) =
                        tokio::join!(reader.companion(log_id, &companion), reader.layout(log_id, &path));
                    match got {
                        Ok(Attempt::Done(l)) => (l, 0),
                        _ => return, // the read that needs it reports the error
                    }
                };
                for group in from..layout.groups() {
                    let size = usize::try_from(layout.fetch_bytes(group)).unwrap_or(usize::MAX);
                    ahead = ahead.saturating_add(size);
                    if ahead > budget.saturating_add(size) {
                        return;
                    }
                    if size == 0 || reader.inner.files.contains(&Self::row_group_key(&path, group)) {
                        continue;
                    }
                    let in_flight = &reader.inner.read_ahead_in_flight;
                    let before = in_flight.fetch_add(size, Ordering::SeqCst);
                    if before > 0 && before + size > budget {
                        in_flight.fetch_sub(size, Ordering::SeqCst);
                        return;
                    }
                    let (reader, path, layout) = (reader.clone(), path.clone(), layout.clone());
                    tokio::spawn(async move {
                        // Errors are the later read's to report; read-ahead only warms the cache.
                        let _ = reader.row_group(log_id, &path, &layout, group).await;
                        reader.inner.read_ahead_in_flight.fetch_sub(size, Ordering::SeqCst);
                    });
                }
            }
        });
    }
}
