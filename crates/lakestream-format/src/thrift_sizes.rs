//! A check of a Parquet footer's Thrift compact encoding before `parquet` decodes it:
//! `parquet` 58 reserves room for a list's declared element count before reading the
//! elements, so a footer of a few bytes that declares 10⁸ schema elements makes it allocate
//! gigabytes (found by the `compacted` fuzz target). Every element takes at least one byte, so
//! a list, set or map that declares more elements than bytes remain is corrupt; this walks the
//! whole encoding (skipping values) and refuses such a count, and nesting deeper than
//! [`MAX_DEPTH`]. `parquet` also reads a field by its id whatever type the field header
//! declares, so a `FileMetaData` field whose header declares another type than the Parquet
//! format gives it is refused too (at the top level; deeper structs are not checked yet).

/// The compact types of `FileMetaData`'s fields, by field id (parquet.thrift).
const FILE_METADATA_FIELDS: [(i64, u8); 9] =
    [(1, 5), (2, 9), (3, 6), (4, 9), (5, 9), (6, 8), (7, 9), (8, 12), (9, 8)];

/// The deepest nesting of structs and containers accepted (Parquet footers nest about 6).
pub(crate) const MAX_DEPTH: usize = 64;

struct Walker<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Walker<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("the footer ends inside a value")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift < 64 {
                value |= u64::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        let n = usize::try_from(n).ok().filter(|n| *n <= self.remaining());
        let n = n.ok_or("a value longer than the footer")?;
        self.at += n;
        Ok(())
    }

    /// Skips one value of compact type `kind`.
    fn value(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH}"));
        }
        match kind {
            1 | 2 => Ok(()), // booleans in a field header
            3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let len = self.varint()?;
                self.skip(len)
            }
            9 | 10 => {
                let header = self.byte()?;
                let count = match header >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                self.elements(count, &[header & 0x0f], depth)
            }
            11 => {
                let count = self.varint()?;
                if count == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                self.elements(count, &[types >> 4, types & 0x0f], depth)
            }
            12 => self.structure(depth + 1),
            other => Err(format!("unknown Thrift compact type {other}")),
        }
    }

    fn elements(&mut self, count: u64, kinds: &[u8], depth: usize) -> Result<(), String> {
        let per = kinds.len() as u64;
        if count.saturating_mul(per) > self.remaining() as u64 {
            return Err(format!(
                "a container declares {count} elements with {} bytes of the footer left",
                self.remaining()
            ));
        }
        for _ in 0..count {
            for &kind in kinds {
                // A boolean element is one byte of its own.
                if kind == 1 || kind == 2 { self.skip(1)? } else { self.value(kind, depth + 1)? }
            }
        }
        Ok(())
    }

    fn structure(&mut self, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH}"));
        }
        let mut field = 0i64;
        loop {
            let header = self.byte()?;
            if header == 0 {
                return Ok(());
            }
            field = match header >> 4 {
                0 => {
                    let raw = self.varint()?; // a field id written in full, zigzag
                    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
                }
                delta => field + i64::from(delta),
            };
            let kind = header & 0x0f;
            if depth == 0
                && let Some((_, expected)) = FILE_METADATA_FIELDS.iter().find(|(id, _)| *id == field)
                && kind != *expected
            {
                return Err(format!(
                    "FileMetaData field {field} is declared with compact type {kind}, not {expected}"
                ));
            }
            self.value(kind, depth)?;
        }
    }
}

/// Checks `metadata`, a footer's Thrift-encoded `FileMetaData`, as the module says.
pub(crate) fn check(metadata: &[u8]) -> Result<(), String> {
    Walker { bytes: metadata, at: 0 }.structure(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_declaring_more_elements_than_bytes_is_refused() {
        // FileMetaData { 1: version = 1, 2: schema = list<struct> of 100 000 000 elements }.
        let mut footer = vec![0x15, 0x02, 0x19, 0xfc];
        let mut n = 100_000_000u64;
        while n >= 0x80 {
            footer.push((n as u8) | 0x80);
            n >>= 7;
        }
        footer.push(n as u8);
        footer.push(0x00);
        let err = check(&footer).unwrap_err();
        assert!(err.contains("100000000 elements"), "{err}");
    }

    #[test]
    fn well_formed_structures_pass_and_truncations_fail() {
        // { 1: i32 1, 2: list<i32> [1, 2], 3: i64 1, 8: struct { 1: true } } STOP
        let footer = [0x15, 0x02, 0x19, 0x25, 0x02, 0x04, 0x16, 0x02, 0x5c, 0x11, 0x00, 0x00];
        check(&footer).unwrap();
        for cut in 0..footer.len() {
            assert!(check(&footer[..cut]).is_err(), "cut at {cut}");
        }
        let deep: Vec<u8> = [0x8c].into_iter().chain(std::iter::repeat_n(0x1c, 100)).collect();
        assert!(check(&deep).unwrap_err().contains("nested"));
        // Field 2 (the schema) declared as an i64: parquet would read a list there.
        let retyped = [0x26, 0x02, 0x00];
        assert!(check(&retyped).unwrap_err().contains("field 2"));
    }
}
