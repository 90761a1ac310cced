//! The catalog's records: their keys and their JSON values.
//!
//! The spec leaves catalog serialization to the implementation. Every record lives in the
//! one catalog partition ([`crate::CatalogConfig::partition`]) and every value is a JSON
//! object whose first field is `version` (now 1), so that a later layout can migrate
//! records and an older catalog refuses a newer record instead of misreading it.
//!
//! ```text
//! key                                         value
//! /lakestream-catalog/log-id-counter          {"version":1,"next_log_id":12}
//! /lakestream-catalog/namespaces/{ns}         {"version":1,"name":"ns","properties":{}}
//! /lakestream-catalog/streams/{ns}/{name}     {"version":1,"namespace":"ns","name":"s","state":"active",
//!                                              "properties":{},"layout":[3,4],"pending_expansion":null}
//! /lakestream-catalog/logs/{L:020}            {"version":1,"log_id":3,"namespace":"ns","stream":"s","partition":0}
//! ```
//!
//! Names never contain `/` (see [`crate::names`]), so every key has a fixed depth and a
//! listing of one level never sees the next. Log keys use 20 zero-padded digits so that
//! they list in numeric order; they begin with `/`, never with `{L:020}-`, which the spec
//! reserves for index records.

use std::collections::BTreeMap;

use bytes::Bytes;
use lakestream_format::LogId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{CatalogError, Result};

/// The version every record written by this crate carries.
pub const RECORD_VERSION: u32 = 1;

const ROOT: &str = "/lakestream-catalog";

/// The key of the log-ID counter.
pub fn log_id_counter_key() -> String {
    format!("{ROOT}/log-id-counter")
}

/// The key of a namespace record.
pub fn namespace_key(namespace: &str) -> String {
    format!("{ROOT}/namespaces/{namespace}")
}

/// The first key of a listing of every namespace record (`[prefix, end)`).
pub fn namespaces_prefix() -> String {
    format!("{ROOT}/namespaces/")
}

/// The key of a stream record: the stream's identity, live or dropped.
pub fn stream_key(namespace: &str, stream: &str) -> String {
    format!("{ROOT}/streams/{namespace}/{stream}")
}

/// The first key of a listing of every stream record of a namespace.
pub fn streams_prefix(namespace: &str) -> String {
    format!("{ROOT}/streams/{namespace}/")
}

/// The key of a log record.
pub fn log_key(log_id: LogId) -> String {
    format!("{ROOT}/logs/{:020}", log_id.0)
}

/// The exclusive end of a listing of the children of `prefix` (which ends with `/`).
///
/// U+10FFFF is the greatest code point, and names may not contain it (it is a noncharacter),
/// so every child name sorts below it, bytewise and in both of Oxia's slash-aware orders.
/// (U+FFFF, which Ursa uses for lease listings, would miss names that begin with a
/// four-byte character such as an emoji.)
pub fn listing_end(prefix: &str) -> String {
    format!("{prefix}\u{10FFFF}")
}

/// The log-ID counter: the next ID the allocator hands out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogIdCounterRecord {
    /// The record layout version.
    pub version: u32,
    /// The smallest log ID not yet handed out. Only ever grows.
    pub next_log_id: u64,
}

/// A namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceRecord {
    /// The record layout version.
    pub version: u32,
    /// The namespace's name (equal to the key's last segment).
    pub name: String,
    /// Free-form properties.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// `deleting` while a deletion checks that the namespace is empty; absent when active
    /// (an optional field of version 1: records written before it read as active).
    #[serde(default, skip_serializing_if = "NamespaceState::is_active")]
    pub state: NamespaceState,
}

/// Where a namespace is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceState {
    /// Streams may be created in it.
    #[default]
    Active,
    /// A deletion is checking that it holds no stream; no stream may be created meanwhile.
    Deleting,
}

impl NamespaceState {
    /// Whether this is [`NamespaceState::Active`].
    pub fn is_active(&self) -> bool {
        *self == NamespaceState::Active
    }
}

/// Where a stream identity is in its life. The record of an identity is never removed:
/// once dropped, it stays as the identity's durable tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    /// The stream is live.
    Active,
    /// The stream is being dropped: its logs are being deleted. Already a tombstone.
    Dropping,
    /// The stream was dropped and its logs deleted. The tombstone.
    Dropped,
}

/// An expansion claimed by compare-and-set but not yet published: the log IDs of the new
/// partitions, in partition order after the current layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingExpansion {
    /// The IDs of the new logs, for partitions `layout.len()..layout.len() + new_logs.len()`.
    pub new_logs: Vec<u64>,
}

/// A stream identity: a live stream with its published layout, or a tombstone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// The record layout version.
    pub version: u32,
    /// The stream's namespace.
    pub namespace: String,
    /// The stream's name.
    pub name: String,
    /// Live, being dropped, or dropped.
    pub state: StreamState,
    /// Free-form properties.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The published layout: the log ID of partition `i` at position `i`. While the stream
    /// is active, every log named here has its log record; in a tombstone it lists the logs
    /// being (`dropping`) or already (`dropped`) deleted.
    pub layout: Vec<u64>,
    /// An expansion in progress, if any.
    #[serde(default)]
    pub pending_expansion: Option<PendingExpansion>,
}

impl StreamRecord {
    /// Every log this identity has or is about to have: the layout, then a pending
    /// expansion's logs.
    pub fn all_logs(&self) -> impl Iterator<Item = LogId> + '_ {
        let pending = self.pending_expansion.iter().flat_map(|p| p.new_logs.iter());
        self.layout.iter().chain(pending).map(|&id| LogId(id))
    }
}

/// A log's registration: which stream and partition it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    /// The record layout version.
    pub version: u32,
    /// The log ID.
    pub log_id: u64,
    /// The stream's namespace.
    pub namespace: String,
    /// The stream's name.
    pub stream: String,
    /// The log's position in the stream's layout.
    pub partition: u32,
}

/// A record this crate stores as JSON, with a check of what JSON cannot say.
pub trait CatalogRecord: Serialize + DeserializeOwned {
    /// The record's layout version.
    fn version(&self) -> u32;

    /// Checks that a decoded record agrees with its key and with itself.
    fn check(&self, key: &str) -> Result<()>;

    /// The value bytes.
    fn encode(&self) -> Bytes {
        // Serializing these plain structs (strings, integers, maps with string keys) to JSON
        // cannot fail; an error here would be a bug in the struct definitions.
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decodes the value of the record under `key`, refusing another layout version.
    fn decode(key: &str, value: &[u8]) -> Result<Self> {
        #[derive(Deserialize)]
        struct VersionProbe {
            version: Option<u32>,
        }
        let probe: VersionProbe = serde_json::from_slice(value)
            .map_err(|e| CatalogError::corrupt(key, format!("not a JSON object: {e}")))?;
        match probe.version {
            Some(RECORD_VERSION) => {}
            Some(other) => {
                return Err(CatalogError::corrupt(
                    key,
                    format!("record version {other}; this catalog reads version {RECORD_VERSION}"),
                ));
            }
            None => return Err(CatalogError::corrupt(key, "the record has no version field")),
        }
        let record: Self =
            serde_json::from_slice(value).map_err(|e| CatalogError::corrupt(key, e.to_string()))?;
        record.check(key)?;
        Ok(record)
    }
}

fn check_log_id(key: &str, id: u64) -> Result<()> {
    if id > LogId::MAX.0 {
        return Err(CatalogError::corrupt(key, format!("log ID {id} exceeds 2^63-1")));
    }
    Ok(())
}

impl CatalogRecord for LogIdCounterRecord {
    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self, key: &str) -> Result<()> {
        // The counter may equal MAX + 1 once the last ID has been handed out.
        if self.next_log_id > LogId::MAX.0 + 1 {
            return Err(CatalogError::corrupt(key, format!("next_log_id {} exceeds 2^63", self.next_log_id)));
        }
        Ok(())
    }
}

impl CatalogRecord for NamespaceRecord {
    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self, key: &str) -> Result<()> {
        if namespace_key(&self.name) != key {
            return Err(CatalogError::corrupt(key, format!("the record names namespace {:?}", self.name)));
        }
        Ok(())
    }
}

impl CatalogRecord for StreamRecord {
    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self, key: &str) -> Result<()> {
        if stream_key(&self.namespace, &self.name) != key {
            return Err(CatalogError::corrupt(
                key,
                format!("the record names stream {}/{}", self.namespace, self.name),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for id in self.all_logs() {
            check_log_id(key, id.0)?;
            if !seen.insert(id) {
                return Err(CatalogError::corrupt(key, format!("log ID {id} appears twice")));
            }
        }
        Ok(())
    }
}

impl CatalogRecord for LogRecord {
    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self, key: &str) -> Result<()> {
        check_log_id(key, self.log_id)?;
        if log_key(LogId(self.log_id)) != key {
            return Err(CatalogError::corrupt(key, format!("the record names log {}", self.log_id)));
        }
        Ok(())
    }
}

/// The catalog's records are updated with [`lakestream_meta::cas_update`]; the rules below
/// are checked before every write (a mutation that breaks one is a bug, and nothing is
/// written). Each names the record's key, which every record derives from its own fields.
macro_rules! cas_record {
    ($record:ty, $key:expr, $check:expr) => {
        impl lakestream_meta::CasRecord for $record {
            type Error = CatalogError;

            fn decode(record: &lakestream_meta::Record) -> Result<Self> {
                <Self as CatalogRecord>::decode(&record.key, &record.value)
            }

            fn encode(&self) -> Result<Bytes> {
                Ok(<Self as CatalogRecord>::encode(self))
            }

            fn check_write(before: Option<&Self>, after: &Self) -> Result<()> {
                let key: fn(&Self) -> String = $key;
                let check: fn(Option<&Self>, &Self) -> std::result::Result<(), String> = $check;
                check(before, after).map_err(|rule| CatalogError::InvariantBroken { key: key(after), rule })
            }
        }
    };
}

cas_record!(LogIdCounterRecord, |_| log_id_counter_key(), |before, after| match before {
    // Never down, never in place: every write hands out at least one ID (see the allocator).
    Some(b) if after.next_log_id <= b.next_log_id => {
        Err(format!("the log-ID counter moves from {} to {}, not up", b.next_log_id, after.next_log_id))
    }
    _ => Ok(()),
});

cas_record!(NamespaceRecord, |r| namespace_key(&r.name), |before, after| match before {
    Some(b) if b.name != after.name => Err(format!("the namespace's name changes to {:?}", after.name)),
    _ => Ok(()),
});

cas_record!(LogRecord, |r| log_key(LogId(r.log_id)), |before, _| match before {
    // A log's registration never changes: it is created once and only deleted.
    Some(_) => Err("a log record is rewritten".to_owned()),
    None => Ok(()),
});

cas_record!(StreamRecord, |r| stream_key(&r.namespace, &r.name), check_stream_change);

/// The rules of a stream record's life: its identity is fixed; its state only moves on
/// (active → dropping → dropped); its published layout only grows, and only by publishing
/// the pending expansion (spec: a layout names only logs whose records exist); and the
/// properties that decide its binding never change.
fn check_stream_change(
    before: Option<&StreamRecord>,
    after: &StreamRecord,
) -> std::result::Result<(), String> {
    let Some(before) = before else { return Ok(()) };
    if (&before.namespace, &before.name) != (&after.namespace, &after.name) {
        return Err(format!("the identity changes to {}/{}", after.namespace, after.name));
    }
    let rank = |state: StreamState| match state {
        StreamState::Active => 0,
        StreamState::Dropping => 1,
        StreamState::Dropped => 2,
    };
    if rank(after.state) < rank(before.state) {
        return Err(format!("the state goes back from {:?} to {:?}", before.state, after.state));
    }
    if !after.layout.starts_with(&before.layout) {
        return Err(format!("the layout {:?} does not extend {:?}", after.layout, before.layout));
    }
    let added = &after.layout[before.layout.len()..];
    let pending = before.pending_expansion.as_ref().map_or(&[][..], |p| &p.new_logs[..]);
    if !added.is_empty() && added != pending {
        return Err(format!("the layout gains {added:?}, not the pending expansion {pending:?}"));
    }
    if let Some(fixed) = crate::catalog::BINDING_PROPERTIES
        .iter()
        .find(|k| before.properties.get(**k) != after.properties.get(**k))
    {
        return Err(format!("property {fixed:?}, which decides the binding, changes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_record() -> StreamRecord {
        StreamRecord {
            version: RECORD_VERSION,
            namespace: "ns".into(),
            name: "orders".into(),
            state: StreamState::Active,
            properties: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            layout: vec![3, 4],
            pending_expansion: Some(PendingExpansion { new_logs: vec![9] }),
        }
    }

    #[test]
    fn keys_have_a_fixed_shape() {
        assert_eq!(log_id_counter_key(), "/lakestream-catalog/log-id-counter");
        assert_eq!(namespace_key("ns"), "/lakestream-catalog/namespaces/ns");
        assert_eq!(stream_key("ns", "s"), "/lakestream-catalog/streams/ns/s");
        assert_eq!(log_key(LogId(7)), "/lakestream-catalog/logs/00000000000000000007");
        assert!(stream_key("ns", "s").starts_with(&streams_prefix("ns")));
        assert!(listing_end("/p/").as_bytes().ends_with(&[0xF4, 0x8F, 0xBF, 0xBF]));
        // Every name that may be stored sorts below the end of its listing.
        assert!(stream_key("ns", "\u{10FFFD}zzz") < listing_end(&streams_prefix("ns")));
    }

    #[test]
    fn stream_record_json_is_pinned() {
        // Pinned bytes: a change here changes what every deployment has stored.
        let json = String::from_utf8(stream_record().encode().to_vec()).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"namespace":"ns","name":"orders","state":"active","properties":{"k":"v"},"layout":[3,4],"pending_expansion":{"new_logs":[9]}}"#
        );
        let back = StreamRecord::decode(&stream_key("ns", "orders"), json.as_bytes()).unwrap();
        assert_eq!(back, stream_record());
    }

    #[test]
    fn every_record_carries_a_version_field() {
        let log =
            LogRecord { version: 1, log_id: 3, namespace: "ns".into(), stream: "s".into(), partition: 0 };
        let counter = LogIdCounterRecord { version: 1, next_log_id: 4 };
        let ns = NamespaceRecord {
            version: 1,
            name: "ns".into(),
            properties: BTreeMap::new(),
            state: NamespaceState::Active,
        };
        for bytes in [log.encode(), counter.encode(), ns.encode(), stream_record().encode()] {
            assert!(bytes.starts_with(br#"{"version":1,"#), "{bytes:?}");
        }
        assert_eq!(LogRecord::decode(&log_key(LogId(3)), &log.encode()).unwrap(), log);
        assert_eq!(LogIdCounterRecord::decode(&log_id_counter_key(), &counter.encode()).unwrap(), counter);
        assert_eq!(NamespaceRecord::decode(&namespace_key("ns"), &ns.encode()).unwrap(), ns);
    }

    #[test]
    fn unknown_fields_are_ignored_but_newer_versions_refused() {
        let key = log_key(LogId(3));
        let with_extra =
            br#"{"version":1,"log_id":3,"namespace":"n","stream":"s","partition":0,"later":true}"#;
        assert_eq!(LogRecord::decode(&key, with_extra).unwrap().log_id, 3);
        let newer = br#"{"version":2,"log_id":3,"namespace":"n","stream":"s","partition":0}"#;
        let err = LogRecord::decode(&key, newer).unwrap_err();
        assert!(err.to_string().contains("record version 2"), "{err}");
    }

    #[test]
    fn bad_record_bytes_are_corrupt_records_naming_the_key() {
        let key = stream_key("ns", "orders");
        let other_identity = stream_record().encode();
        let mut duplicate = stream_record();
        duplicate.pending_expansion = Some(PendingExpansion { new_logs: vec![3] });
        let mut too_big = stream_record();
        too_big.layout = vec![u64::MAX];
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("not JSON", b"\x08\x03".to_vec()),
            ("no version", br#"{"namespace":"ns"}"#.to_vec()),
            ("missing field", br#"{"version":1,"namespace":"ns","name":"orders"}"#.to_vec()),
            ("duplicate log", duplicate.encode().to_vec()),
            ("log ID above MAX", too_big.encode().to_vec()),
        ];
        for (what, bytes) in cases {
            let err = StreamRecord::decode(&key, &bytes).unwrap_err();
            assert!(matches!(&err, CatalogError::CorruptRecord { key: k, .. } if *k == key), "{what}: {err}");
        }
        let err = StreamRecord::decode(&stream_key("ns", "other"), &other_identity).unwrap_err();
        assert!(err.to_string().contains("names stream ns/orders"), "{err}");
    }
}
