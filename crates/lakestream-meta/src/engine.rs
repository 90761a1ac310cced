//! The semantics of every primitive, written once over an abstract ordered key space, so the
//! in-memory and the embedded store behave identically.
//!
//! A [`KeySpace`] is one shard: an ordered map from hierarchical-encoded keys (see
//! [`crate::key_order`]) to [`StoredRecord`]s, plus the shard's version counter. The functions
//! here take the current time and the caller's session as arguments; the stores provide
//! locking, durability and session bookkeeping.

use bytes::Bytes;

use crate::error::{MetaError, MetaResult};
use crate::key_order;
use crate::store::{Comparison, PutCondition, Record, Version, WriteResult};

/// The identifier of a session inside a store.
pub(crate) type SessionId = u64;

/// A record as a shard keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredRecord {
    pub value: Bytes,
    pub version: Version,
    pub created_ms: i64,
    pub modified_ms: i64,
    /// The session an ephemeral record is bound to; `None` for a permanent record.
    pub session: Option<SessionId>,
}

impl StoredRecord {
    fn to_record(&self, key: String) -> Record {
        Record {
            key,
            value: self.value.clone(),
            version: self.version,
            created_ms: self.created_ms,
            modified_ms: self.modified_ms,
        }
    }

    fn to_write_result(&self, key: String) -> WriteResult {
        WriteResult { key, version: self.version, created_ms: self.created_ms, modified_ms: self.modified_ms }
    }
}

/// Read access to one shard, keyed by encoded keys.
pub(crate) trait KeySpace {
    /// The record under exactly this encoded key.
    fn get(&self, key: &[u8]) -> MetaResult<Option<StoredRecord>>;
    /// The nearest record by `cmp` (`Equal` is answered by [`KeySpace::get`]).
    fn seek(&self, key: &[u8], cmp: Comparison) -> MetaResult<Option<(Vec<u8>, StoredRecord)>>;
    /// Records with `start <= key < end` (`end = None`: to the end), at most `limit`.
    fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: Option<usize>,
    ) -> MetaResult<Vec<(Vec<u8>, StoredRecord)>>;
}

/// Write access to one shard.
pub(crate) trait KeySpaceMut: KeySpace {
    fn insert(&mut self, key: &[u8], record: &StoredRecord) -> MetaResult<()>;
    fn remove(&mut self, key: &[u8]) -> MetaResult<Option<StoredRecord>>;
    /// Takes the next value of the shard's version counter.
    fn next_version(&mut self) -> MetaResult<Version>;
}

/// `u64::MAX` as 20 digits: the suffix of the upper bound a sequenced put searches below.
const SEQUENCE_SEARCH_SUFFIX: &str = "-18446744073709551615";

fn require_key(what: &str, key: &str) -> MetaResult<()> {
    if key.is_empty() {
        return Err(MetaError::InvalidRequest(format!("{what} must not be empty")));
    }
    Ok(())
}

/// `Get` and the comparison lookups.
pub(crate) fn lookup(ks: &impl KeySpace, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
    let encoded = key_order::encode(key)?;
    match cmp {
        Comparison::Equal => Ok(ks.get(&encoded)?.map(|r| r.to_record(key.to_string()))),
        _ => match ks.seek(&encoded, cmp)? {
            Some((found, record)) => Ok(Some(record.to_record(key_order::decode(&found)?))),
            None => Ok(None),
        },
    }
}

/// `Put`, `CreateIfAbsent` and `CompareAndSet`; `session` makes the record ephemeral.
pub(crate) fn put(
    ks: &mut impl KeySpaceMut,
    key: &str,
    value: Bytes,
    condition: PutCondition,
    now_ms: i64,
    session: Option<SessionId>,
) -> MetaResult<WriteResult> {
    require_key("key", key)?;
    let encoded = key_order::encode(key)?;
    let existing = ks.get(&encoded)?;
    match (condition, &existing) {
        (PutCondition::None, _) | (PutCondition::IfAbsent, None) => {}
        (PutCondition::IfAbsent, Some(_)) => return Err(MetaError::KeyExists { key: key.to_string() }),
        (PutCondition::IfVersion(expected), Some(current)) if current.version == expected => {}
        (PutCondition::IfVersion(expected), _) => {
            return Err(MetaError::VersionMismatch { key: key.to_string(), expected });
        }
    }
    let record = StoredRecord {
        value,
        version: ks.next_version()?,
        // The spec's creation timestamp: set on create, kept when the value is replaced.
        created_ms: existing.as_ref().map_or(now_ms, |r| r.created_ms),
        modified_ms: now_ms,
        // As in Oxia, a permanent overwrite of an ephemeral record makes it permanent.
        session,
    };
    ks.insert(&encoded, &record)?;
    Ok(record.to_write_result(key.to_string()))
}

/// `Delete`: whether the key existed.
pub(crate) fn delete(ks: &mut impl KeySpaceMut, key: &str) -> MetaResult<bool> {
    Ok(ks.remove(&key_order::encode(key)?)?.is_some())
}

/// A conditional `Delete`: removes the key only while its version is `expected`.
pub(crate) fn delete_if_version(ks: &mut impl KeySpaceMut, key: &str, expected: Version) -> MetaResult<()> {
    let encoded = key_order::encode(key)?;
    match ks.get(&encoded)? {
        Some(current) if current.version == expected => {
            ks.remove(&encoded)?;
            Ok(())
        }
        _ => Err(MetaError::VersionMismatch { key: key.to_string(), expected }),
    }
}

/// `DeleteRange`: removes `start <= key < end`. Returns how many records it removed.
pub(crate) fn delete_range(ks: &mut impl KeySpaceMut, start: &str, end: &str) -> MetaResult<usize> {
    require_key("delete-range start", start)?;
    require_key("delete-range end", end)?;
    let (start, end) = (key_order::encode(start)?, key_order::encode(end)?);
    if start >= end {
        return Ok(0);
    }
    let doomed = ks.range(&start, Some(&end), None)?;
    for (key, _) in &doomed {
        ks.remove(key)?;
    }
    Ok(doomed.len())
}

/// `List` and `Scan`: the records with `start <= key < end` (an empty `end` means "to the end",
/// as in Oxia), at most `limit`.
pub(crate) fn scan(
    ks: &impl KeySpace,
    start: &str,
    end: &str,
    limit: Option<usize>,
) -> MetaResult<Vec<Record>> {
    let start = key_order::encode(start)?;
    let end = if end.is_empty() { None } else { Some(key_order::encode(end)?) };
    if end.as_ref().is_some_and(|end| &start >= end) || limit == Some(0) {
        return Ok(Vec::new());
    }
    ks.range(&start, end.as_deref(), limit)?
        .into_iter()
        .map(|(key, record)| Ok(record.to_record(key_order::decode(&key)?)))
        .collect()
}

/// `SequencedPut`, exactly as Oxia's server derives the key (oxia.md §8):
///
/// 1. take the greatest key below `prefix + "-18446744073709551615"`;
/// 2. if it starts with `prefix` (a plain string-prefix test), its counters are the text after
///    the prefix split on `-`, the empty first element dropped; otherwise all counters are 0;
/// 3. more counters than deltas is an error; each counter `i` becomes `counter_i + delta_i`;
/// 4. the record is created under `prefix-{c0:020}-{c1:020}…`.
pub(crate) fn sequenced_put(
    ks: &mut impl KeySpaceMut,
    prefix: &str,
    deltas: &[u64],
    value: Bytes,
    now_ms: i64,
) -> MetaResult<WriteResult> {
    require_key("sequence prefix", prefix)?;
    match deltas.first() {
        None => return Err(MetaError::InvalidRequest(format!("sequenced put on {prefix:?} has no deltas"))),
        Some(0) => {
            return Err(MetaError::InvalidRequest(format!(
                "sequenced put on {prefix:?}: the first delta must be > 0"
            )));
        }
        Some(_) => {}
    }
    let search_bound = key_order::encode(&format!("{prefix}{SEQUENCE_SEARCH_SUFFIX}"))?;
    let last = match ks.seek(&search_bound, Comparison::Lower)? {
        Some((found, _)) => Some(key_order::decode(&found)?),
        None => None,
    };
    let counters = match last.as_deref().and_then(|k| k.strip_prefix(prefix)) {
        Some(suffix) => parse_counters(prefix, suffix)?,
        None => Vec::new(),
    };
    if counters.len() > deltas.len() {
        return Err(MetaError::InvalidRequest(format!(
            "sequenced put on {prefix:?} gives {} deltas, but the greatest key {:?} has {} counters",
            deltas.len(),
            last.unwrap_or_default(),
            counters.len()
        )));
    }
    let mut key = prefix.to_string();
    for (i, delta) in deltas.iter().enumerate() {
        let current = counters.get(i).copied().unwrap_or(0);
        let next = current.checked_add(*delta).ok_or_else(|| {
            MetaError::InvalidRequest(format!(
                "sequenced put on {prefix:?}: counter {i} overflows ({current} + {delta})"
            ))
        })?;
        key.push_str(&format!("-{next:020}"));
    }
    // The derived key is greater than every key of the prefix, so it never exists already.
    put(ks, &key, value, PutCondition::None, now_ms, None)
}

/// The counters of a sequence key, from the text after its prefix.
fn parse_counters(prefix: &str, suffix: &str) -> MetaResult<Vec<u64>> {
    let mut parts: Vec<&str> = suffix.split('-').collect();
    if parts.first() == Some(&"") {
        parts.remove(0);
    }
    parts
        .iter()
        .map(|part| {
            part.parse::<u64>().map_err(|_| {
                MetaError::InvalidRequest(format!(
                    "sequenced put on {prefix:?}: the greatest key {:?} is not a sequence key ({part:?} is not a counter)",
                    format!("{prefix}{suffix}")
                ))
            })
        })
        .collect()
}

/// Removes the ephemeral records of an ended session among `keys` (records since overwritten
/// permanently or re-created by another session stay).
pub(crate) fn remove_session_records<'k>(
    ks: &mut impl KeySpaceMut,
    session: SessionId,
    keys: impl IntoIterator<Item = &'k Vec<u8>>,
) -> MetaResult<()> {
    for key in keys {
        if ks.get(key)?.is_some_and(|r| r.session == Some(session)) {
            ks.remove(key)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The primitives' edge cases on a plain BTreeMap key space; the conformance suite runs
    //! the same semantics through every store.
    use super::*;
    use crate::memory::Shard;

    fn shard() -> Shard {
        Shard::default()
    }

    fn v(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn sequenced_put_oxia_example_for_log_7() {
        // oxia.md §8, the Lakestream example on an empty log.
        let mut ks = shard();
        let p = "00000000000000000007";
        let k1 = sequenced_put(&mut ks, p, &[3, 8], v("a"), 1).unwrap().key;
        let k2 = sequenced_put(&mut ks, p, &[2, 5], v("b"), 2).unwrap().key;
        let k3 = sequenced_put(&mut ks, p, &[1, 0], v("c"), 3).unwrap().key;
        assert_eq!(k1, "00000000000000000007-00000000000000000003-00000000000000000008");
        assert_eq!(k2, "00000000000000000007-00000000000000000005-00000000000000000013");
        assert_eq!(k3, "00000000000000000007-00000000000000000006-00000000000000000013");
    }

    #[test]
    fn sequenced_put_upstream_single_dimension_example() {
        let mut ks = shard();
        assert_eq!(sequenced_put(&mut ks, "a", &[1], v("x"), 1).unwrap().key, "a-00000000000000000001");
        assert_eq!(sequenced_put(&mut ks, "a", &[3], v("x"), 1).unwrap().key, "a-00000000000000000004");
    }

    #[test]
    fn sequenced_put_more_counters_than_deltas_is_refused() {
        let mut ks = shard();
        sequenced_put(&mut ks, "p", &[1, 1], v("x"), 1).unwrap();
        let err = sequenced_put(&mut ks, "p", &[1], v("x"), 1).unwrap_err();
        assert!(matches!(err, MetaError::InvalidRequest(ref m) if m.contains("2 counters")), "{err}");
        // Fewer counters than deltas: the missing ones start at 0.
        assert_eq!(
            sequenced_put(&mut ks, "p", &[1, 1, 5], v("x"), 1).unwrap().key,
            "p-00000000000000000002-00000000000000000002-00000000000000000005"
        );
    }

    #[test]
    fn sequenced_put_first_delta_must_be_positive() {
        let mut ks = shard();
        assert!(matches!(sequenced_put(&mut ks, "p", &[0, 1], v("x"), 1), Err(MetaError::InvalidRequest(_))));
        assert!(matches!(sequenced_put(&mut ks, "p", &[], v("x"), 1), Err(MetaError::InvalidRequest(_))));
        assert!(ks.records.is_empty());
    }

    #[test]
    fn sequenced_put_uses_a_plain_string_prefix_test() {
        // The greatest key below "ab-1844…" is "ab", which does not start with "ab-": Oxia's
        // test is a plain string-prefix test, so "ab" itself counts, with no counters.
        let mut ks = shard();
        put(&mut ks, "ab", v("x"), PutCondition::None, 1, None).unwrap();
        assert_eq!(sequenced_put(&mut ks, "ab", &[1], v("x"), 1).unwrap().key, "ab-00000000000000000001");
        // A longer key sharing the prefix is parsed too, and refused when it is not counters
        // ('+' sorts below '-', so "ab+x" is below the search bound).
        let mut ks = shard();
        put(&mut ks, "ab+x", v("x"), PutCondition::None, 1, None).unwrap();
        let err = sequenced_put(&mut ks, "ab", &[1], v("x"), 1).unwrap_err();
        assert!(matches!(err, MetaError::InvalidRequest(ref m) if m.contains("not a sequence key")), "{err}");
    }

    #[test]
    fn sequenced_put_ignores_other_prefixes_and_slash_keys() {
        let mut ks = shard();
        put(
            &mut ks,
            "00000000000000000006-00000000000000000009-00000000000000000009",
            v("x"),
            PutCondition::None,
            1,
            None,
        )
        .unwrap();
        put(&mut ks, "/mark-deleted-offsets/7", v("1"), PutCondition::None, 1, None).unwrap();
        let key = sequenced_put(&mut ks, "00000000000000000007", &[2, 3], v("x"), 1).unwrap().key;
        assert_eq!(key, "00000000000000000007-00000000000000000002-00000000000000000003");
    }

    #[test]
    fn sequenced_put_counter_overflow_is_refused() {
        let mut ks = shard();
        sequenced_put(&mut ks, "p", &[u64::MAX - 1], v("x"), 1).unwrap();
        assert!(matches!(sequenced_put(&mut ks, "p", &[2], v("x"), 1), Err(MetaError::InvalidRequest(_))));
    }

    #[test]
    fn overwrite_by_permanent_put_unbinds_the_session() {
        let mut ks = shard();
        put(&mut ks, "k", v("a"), PutCondition::IfAbsent, 1, Some(9)).unwrap();
        put(&mut ks, "k", v("b"), PutCondition::None, 2, None).unwrap();
        let key = key_order::encode("k").unwrap();
        remove_session_records(&mut ks, 9, [&key]).unwrap();
        assert_eq!(lookup(&ks, "k", Comparison::Equal).unwrap().unwrap().value, v("b"));
    }

    #[test]
    fn empty_keys_and_bounds_are_refused() {
        let mut ks = shard();
        assert!(matches!(
            put(&mut ks, "", v("a"), PutCondition::None, 1, None),
            Err(MetaError::InvalidRequest(_))
        ));
        assert!(matches!(delete_range(&mut ks, "", "b"), Err(MetaError::InvalidRequest(_))));
        assert!(matches!(delete_range(&mut ks, "a", ""), Err(MetaError::InvalidRequest(_))));
    }

    #[test]
    fn scan_with_empty_end_runs_to_the_end() {
        let mut ks = shard();
        for k in ["a", "b", "/c"] {
            put(&mut ks, k, v(k), PutCondition::None, 1, None).unwrap();
        }
        let keys: Vec<String> = scan(&ks, "b", "", None).unwrap().into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["b", "/c"]);
    }
}
