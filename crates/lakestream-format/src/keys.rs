//! Metadata-store keys of a log ("Offset index keys", "Trim marker", "Write leases and fences").
//!
//! An index key is 62 ASCII bytes, three 20-digit zero-padded decimals joined by `-`:
//!
//! ```text
//! {log_id:020}-{end_offset:020}-{cumulative_size:020}
//! 00000000000000000007-00000000000000000003-00000000000000000008   K(7, 3, 8)
//! ```
//!
//! Because the fields have a fixed width, the bytewise order of a log's keys is the order of
//! its records. Every record of log `L` lives in partition `P(L)`, the decimal `L`. The other
//! records of a log begin with `/`, so they never sort between two index keys.

use crate::error::{FormatError, Result};
use crate::types::LogId;

/// `MAX` = 2⁶³ − 1, the largest end offset or cumulative size a key can hold.
pub const MAX: u64 = i64::MAX as u64;

/// The length of an index key in bytes.
pub const INDEX_KEY_LEN: usize = 62;

const STRUCTURE: &str = "index key";

/// A parsed index key `K(L, end_offset, cumulative_size)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexKey {
    /// The log ID `L`.
    pub log_id: LogId,
    /// The exclusive end offset of the record's range.
    pub end_offset: u64,
    /// The log's cumulative payload size at `end_offset`.
    pub cumulative_size: u64,
}

impl IndexKey {
    /// `K(L, x, y)`.
    pub fn new(log_id: LogId, end_offset: u64, cumulative_size: u64) -> Self {
        Self { log_id, end_offset, cumulative_size }
    }

    /// The key's text.
    pub fn encode(&self) -> String {
        index_key(self.log_id, self.end_offset, self.cumulative_size)
    }

    /// Parses a key's text, requiring exactly three 20-digit fields, each at most `MAX`.
    pub fn parse(key: &str) -> Result<Self> {
        let b = key.as_bytes();
        if b.len() != INDEX_KEY_LEN || b[20] != b'-' || b[41] != b'-' {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!("{key:?} is not three 20-digit numbers joined by '-'"),
            ));
        }
        let field = |range: std::ops::Range<usize>, name: &str| -> Result<u64> {
            let digits = &b[range];
            if !digits.iter().all(u8::is_ascii_digit) {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!("{name} of {key:?} is not 20 decimal digits"),
                ));
            }
            let value = digits.iter().fold(0u128, |acc, d| acc * 10 + u128::from(d - b'0'));
            if value > u128::from(MAX) {
                return Err(FormatError::corrupt(STRUCTURE, format!("{name} of {key:?} exceeds 2^63-1")));
            }
            Ok(value as u64)
        };
        Ok(Self {
            log_id: LogId(field(0..20, "log_id")?),
            end_offset: field(21..41, "end_offset")?,
            cumulative_size: field(42..62, "cumulative_size")?,
        })
    }
}

impl std::fmt::Display for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.encode())
    }
}

/// The partition name `P(L)`: the decimal log ID without leading zeros.
pub fn partition(log_id: LogId) -> String {
    log_id.0.to_string()
}

/// The index-key prefix `{L:020}`, the key argument of the sequenced put (A3).
pub fn index_prefix(log_id: LogId) -> String {
    format!("{:020}", log_id.0)
}

/// `K(L, x, y)` as text.
pub fn index_key(log_id: LogId, end_offset: u64, cumulative_size: u64) -> String {
    format!("{:020}-{:020}-{:020}", log_id.0, end_offset, cumulative_size)
}

/// The prefix check after `Higher` or `Floor` (R2): whether `key` is an index key of `L`,
/// i.e. begins with `{L:020}-`.
pub fn is_index_key_of(key: &str, log_id: LogId) -> bool {
    let b = key.as_bytes();
    b.len() > 20 && b[20] == b'-' && key[..20] == index_prefix(log_id)
}

/// `K(L, o, MAX)`: sorts after every key of `L` whose end offset is `o` or less and before
/// every key whose end offset is greater. R2 looks up `Higher(K(L, o', MAX))`.
pub fn covering_lookup_key(log_id: LogId, offset: u64) -> String {
    index_key(log_id, offset, MAX)
}

/// `K(L, 0, 0)`: the smallest possible index key of `L`.
pub fn first_key(log_id: LogId) -> String {
    index_key(log_id, 0, 0)
}

/// `K(L, MAX, MAX)`: the largest possible index key of `L`. `Floor` of it finds the last
/// record; log deletion deletes `[K(L,0,0), K(L,MAX,MAX))`.
pub fn last_key(log_id: LogId) -> String {
    index_key(log_id, MAX, MAX)
}

/// The trim marker `/mark-deleted-offsets/{L}`; its value is B in ASCII decimal.
pub fn trim_marker_key(log_id: LogId) -> String {
    format!("/mark-deleted-offsets/{}", log_id.0)
}

/// The write fence `/stream-write-fences/{L}`; its value is the single byte `0x01`.
pub fn fence_key(log_id: LogId) -> String {
    format!("/stream-write-fences/{}", log_id.0)
}

/// The value Ursa writes for a write fence.
pub const FENCE_VALUE: &[u8] = &[0x01];

/// The prefix of the lease records of `L`: `/stream-write-leases/{L}/`.
pub fn lease_prefix(log_id: LogId) -> String {
    format!("/stream-write-leases/{}/", log_id.0)
}

/// The exclusive end of a List over the lease records of `L`: the prefix followed by U+FFFF
/// (the UTF-8 bytes `EF BF BF`), as Ursa lists them.
pub fn lease_range_end(log_id: LogId) -> String {
    format!("/stream-write-leases/{}/\u{FFFF}", log_id.0)
}

/// A lease record `/stream-write-leases/{L}/{token}`; its value is the token as UTF-8.
pub fn lease_key(log_id: LogId, token: &str) -> String {
    format!("/stream-write-leases/{}/{}", log_id.0, token)
}

/// The compaction cursor `/first-uncompacted-offset/{L}` (implementation-defined, Appendix B).
pub fn compaction_cursor_key(log_id: LogId) -> String {
    format!("/first-uncompacted-offset/{}", log_id.0)
}

/// The prefix of every idempotent producer's state record (implementation-defined, not in
/// the spec): `/lakestream-producers/{L:020}/{producer}` in `P(L)`.
pub const PRODUCER_STATE_PREFIX: &str = "/lakestream-producers/";

/// The state record of `producer` on `L`.
pub fn producer_state_key(log_id: LogId, producer: &str) -> String {
    format!("{PRODUCER_STATE_PREFIX}{:020}/{producer}", log_id.0)
}

/// The range `[start, end)` of every producer state record of `L`. In the metadata store's
/// hierarchical key order, `…/{L}//` is as deep as `…/{L}/{producer}` and above every such key.
pub fn producer_state_range(log_id: LogId) -> (String, String) {
    (
        format!("{PRODUCER_STATE_PREFIX}{:020}/", log_id.0),
        format!("{PRODUCER_STATE_PREFIX}{:020}//", log_id.0),
    )
}

/// Encodes a trim marker value: B in ASCII decimal, no sign, padding or newline.
pub fn encode_trim_marker(b: u64) -> Vec<u8> {
    b.to_string().into_bytes()
}

/// Decodes a trim marker value: ASCII decimal digits, nothing else. The spec asks for B "in
/// ASCII decimal digits" and no more, so leading zeros another writer may put there are
/// accepted (`007` is 7); [`encode_trim_marker`] never writes them.
pub fn decode_trim_marker(value: &[u8]) -> Result<u64> {
    const S: &str = "trim marker";
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(FormatError::corrupt(
            S,
            format!("value {:?} is not ASCII decimal digits", String::from_utf8_lossy(value)),
        ));
    }
    let text = std::str::from_utf8(value).map_err(|_| FormatError::corrupt(S, "not UTF-8"))?;
    // Leading zeros add nothing; what is left must fit in 64 bits.
    let digits = text.trim_start_matches('0');
    let b: u64 = if digits.is_empty() {
        0
    } else {
        digits
            .parse()
            .map_err(|_| FormatError::corrupt(S, format!("value {text:?} does not fit in 64 bits")))?
    };
    if b > MAX {
        return Err(FormatError::corrupt(S, format!("value {text} exceeds 2^63-1")));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_keys_spec_examples() {
        // Spec, "Offset index keys": the two illustrative keys and the running example K(7,3,8).
        assert_eq!(
            index_key(LogId(7), 3, 0),
            "00000000000000000007-00000000000000000003-00000000000000000000"
        );
        assert_eq!(
            index_key(LogId(7), 5, 0),
            "00000000000000000007-00000000000000000005-00000000000000000000"
        );
        assert_eq!(
            index_key(LogId(7), 3, 8),
            "00000000000000000007-00000000000000000003-00000000000000000008"
        );
        assert_eq!(
            covering_lookup_key(LogId(7), 2),
            "00000000000000000007-00000000000000000002-09223372036854775807"
        );
        assert_eq!(last_key(LogId(7)), "00000000000000000007-09223372036854775807-09223372036854775807");
        let k = IndexKey::parse("00000000000000000007-00000000000000000007-00000000000000000028").unwrap();
        assert_eq!(k, IndexKey::new(LogId(7), 7, 28));
        assert_eq!(k.encode().len(), INDEX_KEY_LEN);
    }

    // spec-rule: 8240198bb4 [All] An implementation MUST keep every record of log L that this specificatio…
    #[test]
    fn partition_is_decimal_without_leading_zeros() {
        // [All] records of L live in P(L), the decimal L without leading zeros.
        assert_eq!(partition(LogId(7)), "7");
        assert_eq!(partition(LogId(0)), "0");
        assert_eq!(index_prefix(LogId(42)), "00000000000000000042");
    }

    #[test]
    fn prefix_check_rejects_other_logs_and_slash_records() {
        assert!(is_index_key_of(&index_key(LogId(7), 3, 8), LogId(7)));
        assert!(!is_index_key_of(&index_key(LogId(70), 3, 8), LogId(7)));
        assert!(!is_index_key_of(&index_key(LogId(8), 0, 0), LogId(7)));
        assert!(!is_index_key_of("/mark-deleted-offsets/7", LogId(7)));
        assert!(!is_index_key_of("00000000000000000007", LogId(7)));
    }

    #[test]
    fn bad_keys_are_refused_with_the_reason() {
        for bad in [
            "",
            "7-3-8",
            "00000000000000000007-00000000000000000003-0000000000000000000x",
            "00000000000000000007_00000000000000000003-00000000000000000008",
            "99999999999999999999-00000000000000000003-00000000000000000008",
        ] {
            let err = IndexKey::parse(bad).unwrap_err();
            assert!(matches!(err, FormatError::Corrupt { structure: "index key", .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn key_order_is_record_order() {
        let a = index_key(LogId(7), 3, 8);
        let b = index_key(LogId(7), 10, 9);
        let c = covering_lookup_key(LogId(7), 3);
        assert!(a < c && c < b);
        assert!(last_key(LogId(7)) < first_key(LogId(8)));
    }

    #[test]
    fn record_keys_of_a_log() {
        assert_eq!(trim_marker_key(LogId(7)), "/mark-deleted-offsets/7");
        assert_eq!(fence_key(LogId(7)), "/stream-write-fences/7");
        assert_eq!(lease_key(LogId(7), "t"), "/stream-write-leases/7/t");
        assert_eq!(lease_range_end(LogId(7)).as_bytes().last_chunk::<3>(), Some(&[0xEF, 0xBF, 0xBF]));
        assert_eq!(compaction_cursor_key(LogId(7)), "/first-uncompacted-offset/7");
    }

    #[test]
    fn trim_marker_values() {
        assert_eq!(encode_trim_marker(12), b"12");
        assert_eq!(encode_trim_marker(0), b"0");
        assert_eq!(decode_trim_marker(b"0").unwrap(), 0);
        assert_eq!(decode_trim_marker(b"12").unwrap(), 12);
        for bad in [&b""[..], b"-1", b"+1", b"1 ", b" 1", b"1\n", b"0x1", b"99999999999999999999"] {
            assert!(decode_trim_marker(bad).is_err(), "{bad:?}");
        }
    }

    // spec-rule: d186fe1fb1 [Reader] A reader MUST read B from the trim marker of L, taking B as 0 when th…
    #[test]
    fn trim_marker_reader_accepts_leading_zeros() {
        // The spec: B "in ASCII decimal digits". Leading zeros are digits too: another
        // writer's `012` is B = 12, and a long run of zeros is still a small number.
        assert_eq!(decode_trim_marker(b"012").unwrap(), 12);
        assert_eq!(decode_trim_marker(b"00").unwrap(), 0);
        assert_eq!(decode_trim_marker(b"0000000000000000000000000009223372036854775807").unwrap(), MAX);
        assert!(decode_trim_marker(b"09223372036854775808").is_err(), "above 2^63-1");
    }
}
