//! Byte ranges of [`ObjectStore::get_range`](crate::ObjectStore::get_range), and the one
//! place that decides what a range means for an object of a given size, so that every
//! backend answers the same.

use std::fmt;
use std::ops::Range;

use crate::error::ObjectStoreError;
use crate::path::ObjectPath;

/// A byte range of an object.
///
/// | range | bytes returned for an object of `size` bytes | error |
/// |---|---|---|
/// | `Bounded(start..end)` | `[start, min(end, size))` | `start > end`; `start > size` |
/// | `From(start)` | `[start, size)` | `start > size` |
/// | `Suffix(n)` | the last `min(n, size)` bytes | never |
///
/// A range that starts exactly at the end of the object returns no bytes, and an empty
/// `Bounded` range returns no bytes even past the end (S3 would answer 416 for both; the S3
/// backend smooths that over).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ByteRange {
    /// Bytes `start..end` (end exclusive), truncated at the end of the object.
    Bounded(Range<u64>),
    /// Bytes from `start` to the end of the object.
    From(u64),
    /// The last `n` bytes of the object (the whole object if it is shorter).
    Suffix(u64),
}

impl ByteRange {
    /// Checks what can be checked without the object's size: a `Bounded` range must not end
    /// before it starts.
    pub fn validate(&self, path: &ObjectPath) -> Result<(), ObjectStoreError> {
        match self {
            ByteRange::Bounded(r) if r.start > r.end => Err(ObjectStoreError::InvalidRange {
                path: path.to_string(),
                range: self.to_string(),
                reason: "the range ends before it starts".to_owned(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the range selects no bytes whatever the object's size.
    pub fn is_empty(&self) -> bool {
        match self {
            ByteRange::Bounded(r) => r.start >= r.end,
            ByteRange::From(_) => false,
            ByteRange::Suffix(n) => *n == 0,
        }
    }

    /// The absolute byte offsets this range selects in an object of `size` bytes.
    pub fn resolve(&self, path: &ObjectPath, size: u64) -> Result<Range<u64>, ObjectStoreError> {
        self.validate(path)?;
        let beyond_end = |start: u64| ObjectStoreError::InvalidRange {
            path: path.to_string(),
            range: self.to_string(),
            reason: format!("starts at byte {start}, beyond the end of the {size}-byte object"),
        };
        match self {
            ByteRange::Bounded(r) if r.start == r.end => Ok(r.start.min(size)..r.start.min(size)),
            ByteRange::Bounded(r) if r.start > size => Err(beyond_end(r.start)),
            ByteRange::Bounded(r) => Ok(r.start..r.end.min(size)),
            ByteRange::From(start) if *start > size => Err(beyond_end(*start)),
            ByteRange::From(start) => Ok(*start..size),
            ByteRange::Suffix(n) => Ok(size - (*n).min(size)..size),
        }
    }

    /// The HTTP `Range` header value for this range (`bytes=a-b`, `bytes=a-`, `bytes=-n`), or
    /// `None` when the range is empty and must be answered without a range request.
    pub fn to_http_header(&self) -> Option<String> {
        match self {
            _ if self.is_empty() => None,
            ByteRange::Bounded(r) => Some(format!("bytes={}-{}", r.start, r.end - 1)),
            ByteRange::From(start) => Some(format!("bytes={start}-")),
            ByteRange::Suffix(n) => Some(format!("bytes=-{n}")),
        }
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByteRange::Bounded(r) => write!(f, "{}..{}", r.start, r.end),
            ByteRange::From(start) => write!(f, "{start}.."),
            ByteRange::Suffix(n) => write!(f, "last {n} bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> ObjectPath {
        ObjectPath::new("o").unwrap()
    }

    #[test]
    fn resolves_against_size() {
        let p = path();
        let r = |range: ByteRange, size| range.resolve(&p, size).ok();
        assert_eq!(r(ByteRange::Bounded(2..5), 10), Some(2..5));
        assert_eq!(r(ByteRange::Bounded(8..50), 10), Some(8..10));
        assert_eq!(r(ByteRange::Bounded(10..11), 10), Some(10..10));
        assert_eq!(r(ByteRange::Bounded(11..12), 10), None);
        assert_eq!(r(ByteRange::Bounded(20..20), 10), Some(10..10));
        assert_eq!(r(ByteRange::From(0), 10), Some(0..10));
        assert_eq!(r(ByteRange::From(10), 10), Some(10..10));
        assert_eq!(r(ByteRange::From(11), 10), None);
        assert_eq!(r(ByteRange::Suffix(3), 10), Some(7..10));
        assert_eq!(r(ByteRange::Suffix(30), 10), Some(0..10));
        assert_eq!(r(ByteRange::Suffix(0), 10), Some(10..10));
        assert_eq!(r(ByteRange::Suffix(5), 0), Some(0..0));
    }

    #[test]
    #[allow(clippy::reversed_empty_ranges)] // the point of the test
    fn rejects_a_range_that_ends_before_it_starts() {
        let err = ByteRange::Bounded(5..3).resolve(&path(), 10).unwrap_err();
        assert!(err.to_string().contains("ends before it starts"), "{err}");
    }

    #[test]
    fn http_headers() {
        assert_eq!(ByteRange::Bounded(0..10).to_http_header().as_deref(), Some("bytes=0-9"));
        assert_eq!(ByteRange::From(7).to_http_header().as_deref(), Some("bytes=7-"));
        assert_eq!(ByteRange::Suffix(4).to_http_header().as_deref(), Some("bytes=-4"));
        assert_eq!(ByteRange::Suffix(0).to_http_header(), None);
        assert_eq!(ByteRange::Bounded(3..3).to_http_header(), None);
    }
}
