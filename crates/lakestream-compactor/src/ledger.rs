//! The WAL retirement ledger: metadata records that name the WAL objects which may have lost
//! their last naming index record, so the collector finds candidates without listing the WAL
//! root. Two kinds of record, both in partition [`LEDGER_PARTITION`]:
//!
//! - **Announcements** (`/lakestream-wal-retirements/{retired_ms}-{hash}-{chunk}`, value
//!   JSON `{"retired_ms": T, "objects": [...]}`): what a remover writes, **one blind Put per
//!   range** (per [`OBJECTS_PER_ANNOUNCEMENT`] objects), before it removes the records
//!   naming those objects. The key is a function of the time and the object names, so a
//!   repeated announcement rewrites the same record with the same value.
//! - **Entries** (`/lakestream-wal-retired/{name}`, the object name percent-encoded, so the
//!   key has exactly two `/` and a prefix scan sees every entry in any key order; value
//!   JSON `{"retired_ms": T, "unreferenced_since_ms": U | null}`): one per object, written
//!   by the collector, which tracks each object's grace period there.
//!
//! - Before C3/C4, a hard trim, or a log deletion removes RAW records, the remover writes an
//!   announcement of the WAL objects they name (`retired_ms` = now). Writing it *before* the
//!   removal means a crash in between leaves an announcement, never an unreferenced object
//!   without one.
//! - The collector first expands announcements ([`expand_announcements`]): for each object an
//!   entry with `retired_ms` raised to the announcement's and `unreferenced_since_ms` reset
//!   to null (exactly what the remover's own per-object update used to do), and only then
//!   deletes the announcement. A crash in between leaves the announcement, expanded again
//!   by the next pass (idempotent).
//! - The collector sets `unreferenced_since_ms` when it first finds that no index record
//!   names the object, and deletes the object once that is `wal_grace` old and still true.
//!   The grace period is therefore measured from a moment after the last naming record was
//!   removed, however long the remover took between writing the announcement and removing
//!   records, and however long the announcement waited to be expanded.

use bytes::Bytes;
use lakestream_format::LogId;
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_meta::{
    CasError, CasOptions, CasRecord, Change, Current, MetaStore, PutCondition, Record, Version, cas_update,
};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use serde::{Deserialize, Serialize};

use crate::error::{CompactError, CompactResult};

/// The partition of the ledger records.
pub const LEDGER_PARTITION: &str = "lakestream-gc";
/// The key prefix of ledger entries (one per WAL object).
pub const LEDGER_PREFIX: &str = "/lakestream-wal-retired/";
/// The key prefix of announcements (one per range, or per [`OBJECTS_PER_ANNOUNCEMENT`]
/// objects of a range).
pub const ANNOUNCEMENT_PREFIX: &str = "/lakestream-wal-retirements/";
/// The most object names one announcement holds (about 60 bytes each: at most ~64 KiB a
/// value, well within any metadata store's limit).
pub const OBJECTS_PER_ANNOUNCEMENT: usize = 1024;

/// `/` keeps the key one level deep; `%` keeps the encoding reversible.
const ESCAPED: &AsciiSet = &CONTROLS.add(b'/').add(b'%');

/// How many ledger entries an expansion updates at once.
const RETIREMENT_CONCURRENCY: usize = 16;

/// How many writes a conditional ledger update tries before it reports contention.
const CAS_ATTEMPTS: u32 = 8;

/// The ledger's `LogId` stand-in in errors: its records belong to no log.
const NO_LOG: LogId = LogId::MAX;

/// The value of a ledger record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerValue {
    /// When the latest remover announced it would remove records naming the object.
    pub retired_ms: i64,
    /// When a collector first found no index record naming the object; null until then.
    pub unreferenced_since_ms: Option<i64>,
}

/// A ledger record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The WAL object name.
    pub object: String,
    /// The value.
    pub value: LedgerValue,
    /// The record's version, for conditional updates.
    pub version: Version,
}

/// The ledger key of a WAL object.
pub fn ledger_key(object: &str) -> String {
    format!("{LEDGER_PREFIX}{}", utf8_percent_encode(object, ESCAPED))
}

fn ledger_end() -> String {
    format!("{LEDGER_PREFIX}\u{FFFF}")
}

fn announcement_end() -> String {
    format!("{ANNOUNCEMENT_PREFIX}\u{FFFF}")
}

/// The value of an announcement: WAL objects whose naming records a remover was about to
/// remove at `retired_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announcement {
    /// When the remover announced them.
    pub retired_ms: i64,
    /// The object names.
    pub objects: Vec<String>,
}

/// 64-bit FNV-1a of the names, each followed by a newline: announcement keys are a function
/// of their contents.
fn names_hash(names: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for name in names {
        for b in name.bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The key of the `chunk`-th announcement of `objects` at `retired_ms`.
fn announcement_key(retired_ms: i64, objects: &[&str], chunk: usize) -> String {
    format!("{ANNOUNCEMENT_PREFIX}{retired_ms:020}-{:016x}-{chunk}", names_hash(objects))
}

fn encode(value: &LedgerValue) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// Announces that records naming `objects` are about to be removed: one blind Put of an
/// announcement per [`OBJECTS_PER_ANNOUNCEMENT`] distinct objects (so one per range in
/// practice), all complete (or the call fails) before the caller removes any record. The
/// collector turns announcements into per-object entries ([`expand_announcements`]).
pub async fn record_retirements<'a>(
    meta: &dyn MetaStore,
    objects: impl IntoIterator<Item = &'a str>,
    now_ms: i64,
) -> CompactResult<()> {
    let mut seen = std::collections::BTreeSet::new();
    let objects: Vec<&str> = objects.into_iter().filter(|o| seen.insert(*o)).collect();
    if objects.is_empty() {
        return Ok(());
    }
    let mut puts = Vec::new();
    for (chunk, names) in objects.chunks(OBJECTS_PER_ANNOUNCEMENT).enumerate() {
        let key = announcement_key(now_ms, names, chunk);
        let value =
            Announcement { retired_ms: now_ms, objects: names.iter().map(|n| n.to_string()).collect() };
        let bytes = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        puts.push(async move {
            meta.put(LEDGER_PARTITION, &key, bytes, PutCondition::None)
                .await
                .map_err(CompactError::meta(NO_LOG, "writing a retirement announcement"))
        });
    }
    futures::future::try_join_all(puts).await?;
    Ok(())
}

/// Every announcement, in key order, with its key.
pub async fn announcements(meta: &dyn MetaStore) -> CompactResult<Vec<(String, Announcement)>> {
    let records = meta
        .scan(LEDGER_PARTITION, ANNOUNCEMENT_PREFIX, &announcement_end(), None)
        .await
        .map_err(CompactError::meta(NO_LOG, "scanning the announcements"))?;
    records
        .into_iter()
        .filter(|r| r.key.starts_with(ANNOUNCEMENT_PREFIX))
        .map(|r| {
            let value: Announcement =
                serde_json::from_slice(&r.value).map_err(|e| CompactError::Corrupt {
                    log_id: NO_LOG,
                    what: r.key.clone(),
                    detail: format!("value is not a retirement announcement: {e}"),
                })?;
            Ok((r.key, value))
        })
        .collect()
}

/// Turns every announcement into per-object entries, then deletes it: for each object, an
/// entry with `retired_ms` raised to the announcement's and `unreferenced_since_ms` reset
/// (a record named the object until the announcement). Announcements of one object are
/// merged, so each object's entry is written once per call. Returns how many announcements
/// were expanded. A failure leaves the announcements not yet deleted for the next call.
pub async fn expand_announcements(meta: &dyn MetaStore) -> CompactResult<usize> {
    let found = announcements(meta).await?;
    if found.is_empty() {
        return Ok(0);
    }
    let mut latest: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for (_, a) in &found {
        for object in &a.objects {
            let at = latest.entry(object.as_str()).or_insert(a.retired_ms);
            *at = (*at).max(a.retired_ms);
        }
    }
    let latest: Vec<(&str, i64)> = latest.into_iter().collect();
    for chunk in latest.chunks(RETIREMENT_CONCURRENCY) {
        let mut updates = Vec::with_capacity(chunk.len());
        for (object, retired_ms) in chunk {
            updates.push(announce_retirement(meta, object, *retired_ms));
        }
        futures::future::try_join_all(updates).await?;
    }
    // Only once every entry is written: a crash before this leaves the announcements.
    for chunk in found.chunks(RETIREMENT_CONCURRENCY) {
        let mut deletes = Vec::with_capacity(chunk.len());
        for (key, _) in chunk {
            deletes.push(async move {
                meta.delete(LEDGER_PARTITION, key)
                    .await
                    .map_err(CompactError::meta(NO_LOG, "deleting a retirement announcement"))
            });
        }
        futures::future::try_join_all(deletes).await?;
    }
    Ok(found.len())
}

/// The WAL objects the ledger holds as candidates: those of its entries and those of its
/// announcements not yet expanded.
pub async fn candidates(meta: &dyn MetaStore) -> CompactResult<std::collections::BTreeSet<String>> {
    let mut out: std::collections::BTreeSet<String> =
        list(meta).await?.into_iter().map(|e| e.object).collect();
    for (_, a) in announcements(meta).await? {
        out.extend(a.objects);
    }
    Ok(out)
}

async fn announce_retirement(meta: &dyn MetaStore, object: &str, now_ms: i64) -> CompactResult<()> {
    let fresh = LedgerValue { retired_ms: now_ms, unreferenced_since_ms: None };
    update(meta, &ledger_key(object), |old| match old {
        None => Some(fresh),
        Some(v) => Some(LedgerValue { retired_ms: v.retired_ms.max(now_ms), unreferenced_since_ms: None }),
    })
    .await
}

/// For a catalog about to delete log `log_id` (after its fence and drain, before its
/// `DeleteRange`): announces the WAL objects its RAW records name, so that the collector
/// finds them without listing the WAL root. Optional: the orphan scan finds them too, later.
pub async fn announce_log_deletion(meta: &dyn MetaStore, log_id: LogId, now_ms: i64) -> CompactResult<usize> {
    let records = crate::records::scan_log(meta, log_id).await?;
    let objects: Vec<&str> = records.iter().filter_map(|r| r.wal_object()).collect();
    record_retirements(meta, objects.iter().copied(), now_ms).await?;
    Ok(objects.len())
}

/// Records that a collector found no index record naming `object` at `now_ms`, unless an
/// earlier observation is already recorded. Creates the entry for an orphan.
pub async fn mark_unreferenced(meta: &dyn MetaStore, object: &str, now_ms: i64) -> CompactResult<()> {
    update(meta, &ledger_key(object), |old| match old {
        None => Some(LedgerValue { retired_ms: now_ms, unreferenced_since_ms: Some(now_ms) }),
        Some(v) if v.unreferenced_since_ms.is_some() => None,
        Some(v) => Some(LedgerValue { unreferenced_since_ms: Some(now_ms), ..v }),
    })
    .await
}

/// Removes the entry of an object that is gone.
pub async fn remove(meta: &dyn MetaStore, object: &str) -> CompactResult<()> {
    meta.delete(LEDGER_PARTITION, &ledger_key(object))
        .await
        .map(|_| ())
        .map_err(CompactError::meta(NO_LOG, "deleting a ledger entry"))
}

/// Every ledger entry, in key order.
pub async fn list(meta: &dyn MetaStore) -> CompactResult<Vec<LedgerEntry>> {
    let records = meta
        .scan(LEDGER_PARTITION, LEDGER_PREFIX, &ledger_end(), None)
        .await
        .map_err(CompactError::meta(NO_LOG, "scanning the ledger"))?;
    records
        .into_iter()
        .filter(|r| r.key.starts_with(LEDGER_PREFIX))
        .map(|r| {
            let corrupt =
                |detail: String| CompactError::Corrupt { log_id: NO_LOG, what: r.key.clone(), detail };
            let encoded = &r.key[LEDGER_PREFIX.len()..];
            let object = percent_decode_str(encoded)
                .decode_utf8()
                .map_err(|e| corrupt(format!("object name is not percent-encoded UTF-8: {e}")))?
                .into_owned();
            let value: LedgerValue = serde_json::from_slice(&r.value)
                .map_err(|e| corrupt(format!("value is not a ledger value: {e}")))?;
            Ok(LedgerEntry { object, value, version: r.version })
        })
        .collect()
}

impl CasRecord for LedgerValue {
    type Error = CompactError;

    fn decode(record: &Record) -> CompactResult<Self> {
        serde_json::from_slice(&record.value).map_err(|e| CompactError::Corrupt {
            log_id: NO_LOG,
            what: record.key.clone(),
            detail: format!("value is not a ledger value: {e}"),
        })
    }

    fn encode(&self) -> CompactResult<Bytes> {
        Ok(encode(self))
    }
}

/// Read-modify-write of one ledger record ([`cas_update`]: CreateIfAbsent / CompareAndSet,
/// lost races retried after a pause); `change` returns `None` to leave it as is.
async fn update(
    meta: &dyn MetaStore,
    key: &str,
    change: impl Fn(Option<LedgerValue>) -> Option<LedgerValue>,
) -> CompactResult<()> {
    let options = CasOptions::new(Backoff::process(BackoffPolicy::compare_and_set(CAS_ATTEMPTS)));
    let decide = |current: Option<&Current<LedgerValue>>| {
        Ok(match change(current.map(|c| c.value)) {
            Some(next) => Change::Write(next),
            None => Change::Keep,
        })
    };
    match cas_update(meta, LEDGER_PARTITION, key, &options, decide).await {
        Ok(_) => Ok(()),
        Err(CasError::Record(e)) => Err(e),
        Err(CasError::Contended { key, attempts }) => Err(CompactError::Contended { what: key, attempts }),
        Err(CasError::Meta(e)) => Err(CompactError::meta(NO_LOG, "writing the ledger")(e)),
    }
}

#[cfg(test)]
mod tests {
    use lakestream_meta::InMemoryStore;

    use super::*;

    #[test]
    fn keys_are_one_level_and_reversible() {
        let key = ledger_key("2026/11/30/08/00/00/abc%def");
        assert_eq!(key, "/lakestream-wal-retired/2026%2F11%2F30%2F08%2F00%2F00%2Fabc%25def");
        assert_eq!(key.matches('/').count(), 2);
    }

    #[tokio::test]
    async fn retirement_then_unreferenced_then_remove() {
        let meta = InMemoryStore::new();
        let name = "2026/11/30/08/00/00/u1";
        record_retirements(&meta, [name, name], 100).await.unwrap();
        assert!(list(&meta).await.unwrap().is_empty(), "announced, not yet expanded");
        assert_eq!(candidates(&meta).await.unwrap().into_iter().collect::<Vec<_>>(), vec![name.to_string()]);
        assert_eq!(expand_announcements(&meta).await.unwrap(), 1);
        assert!(announcements(&meta).await.unwrap().is_empty(), "deleted once expanded");
        let entries = list(&meta).await.unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].object, name);
        assert_eq!(entries[0].value, LedgerValue { retired_ms: 100, unreferenced_since_ms: None });
        mark_unreferenced(&meta, name, 200).await.unwrap();
        mark_unreferenced(&meta, name, 300).await.unwrap(); // the first observation is kept
        assert_eq!(list(&meta).await.unwrap()[0].value.unreferenced_since_ms, Some(200));
        // A new retirement means a record named it until now: the observation is reset.
        record_retirements(&meta, [name], 400).await.unwrap();
        assert_eq!(expand_announcements(&meta).await.unwrap(), 1);
        assert_eq!(
            list(&meta).await.unwrap()[0].value,
            LedgerValue { retired_ms: 400, unreferenced_since_ms: None }
        );
        remove(&meta, name).await.unwrap();
        assert!(list(&meta).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_log_deletion_announces_the_wal_objects_of_its_raw_records() {
        use lakestream_format::entry_index::{EntryIndex, RawParts};
        let meta = InMemoryStore::new();
        for (end, name) in [(1u64, "2026/11/30/08/00/00/a"), (2, "2026/11/30/08/00/01/b")] {
            let value = EntryIndex::raw_from_parts(&RawParts {
                location: name,
                record_counts: &[1],
                entry_size_bytes: 1,
                payload_region_len: 1,
                single_section: true,
            })
            .unwrap()
            .encode();
            let key = lakestream_format::keys::index_key(LogId(4), end, end);
            meta.put("4", &key, Bytes::from(value), PutCondition::None).await.unwrap();
        }
        assert_eq!(announce_log_deletion(&meta, LogId(4), 50).await.unwrap(), 2);
        let objects: Vec<String> = candidates(&meta).await.unwrap().into_iter().collect();
        assert_eq!(objects, vec!["2026/11/30/08/00/00/a", "2026/11/30/08/00/01/b"]);
        assert_eq!(announcements(&meta).await.unwrap().len(), 1, "one announcement for the log");
    }

    #[tokio::test]
    async fn one_announcement_per_thousand_objects_merged_on_expansion() {
        let meta = InMemoryStore::new();
        let names: Vec<String> =
            (0..OBJECTS_PER_ANNOUNCEMENT + 3).map(|i| format!("2026/11/30/08/00/00/o{i}")).collect();
        record_retirements(&meta, names.iter().map(String::as_str), 100).await.unwrap();
        assert_eq!(announcements(&meta).await.unwrap().len(), 2);
        // The same announcement again: the same keys, the same values.
        record_retirements(&meta, names.iter().map(String::as_str), 100).await.unwrap();
        assert_eq!(announcements(&meta).await.unwrap().len(), 2);
        // A later one of a shared object: its entry takes the later time.
        record_retirements(&meta, [names[0].as_str()], 300).await.unwrap();
        mark_unreferenced(&meta, &names[1], 200).await.unwrap(); // an orphan scan got there first
        assert_eq!(expand_announcements(&meta).await.unwrap(), 3);
        let entries = list(&meta).await.unwrap();
        assert_eq!(entries.len(), names.len());
        let of = |n: &str| entries.iter().find(|e| e.object == n).unwrap().value;
        assert_eq!(of(&names[0]), LedgerValue { retired_ms: 300, unreferenced_since_ms: None });
        assert_eq!(of(&names[1]), LedgerValue { retired_ms: 200, unreferenced_since_ms: None }, "reset");
        assert_eq!(of(&names[2]), LedgerValue { retired_ms: 100, unreferenced_since_ms: None });
        assert_eq!(expand_announcements(&meta).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_corrupt_ledger_value_is_named() {
        let meta = InMemoryStore::new();
        meta.put(LEDGER_PARTITION, &ledger_key("x"), Bytes::from_static(b"{"), PutCondition::None)
            .await
            .unwrap();
        let err = list(&meta).await.unwrap_err();
        assert!(matches!(err, CompactError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("lakestream-wal-retired"));
    }
}
