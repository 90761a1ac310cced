//! Oxia's hierarchical key order (v0.15+, the default `--key-sorting`), which every backend
//! of this crate uses within a partition.
//!
//! A key is encoded as
//!
//! ```text
//! +----------------------+-------------------------------------------+
//! | depth: u16 BE        | the key's bytes with every '/' -> 0xFF     |
//! +----------------------+-------------------------------------------+
//! depth = number of '/' in the key, minus one when the key ends with "//"
//! ```
//!
//! and encoded keys compare bytewise. Keys therefore sort first by depth, then bytewise with
//! `/` ranking above every other byte. UTF-8 text never contains the byte 0xFF, so the encoding
//! is injective and [`decode`] inverts it.
//!
//! The "minus one for a trailing `//`" rule makes `"/a//"` the same depth as `"/a/x"` and
//! greater than all of them, so `List("/a/", "/a//")` returns exactly the direct children of
//! `/a/` (the idiom Ursa uses for registrations).
//!
//! For Lakestream this gives the spec's key-order property ("Metadata store model"): keys
//! without `/` (index keys) have depth 0 and compare bytewise, and every key that contains `/`
//! has depth ≥ 1, so none sorts between two `/`-free keys.
//!
//! Oxia sets bit 15 of the depth for its internal `__oxia/` keys; we never store such keys,
//! so depths above [`MAX_DEPTH`] are refused.

use std::cmp::Ordering;

use crate::error::{MetaError, MetaResult};

/// The largest depth a key may have: bit 15 of the encoded depth is Oxia's internal-key flag.
pub const MAX_DEPTH: usize = 0x7FFF;

/// The byte that stands for `/` in an encoded key.
const SLASH_BYTE: u8 = 0xFF;

/// The depth of a key: its number of `/`, minus one when it ends with `//`.
pub fn depth(key: &str) -> usize {
    let slashes = key.bytes().filter(|&b| b == b'/').count();
    if key.ends_with("//") { slashes - 1 } else { slashes }
}

/// Encodes `key` in the hierarchical form whose bytewise order is the key order.
///
/// Fails with [`MetaError::InvalidRequest`] when the key is deeper than [`MAX_DEPTH`].
pub fn encode(key: &str) -> MetaResult<Vec<u8>> {
    let depth = depth(key);
    let depth = u16::try_from(depth).ok().filter(|d| usize::from(*d) <= MAX_DEPTH).ok_or_else(|| {
        MetaError::InvalidRequest(format!(
            "key has depth {depth}, more than the {MAX_DEPTH} levels the key order allows"
        ))
    })?;
    let mut encoded = Vec::with_capacity(2 + key.len());
    encoded.extend_from_slice(&depth.to_be_bytes());
    encoded.extend(key.bytes().map(|b| if b == b'/' { SLASH_BYTE } else { b }));
    Ok(encoded)
}

/// Decodes a key that [`encode`] produced.
///
/// Fails with [`MetaError::Internal`] when the bytes are not an encoded key: shorter than the
/// depth prefix, a depth that does not match the key, or not UTF-8. Such bytes can only come
/// from a damaged store.
pub fn decode(encoded: &[u8]) -> MetaResult<String> {
    let Some((depth_bytes, body)) = encoded.split_first_chunk::<2>() else {
        return Err(MetaError::Internal(format!(
            "stored key {encoded:02x?} is shorter than its 2-byte depth prefix"
        )));
    };
    let bytes: Vec<u8> = body.iter().map(|&b| if b == SLASH_BYTE { b'/' } else { b }).collect();
    let key = String::from_utf8(bytes)
        .map_err(|_| MetaError::Internal(format!("stored key {encoded:02x?} is not UTF-8 once decoded")))?;
    let stored_depth = usize::from(u16::from_be_bytes(*depth_bytes));
    if stored_depth != depth(&key) {
        return Err(MetaError::Internal(format!(
            "stored key {key:?} has depth prefix {stored_depth}, but its depth is {}",
            depth(&key)
        )));
    }
    Ok(key)
}

/// Compares two keys in the hierarchical order, without allocating.
///
/// Equal to comparing [`encode`]`(a)` with [`encode`]`(b)` for every key `encode` accepts.
pub fn compare(a: &str, b: &str) -> Ordering {
    let by_depth = depth(a).cmp(&depth(b));
    let map = |b: u8| if b == b'/' { SLASH_BYTE } else { b };
    by_depth.then_with(|| a.bytes().map(map).cmp(b.bytes().map(map)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_format::LogId;
    use lakestream_format::keys;
    use proptest::prelude::*;

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        keys.sort_by(|a, b| compare(a, b));
        keys
    }

    #[test]
    fn encoding_layout() {
        assert_eq!(encode("abc").unwrap(), [0, 0, b'a', b'b', b'c']);
        assert_eq!(encode("/a/b").unwrap(), [0, 2, 0xFF, b'a', 0xFF, b'b']);
        // A trailing "//" counts one slash less.
        assert_eq!(encode("/a//").unwrap(), [0, 2, 0xFF, b'a', 0xFF, 0xFF]);
        assert_eq!(encode("").unwrap(), [0, 0]);
    }

    #[test]
    fn oxia_table_9_4_xyz_example() {
        // oxia.md §9.4, first row: the hierarchical column (the order shown in Oxia's docs).
        let keys = ["/xyz/A/1/a", "/xyz/B/1", "/xyz/C", "/xyz/A/2", "/xyz/A", "/xyz/A/1", "/xyz/B"];
        assert_eq!(
            sorted(&keys),
            ["/xyz/A", "/xyz/B", "/xyz/C", "/xyz/A/1", "/xyz/A/2", "/xyz/B/1", "/xyz/A/1/a"]
        );
    }

    #[test]
    fn oxia_table_9_4_pairs() {
        // oxia.md §9.4, rows two to four, hierarchical column.
        assert_eq!(sorted(&["a/b/c", "b/z"]), ["b/z", "a/b/c"]);
        assert_eq!(sorted(&["/a", "a/b"]), ["a/b", "/a"]);
        assert_eq!(sorted(&["/a/b", "/a/", "/ab", "/a"]), ["/a", "/ab", "/a/", "/a/b"]);
    }

    #[test]
    fn direct_children_idiom() {
        // oxia.md §7.5: List("/a/", "/a//") holds the direct children of /a/ and nothing else.
        let (start, end) = ("/a/", "/a//");
        let inside = |k: &str| compare(start, k).is_le() && compare(k, end).is_lt();
        assert!(inside("/a/x") && inside("/a/zzz") && inside("/a/\u{FFFF}"));
        assert!(!inside("/a/x/y") && !inside("/b/x") && !inside("/a") && !inside("/ab"));
    }

    #[test]
    fn spec_key_order_property_for_lakestream_keys() {
        // Spec "Metadata store model", Key order: keys without '/' are ordered bytewise, and
        // no key containing '/' sorts between two keys without '/'.
        let l7 = LogId(7);
        let l42 = LogId(42);
        let mut all = vec![
            keys::trim_marker_key(l7),
            keys::index_key(l42, 1, 1),
            keys::fence_key(l7),
            keys::lease_key(l7, "3f2b7c1e-0000-4000-8000-000000000000"),
            keys::index_key(l7, 3, 8),
            keys::compaction_cursor_key(l7),
            keys::index_key(l7, 10, 9),
            "/stream-id/7".to_string(),
            "ursa-wal-cleanup-lock".to_string(),
            keys::last_key(l7),
            keys::first_key(l7),
        ];
        all.sort_by(|a, b| compare(a, b));
        let first_slash = all.iter().position(|k| k.contains('/')).unwrap();
        assert!(
            all[first_slash..].iter().all(|k| k.contains('/')),
            "a '/' key sorts between '/'-free keys: {all:?}"
        );
        let plain = &all[..first_slash];
        assert!(
            plain.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
            "'/'-free keys not bytewise: {plain:?}"
        );
        // oxia.md §9.4: the order of the '/' records of a log.
        assert_eq!(
            &all[first_slash..],
            [
                "/first-uncompacted-offset/7",
                "/mark-deleted-offsets/7",
                "/stream-id/7",
                "/stream-write-fences/7",
                "/stream-write-leases/7/3f2b7c1e-0000-4000-8000-000000000000"
            ]
        );
    }

    #[test]
    fn lease_range_holds_uuid_tokens_only_of_that_log() {
        let l = LogId(7);
        let (start, end) = (keys::lease_prefix(l), keys::lease_range_end(l));
        let inside = |k: &str| compare(&start, k).is_le() && compare(k, &end).is_lt();
        assert!(inside(&keys::lease_key(l, "3f2b7c1e-0000-4000-8000-000000000000")));
        assert!(!inside(&keys::lease_key(LogId(70), "t")));
        assert!(!inside(&keys::fence_key(l)));
    }

    #[test]
    fn too_deep_keys_are_refused() {
        let key = "/".repeat(MAX_DEPTH + 1) + "x";
        assert!(matches!(encode(&key), Err(MetaError::InvalidRequest(_))));
        assert!(encode(&("/".repeat(MAX_DEPTH) + "x")).is_ok());
    }

    #[test]
    fn damaged_encodings_are_refused() {
        assert!(matches!(decode(&[0]), Err(MetaError::Internal(_))));
        assert!(matches!(decode(&[0, 1, b'a']), Err(MetaError::Internal(_))));
        assert!(matches!(decode(&[0, 0, 0xC3]), Err(MetaError::Internal(_))));
    }

    proptest! {
        #[test]
        fn compare_equals_bytewise_order_of_encodings(a in "[a/b\u{e9}]{0,8}", b in "[a/b\u{e9}]{0,8}") {
            let (ea, eb) = (encode(&a).unwrap(), encode(&b).unwrap());
            prop_assert_eq!(compare(&a, &b), ea.cmp(&eb));
            prop_assert_eq!(decode(&ea).unwrap(), a);
        }
    }
}
