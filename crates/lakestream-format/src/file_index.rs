//! The file index of a PARQUET record ("File index"; addendum §6.4).
//!
//! The value of the record's `CompactedObjectFileIndex` extraData pair is the standard Base64
//! (RFC 4648, with `=` padding) of one entry per compacted file, in ascending offset order:
//!
//! ```text
//! last_offset   int64 BE   the last offset the file holds (inclusive)
//! name_length   int32 BE
//! name          name_length bytes of UTF-8, ending in ".parquet"
//! ```
//!
//! The file holding offset `o` is the first whose `last_offset` >= `o`; its base offset is the
//! previous file's `last_offset + 1`, or the record's start offset `s` for the first file.
//!
//! Parsing is strict where Ursa's is lenient (addendum §12 #6): a trailing partial entry, a
//! negative or over-long `name_length`, a negative, repeated or descending `last_offset`, a
//! repeated name, and a name that does not end in `.parquet` (or holds it twice) are errors.
//!
//! ```
//! use lakestream_format::file_index::FileIndex;
//! let index = FileIndex::from_base64("AAAAAAAAAAIAAAALNy0wLnBhcnF1ZXQAAAAAAAAABgAAAAs3LTMucGFycXVldA==")?;
//! let found = index.locate(0, 4)?;
//! assert_eq!((found.name, found.base_offset), ("7-3.parquet", 3));
//! # Ok::<(), lakestream_format::FormatError>(())
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::error::{FormatError, Result};
use crate::types::Offset;

/// The extraData key whose value is the file index.
pub const FILE_INDEX_KEY: &str = "CompactedObjectFileIndex";

/// The suffix every compacted file name ends in, exactly once.
pub const PARQUET_SUFFIX: &str = ".parquet";

const STRUCTURE: &str = "file index";

/// One compacted file of a PARQUET record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileIndexEntry {
    /// The last offset the file holds (inclusive).
    pub last_offset: Offset,
    /// The file name, relative to the stream's compacted directory.
    pub name: String,
}

/// The file found by [`FileIndex::locate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLocation<'a> {
    /// The file's position in the index, from 0.
    pub position: usize,
    /// The file name.
    pub name: &'a str,
    /// The first offset the file holds.
    pub base_offset: Offset,
    /// The last offset the file holds.
    pub last_offset: Offset,
}

/// A validated file index: at least one file, ascending distinct `last_offset`s, distinct
/// `.parquet` names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileIndex {
    entries: Vec<FileIndexEntry>,
}

impl FileIndex {
    /// A file index of `entries`, checked by the rules of the format (see the module docs).
    pub fn new(entries: Vec<FileIndexEntry>) -> Result<FileIndex> {
        check_entries(&entries).map_err(|detail| FormatError::invalid(STRUCTURE, detail))?;
        Ok(FileIndex { entries })
    }

    /// The files, in ascending offset order.
    pub fn entries(&self) -> &[FileIndexEntry] {
        &self.entries
    }

    /// The name of the first file: the `location` of the PARQUET record.
    pub fn first_name(&self) -> &str {
        // `check_entries` guarantees at least one entry.
        self.entries.first().map_or("", |e| e.name.as_str())
    }

    /// The last offset of the last file: `e − 1` for the record's range `[s, e)`.
    pub fn last_offset(&self) -> Offset {
        self.entries.last().map_or(0, |e| e.last_offset)
    }

    /// The binary form, before Base64.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.iter().map(|e| 12 + e.name.len()).sum());
        for entry in &self.entries {
            // `check_entries` bounds both fields to their Java types.
            out.extend_from_slice(&(entry.last_offset as i64).to_be_bytes());
            out.extend_from_slice(&(entry.name.len() as i32).to_be_bytes());
            out.extend_from_slice(entry.name.as_bytes());
        }
        out
    }

    /// The extraData value: standard Base64 with padding of [`encode`](Self::encode).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.encode())
    }

    /// Parses the binary form strictly.
    pub fn decode(bytes: &[u8]) -> Result<FileIndex> {
        let mut entries = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let at = bytes.len() - rest.len();
            let Some((head, after)) = rest.split_first_chunk::<12>() else {
                return Err(corrupt(format!(
                    "{} bytes at byte {at} are a partial entry (an entry has at least 12)",
                    rest.len()
                )));
            };
            let (offset_bytes, length_bytes) = head.split_at(8);
            let last_offset = i64::from_be_bytes(offset_bytes.try_into().unwrap_or([0; 8]));
            let name_length = i32::from_be_bytes(length_bytes.try_into().unwrap_or([0; 4]));
            let name_len = usize::try_from(name_length).map_err(|_| {
                corrupt(format!(
                    "entry {} at byte {at} has negative name_length {name_length}",
                    entries.len()
                ))
            })?;
            let Some(name_bytes) = after.get(..name_len) else {
                return Err(corrupt(format!(
                    "entry {} at byte {at}: name_length {name_length} exceeds the {} bytes left",
                    entries.len(),
                    after.len()
                )));
            };
            let name = std::str::from_utf8(name_bytes)
                .map_err(|_| corrupt(format!("name of entry {} at byte {at} is not UTF-8", entries.len())))?;
            let last_offset = u64::try_from(last_offset).map_err(|_| {
                corrupt(format!("entry {} has negative last_offset {last_offset}", entries.len()))
            })?;
            entries.push(FileIndexEntry { last_offset, name: name.to_owned() });
            rest = &after[name_len..];
        }
        check_entries(&entries).map_err(corrupt)?;
        Ok(FileIndex { entries })
    }

    /// Parses the extraData value: standard Base64 with padding, then [`decode`](Self::decode).
    pub fn from_base64(text: &str) -> Result<FileIndex> {
        let bytes = STANDARD
            .decode(text)
            .map_err(|e| corrupt(format!("value is not standard padded Base64: {e}")))?;
        Self::decode(&bytes)
    }

    /// The file that holds `offset`, for a record whose range starts at `start`.
    ///
    /// Errors when `offset` is below `start` or above the last file's `last_offset`, and when
    /// `start` lies above the first file's `last_offset` (the first file would hold nothing).
    pub fn locate(&self, start: Offset, offset: Offset) -> Result<FileLocation<'_>> {
        let last = self.last_offset();
        if offset < start || offset > last {
            return Err(FormatError::invalid(
                STRUCTURE,
                format!("offset {offset} is outside the record's offsets {start}..={last}"),
            ));
        }
        if let Some(first) = self.entries.first()
            && start > first.last_offset
        {
            return Err(corrupt(format!(
                "record start {start} is above the first file's last_offset {}",
                first.last_offset
            )));
        }
        let position = self.entries.partition_point(|e| e.last_offset < offset);
        let entry = &self.entries[position];
        let base_offset = if position == 0 { start } else { self.entries[position - 1].last_offset + 1 };
        Ok(FileLocation { position, name: &entry.name, base_offset, last_offset: entry.last_offset })
    }
}

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt(STRUCTURE, detail)
}

/// The rules every file index obeys, for both the encoder's input and the decoder's output.
fn check_entries(entries: &[FileIndexEntry]) -> std::result::Result<(), String> {
    if entries.is_empty() {
        return Err("no files: a PARQUET record names at least one compacted file".into());
    }
    let mut names = std::collections::HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        if entry.last_offset > i64::MAX as u64 {
            return Err(format!("file {i}: last_offset {} exceeds 2^63-1", entry.last_offset));
        }
        if entry.name.len() > i32::MAX as usize {
            return Err(format!("file {i}: name of {} bytes exceeds 2^31-1", entry.name.len()));
        }
        if !entry.name.ends_with(PARQUET_SUFFIX) || entry.name.matches(PARQUET_SUFFIX).count() != 1 {
            return Err(format!(
                "file {i}: name {:?} must end in \".parquet\" and contain it once",
                entry.name
            ));
        }
        if !names.insert(entry.name.as_str()) {
            return Err(format!("file {i}: name {:?} appears more than once", entry.name));
        }
        if let Some(previous) = i.checked_sub(1).map(|p| &entries[p])
            && entry.last_offset <= previous.last_offset
        {
            return Err(format!(
                "file {i}: last_offset {} does not ascend from the previous {}",
                entry.last_offset, previous.last_offset
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(offsets: &[u64]) -> FileIndex {
        FileIndex::new(
            offsets
                .iter()
                .map(|&o| FileIndexEntry { last_offset: o, name: format!("f-{o}.parquet") })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn lookup_picks_first_file_at_or_above_the_offset() {
        // Ursa's CompactedObjectFileIndexTest: last offsets 10, 20, 30; 15 → second file, base 11.
        let idx = index(&[10, 20, 30]);
        let found = idx.locate(0, 15).unwrap();
        assert_eq!(
            (found.position, found.name, found.base_offset, found.last_offset),
            (1, "f-20.parquet", 11, 20)
        );
        assert_eq!(idx.locate(0, 10).unwrap().position, 0);
        assert_eq!(idx.locate(0, 11).unwrap().base_offset, 11);
        assert_eq!(idx.locate(0, 30).unwrap().position, 2);
        assert!(idx.locate(0, 31).is_err());
        assert!(idx.locate(5, 4).is_err());
        assert!(idx.locate(11, 11).is_err(), "start above the first file's last offset");
    }

    // spec-rule: 9bc0ff7256 [Compactor] A compactor MUST give each compacted file a name that ends in .par…
    #[test]
    fn names_must_end_in_parquet_once() {
        for bad in ["a.index", "a.parquet.parquet", "a.parquetx", ""] {
            let entries = vec![FileIndexEntry { last_offset: 1, name: bad.into() }];
            assert!(FileIndex::new(entries).is_err(), "{bad:?}");
        }
    }
}
