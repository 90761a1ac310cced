//! The `varint32` of WAL log sections: unsigned LEB128 (seven bits per byte, least-significant
//! group first, continuation bit 0x80 on every byte except the last), limited to 5 bytes and to
//! values between 0 and 2³¹ − 1 ("WAL objects", [Writer] varint32 rule; addendum §2).
//!
//! The writer always emits the shortest encoding. The reader accepts every encoding a
//! conforming writer may produce: the spec bounds a varint32 to 5 bytes and 2³¹ − 1 but does
//! not require the shortest form, so a non-minimal encoding such as `80 00` for 0 is read as
//! its value. It refuses a truncated varint, an encoding longer than 5 bytes and a value above
//! 2³¹ − 1, which break the [Writer] rule.

/// The largest value a varint32 may hold: 2³¹ − 1.
pub(crate) const VARINT32_MAX: u32 = i32::MAX as u32;

/// The most bytes a varint32 may take.
const VARINT32_MAX_BYTES: usize = 5;

/// Why a varint32 could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The bytes ended before the last byte of the varint.
    Truncated,
    /// The encoding continues past 5 bytes.
    TooLong,
    /// The value exceeds 2³¹ − 1.
    TooLarge(u64),
}

impl std::fmt::Display for VarintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VarintError::Truncated => f.write_str("truncated varint32"),
            VarintError::TooLong => f.write_str("varint32 longer than 5 bytes"),
            VarintError::TooLarge(v) => write!(f, "varint32 value {v} exceeds 2^31-1"),
        }
    }
}

/// Appends the varint32 encoding of `value`. The caller guarantees `value <= VARINT32_MAX`;
/// every writer path checks that before it gets here.
pub(crate) fn write_varint32(out: &mut Vec<u8>, value: u32) {
    debug_assert!(value <= VARINT32_MAX);
    let mut rest = value;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7F) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// The number of bytes `write_varint32` emits for `value`.
pub(crate) fn varint32_len(value: u32) -> usize {
    match value {
        0..0x80 => 1,
        0x80..0x4000 => 2,
        0x4000..0x20_0000 => 3,
        0x20_0000..0x1000_0000 => 4,
        _ => 5,
    }
}

/// Reads one varint32 from `bytes` at `*pos`, advancing `*pos` past it on success.
pub(crate) fn read_varint32(bytes: &[u8], pos: &mut usize) -> Result<u32, VarintError> {
    let mut value: u64 = 0;
    for i in 0..VARINT32_MAX_BYTES {
        let Some(&byte) = bytes.get(*pos + i) else {
            return Err(VarintError::Truncated);
        };
        value |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            if value > u64::from(VARINT32_MAX) {
                return Err(VarintError::TooLarge(value));
            }
            *pos += i + 1;
            return Ok(value as u32);
        }
    }
    Err(VarintError::TooLong)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(value: u32) -> Vec<u8> {
        let mut out = Vec::new();
        write_varint32(&mut out, value);
        out
    }

    #[test]
    fn leb128_low_group_first_with_continuation_bits() {
        assert_eq!(encode(0), [0x00]);
        assert_eq!(encode(5), [0x05]);
        assert_eq!(encode(127), [0x7F]);
        assert_eq!(encode(128), [0x80, 0x01]);
        assert_eq!(encode(300), [0xAC, 0x02]);
        assert_eq!(encode(VARINT32_MAX), [0xFF, 0xFF, 0xFF, 0xFF, 0x07]);
    }

    #[test]
    fn length_matches_encoding_at_every_boundary() {
        for v in [0, 127, 128, 16383, 16384, 0x1F_FFFF, 0x20_0000, 0x0FFF_FFFF, 0x1000_0000, VARINT32_MAX] {
            assert_eq!(varint32_len(v), encode(v).len(), "{v}");
            let bytes = encode(v);
            let mut pos = 0;
            assert_eq!(read_varint32(&bytes, &mut pos), Ok(v));
            assert_eq!(pos, bytes.len());
        }
    }

    #[test]
    fn writer_rule_at_most_5_bytes_and_at_most_2_pow_31_minus_1_enforced_on_read() {
        // 6-byte encoding.
        assert_eq!(read_varint32(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00], &mut 0), Err(VarintError::TooLong));
        // 2^31 in 5 bytes.
        assert_eq!(
            read_varint32(&[0x80, 0x80, 0x80, 0x80, 0x08], &mut 0),
            Err(VarintError::TooLarge(1 << 31))
        );
        // 2^35 - 1, the largest 5-byte value.
        assert!(matches!(
            read_varint32(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F], &mut 0),
            Err(VarintError::TooLarge(_))
        ));
        // Truncated.
        assert_eq!(read_varint32(&[0x80], &mut 0), Err(VarintError::Truncated));
        assert_eq!(read_varint32(&[], &mut 0), Err(VarintError::Truncated));
    }

    #[test]
    fn reader_accepts_non_minimal_encodings_within_5_bytes() {
        // The spec bounds a varint32 by 5 bytes and 2^31 - 1, not by the shortest form: a
        // reader takes another writer's `80 00` as 0.
        for (bytes, value) in [
            (&[0x80, 0x00][..], 0),
            (&[0x85, 0x80, 0x00], 5),
            (&[0x80, 0x80, 0x80, 0x80, 0x00], 0),
            (&[0xFF, 0xFF, 0xFF, 0xFF, 0x07], VARINT32_MAX),
            (&[0xFF, 0x80, 0x80, 0x80, 0x00], 127),
        ] {
            let mut pos = 0;
            assert_eq!(read_varint32(bytes, &mut pos), Ok(value), "{bytes:02x?}");
            assert_eq!(pos, bytes.len(), "{bytes:02x?}");
        }
    }

    // spec-rule: 6299d96336 [Writer] A writer MUST encode each varint32 in at most 5 bytes, with a value b…
    #[test]
    fn writer_emits_the_shortest_encoding() {
        // Our writer stays canonical: every value in the fewest bytes, never `80 00`.
        for v in
            [0, 1, 127, 128, 300, 16383, 16384, 0x1F_FFFF, 0x20_0000, 0x0FFF_FFFF, 0x1000_0000, VARINT32_MAX]
        {
            let bytes = encode(v);
            assert!(bytes.len() == 1 || *bytes.last().unwrap() != 0, "{v}: {bytes:02x?}");
        }
    }
}
