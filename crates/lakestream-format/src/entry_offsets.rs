//! Entry boundaries as JavaFastPFOR 0.2.1 `IntegratedIntCompressor` words ("Entry offsets",
//! Appendix D).
//!
//! A RAW record with n > 1 entries carries the boundaries `A[i]` = the record counts of
//! entries `0..=i` summed, compressed by `IntegratedIntCompressor` created with its default
//! constructor: a skippable composition of integrated binary packing and integrated
//! variable-byte coding. "Integrated" means the codec works on deltas (`A[0]`, then
//! `A[i] − A[i−1]`). The words are:
//!
//! ```text
//! word 0               n
//! binary packing       floor(n/32) blocks of 32 deltas:
//!                        per group of 4 blocks: header b0<<24 | b1<<16 | b2<<8 | b3,
//!                          then b0 + b1 + b2 + b3 packed words;
//!                        per leftover block: header b, then b packed words
//!                      (delta j of a block sits at bits j*b .. j*b+b-1, LSB first)
//! marker               one 0 word, only when n < 32 (no packed part)
//! variable-byte tail   the last n mod 32 deltas, 7 bits per byte, least-significant group
//!                      first, 0x80 on the LAST byte of each delta; zero-padded to whole
//!                      words, read little-endian
//! ```
//!
//! `compressed_payload` stores each word as a big-endian int32 ([`words_to_be_bytes`]).
//!
//! Like the Java codec, [`encode`] takes any 32-bit values and computes wrapping deltas; the
//! record-level rules (strictly increasing, `A[n−1]` = `message_count`) live in
//! [`crate::entry_index`]. [`decode`] is strict: it accepts exactly the words [`encode`]
//! produces (so `encode(decode(w)) == w` for every accepted `w`), and returns an error, never
//! a panic, for anything else.
//!
//! ```
//! use lakestream_format::entry_offsets;
//! // Appendix D: A = [2, 3] -> 00000002 00000000 00008182.
//! let words = entry_offsets::encode(&[2, 3]).unwrap();
//! assert_eq!(words, [2, 0, 0x8182]);
//! assert_eq!(entry_offsets::decode(&words).unwrap(), [2, 3]);
//! ```

use crate::error::{FormatError, Result};

const STRUCTURE: &str = "entry offsets (FastPFOR)";

/// Deltas per bit-packed block.
const BLOCK: usize = 32;
/// Blocks that share one header word.
const BLOCKS_PER_GROUP: usize = 4;

/// Compresses `values` exactly as `IntegratedIntCompressor.compress` does.
///
/// Fails only when `values` has more than 2³¹ − 1 elements, which a Java `int[]` cannot hold.
pub fn encode(values: &[u32]) -> Result<Vec<u32>> {
    let n = u32::try_from(values.len())
        .ok()
        .filter(|&n| n <= i32::MAX as u32)
        .ok_or_else(|| FormatError::invalid(STRUCTURE, format!("{} values exceed 2^31-1", values.len())))?;
    let mut out = Vec::with_capacity(values.len() + values.len() / 32 + 3);
    out.push(n);
    if values.is_empty() {
        // The composition writes nothing at all for an empty input, not even the marker.
        return Ok(out);
    }
    let packed_len = values.len() / BLOCK * BLOCK;
    let mut previous = 0u32;
    let mut deltas = [0u32; BLOCK];
    let mut start = 0;
    while start < packed_len {
        let blocks_here = if packed_len - start >= BLOCK * BLOCKS_PER_GROUP { BLOCKS_PER_GROUP } else { 1 };
        let header_at = out.len();
        out.push(0);
        let mut header = 0u32;
        for block in 0..blocks_here {
            let chunk = &values[start + block * BLOCK..start + (block + 1) * BLOCK];
            let mut any_bits = 0u32;
            for (delta, &value) in deltas.iter_mut().zip(chunk) {
                *delta = value.wrapping_sub(previous);
                previous = value;
                any_bits |= *delta;
            }
            let width = bit_length(any_bits);
            header =
                if blocks_here == 1 { width } else { header | width << (8 * (BLOCKS_PER_GROUP - 1 - block)) };
            pack_block(&deltas, width, &mut out);
        }
        out[header_at] = header;
        start += blocks_here * BLOCK;
    }
    if packed_len == 0 {
        out.push(0);
    }
    encode_variable_byte_tail(&values[packed_len..], previous, &mut out);
    Ok(out)
}

/// Decompresses words produced by `IntegratedIntCompressor.compress`, refusing anything that
/// the compressor would not have produced: a bit width above 32 or wider than its block needs,
/// a missing or non-zero marker, a malformed or overlong variable-byte delta, non-zero padding,
/// truncation, and words after the last value.
pub fn decode(words: &[u32]) -> Result<Vec<u32>> {
    let Some((&n_word, rest)) = words.split_first() else {
        return Err(corrupt("no words: word 0 must hold the number of values"));
    };
    if n_word > i32::MAX as u32 {
        return Err(corrupt(format!("word 0 (the value count) is {}, negative as an int32", n_word as i32)));
    }
    let n = n_word as usize;
    if n == 0 {
        return if rest.is_empty() {
            Ok(Vec::new())
        } else {
            Err(corrupt(format!("{} words after a value count of 0", rest.len())))
        };
    }
    let blocks = n / BLOCK;
    let tail_len = n % BLOCK;
    // Every block group needs a header word, and every tail value at least one byte: refuse a
    // count the words cannot hold before allocating room for it.
    let min_words = if blocks == 0 { 1 } else { blocks / BLOCKS_PER_GROUP + blocks % BLOCKS_PER_GROUP }
        + tail_len.div_ceil(4);
    if rest.len() < min_words {
        return Err(corrupt(format!(
            "{n} values need at least {min_words} words after word 0, found {}",
            rest.len()
        )));
    }
    let mut values = Vec::with_capacity(n);
    let mut pos = 0usize;
    let mut previous = 0u32;
    let mut remaining_blocks = blocks;
    while remaining_blocks > 0 {
        let header = take(rest, &mut pos, "block header")?;
        let widths: Vec<u32> = if remaining_blocks >= BLOCKS_PER_GROUP {
            remaining_blocks -= BLOCKS_PER_GROUP;
            (0..BLOCKS_PER_GROUP).map(|b| header >> (8 * (BLOCKS_PER_GROUP - 1 - b)) & 0xFF).collect()
        } else {
            remaining_blocks -= 1;
            vec![header]
        };
        for width in widths {
            if width > 32 {
                return Err(corrupt(format!(
                    "bit width {width} of block {} exceeds 32",
                    values.len() / BLOCK
                )));
            }
            let packed = rest.get(pos..pos + width as usize).ok_or_else(|| {
                corrupt(format!("block {} of bit width {width} is truncated", values.len() / BLOCK))
            })?;
            pos += width as usize;
            let deltas = unpack_block(packed, width);
            let used_bits = bit_length(deltas.iter().fold(0, |acc, d| acc | d));
            if used_bits != width {
                return Err(corrupt(format!(
                    "block {} declares bit width {width} but its deltas need {used_bits}",
                    values.len() / BLOCK
                )));
            }
            for delta in deltas {
                previous = previous.wrapping_add(delta);
                values.push(previous);
            }
        }
    }
    if blocks == 0 {
        let marker = take(rest, &mut pos, "marker word")?;
        if marker != 0 {
            return Err(corrupt(format!(
                "marker word after word 0 is {marker:#010x}, must be 0 when n < 32"
            )));
        }
    }
    let tail_words = decode_variable_byte_tail(&rest[pos..], tail_len, &mut previous, &mut values)?;
    pos += tail_words;
    if pos != rest.len() {
        return Err(corrupt(format!("{} words after the last of {n} values", rest.len() - pos)));
    }
    Ok(values)
}

/// [`encode`] followed by [`words_to_be_bytes`]: the `compressed_payload` of an `EntryOffsets`.
pub fn encode_to_bytes(values: &[u32]) -> Result<Vec<u8>> {
    encode(values).map(|words| words_to_be_bytes(&words))
}

/// [`words_from_be_bytes`] followed by [`decode`].
pub fn decode_from_bytes(bytes: &[u8]) -> Result<Vec<u32>> {
    decode(&words_from_be_bytes(bytes)?)
}

/// Each word as a big-endian int32, as `compressed_payload` stores them.
pub fn words_to_be_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// Reads `compressed_payload` bytes as big-endian words; the length must be a multiple of 4.
pub fn words_from_be_bytes(bytes: &[u8]) -> Result<Vec<u32>> {
    let (chunks, remainder) = bytes.as_chunks::<4>();
    if !remainder.is_empty() {
        return Err(corrupt(format!("{} bytes is not a whole number of 4-byte words", bytes.len())));
    }
    Ok(chunks.iter().map(|c| u32::from_be_bytes(*c)).collect())
}

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt(STRUCTURE, detail)
}

fn take(words: &[u32], pos: &mut usize, what: &str) -> Result<u32> {
    let word = words.get(*pos).copied().ok_or_else(|| corrupt(format!("truncated before the {what}")))?;
    *pos += 1;
    Ok(word)
}

/// The number of bits needed to hold `x` (0 for 0), Java's `32 - numberOfLeadingZeros(x)`.
fn bit_length(x: u32) -> u32 {
    u32::BITS - x.leading_zeros()
}

/// Appends `width` words holding the 32 deltas at `width` bits each, least-significant first.
fn pack_block(deltas: &[u32; BLOCK], width: u32, out: &mut Vec<u32>) {
    if width == 0 {
        return;
    }
    let mut acc: u64 = 0;
    let mut acc_bits = 0u32;
    for &delta in deltas {
        acc |= u64::from(delta) << acc_bits;
        acc_bits += width;
        if acc_bits >= 32 {
            out.push(acc as u32);
            acc >>= 32;
            acc_bits -= 32;
        }
    }
}

/// The 32 deltas of a block packed at `width` bits (`packed.len() == width`, `width <= 32`).
fn unpack_block(packed: &[u32], width: u32) -> [u32; BLOCK] {
    let mut deltas = [0u32; BLOCK];
    if width == 0 {
        return deltas;
    }
    let mask = if width == 32 { u64::from(u32::MAX) } else { (1u64 << width) - 1 };
    let mut words = packed.iter();
    let mut acc: u64 = 0;
    let mut acc_bits = 0u32;
    for delta in &mut deltas {
        if acc_bits < width {
            // `packed` holds exactly 32 * width bits, so a word is there whenever one is needed.
            acc |= u64::from(words.next().copied().unwrap_or(0)) << acc_bits;
            acc_bits += 32;
        }
        *delta = (acc & mask) as u32;
        acc >>= width;
        acc_bits -= width;
    }
    deltas
}

/// Appends the variable-byte words of `values` (deltas from `previous`).
fn encode_variable_byte_tail(values: &[u32], mut previous: u32, out: &mut Vec<u32>) {
    if values.is_empty() {
        return;
    }
    let mut bytes = Vec::with_capacity(values.len() * 5 + 3);
    for &value in values {
        let mut delta = value.wrapping_sub(previous);
        previous = value;
        while delta >= 0x80 {
            bytes.push(delta as u8 & 0x7F);
            delta >>= 7;
        }
        bytes.push(delta as u8 | 0x80);
    }
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    let (chunks, _) = bytes.as_chunks::<4>();
    out.extend(chunks.iter().map(|c| u32::from_le_bytes(*c)));
}

/// Decodes `count` variable-byte deltas from the start of `words`, appending the running sums
/// to `values`. Returns how many words the tail took.
fn decode_variable_byte_tail(
    words: &[u32],
    count: usize,
    previous: &mut u32,
    values: &mut Vec<u32>,
) -> Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    let bytes: Vec<u8> = words.iter().take(count * 5 / 4 + 2).flat_map(|w| w.to_le_bytes()).collect();
    let mut pos = 0usize;
    for index in 0..count {
        let mut delta: u64 = 0;
        let mut group = 0usize;
        loop {
            let byte = *bytes
                .get(pos)
                .ok_or_else(|| corrupt(format!("variable-byte delta {index} of {count} is truncated")))?;
            pos += 1;
            delta |= u64::from(byte & 0x7F) << (7 * group);
            group += 1;
            if byte & 0x80 != 0 {
                if byte == 0x80 && group > 1 {
                    return Err(corrupt(format!("variable-byte delta {index} is not minimally encoded")));
                }
                break;
            }
            if group == 5 {
                return Err(corrupt(format!("variable-byte delta {index} is longer than 5 bytes")));
            }
        }
        let delta = u32::try_from(delta)
            .map_err(|_| corrupt(format!("variable-byte delta {index} ({delta}) exceeds 32 bits")))?;
        *previous = previous.wrapping_add(delta);
        values.push(*previous);
    }
    let used_words = pos.div_ceil(4);
    if bytes[pos..used_words * 4].iter().any(|&b| b != 0) {
        return Err(corrupt("non-zero padding after the last variable-byte delta"));
    }
    Ok(used_words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appendix_d_example_2_3() {
        assert_eq!(encode(&[2, 3]).unwrap(), [2, 0, 0x0000_8182]);
    }

    #[test]
    fn empty_and_single_inputs() {
        assert_eq!(encode(&[]).unwrap(), [0]);
        assert_eq!(decode(&[0]).unwrap(), Vec::<u32>::new());
        assert_eq!(encode(&[7]).unwrap(), [1, 0, 0x87]);
        assert_eq!(decode(&[1, 0, 0x87]).unwrap(), [7]);
    }

    #[test]
    fn pack_unpack_every_width() {
        for width in 0..=32u32 {
            let max = if width == 32 { u32::MAX } else { (1u32 << width).wrapping_sub(1) };
            let mut deltas = [0u32; BLOCK];
            for (j, d) in deltas.iter_mut().enumerate() {
                *d = if j % 3 == 0 { max } else { (j as u32).wrapping_mul(2_654_435_761) & max };
            }
            let mut packed = Vec::new();
            pack_block(&deltas, width, &mut packed);
            assert_eq!(packed.len(), width as usize);
            assert_eq!(unpack_block(&packed, width), deltas, "width {width}");
        }
    }
}
