//! C2's reads for a pass over several logs: **each WAL object is fetched once for every log
//! of the pass that needs it**, in an order every log can consume, while the next objects
//! are already being fetched.
//!
//! - **Schedule** ([`schedule`]): each log's records (those ending above its B) form a queue
//!   in offset order. The next fetch is an object at the head of some queue that no queue
//!   holds further back (writers put the logs of a batch in one object, in write order, so
//!   there always is one in practice); it serves every log whose head it is. Should no
//!   object qualify (logs whose records name objects in crossing orders), the first log's
//!   head is fetched for the logs at whose head it is, and fetched again later for the
//!   others: never a wrong order, at worst a second GET.
//! - **Whole or ranged**: an object whose sections the pass needs make up a quarter of it or
//!   more is fetched whole (one GET); otherwise its index region (one ranged GET of 4 KiB, a
//!   second one for a larger index) and then the needed sections' payload span, merged into
//!   one ranged GET when they lie close together.
//! - **Window**: fetches run as tasks of their own, up to `fetch_bytes` of them (at least
//!   one) ahead of the one being handed out, so I/O overlaps encoding. The bytes handed to a
//!   log are slices of the fetched object until the log copies them into its row group.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use lakestream_format::entry_index::RawRecord;
use lakestream_format::wal::{self, LogSection, WalIndex, WalObject};
use lakestream_format::{Entry, LogId, Offset};
use lakestream_objstore::{ByteRange, ObjectPath, ObjectStore, ObjectStoreError};

use crate::error::{CompactError, CompactResult};
use crate::plan::RangePlan;

/// One log's share of a pass: its range and the trim marker it was planned with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogWork<'a> {
    /// The log.
    pub log_id: LogId,
    /// The range.
    pub plan: &'a RangePlan,
    /// B when the pass started: records ending at or below it are not read, nor the entries
    /// ending at or below it (spec: MAY leave them out; every entry ending above any later B
    /// is kept, since B never decreases).
    pub trim_marker: Offset,
}

impl LogWork<'_> {
    /// The index of the first record that ends above B.
    pub fn first_record(&self) -> usize {
        self.plan.records.iter().position(|r| r.end > self.trim_marker).unwrap_or(self.plan.records.len())
    }
}

/// A record of a log that a fetch serves: indexes into the pass's logs and that log's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    pub log: usize,
    pub record: usize,
}

/// One fetch of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fetch {
    /// The WAL object.
    pub object: String,
    /// The records it serves, in log order.
    pub needs: Vec<Need>,
    /// Whether the whole object is fetched (else its index and the needed sections).
    pub whole: bool,
    /// About how many bytes the fetch brings in.
    pub bytes: u64,
}

/// The fetches of a pass, in the order they are handed out.
pub(crate) fn schedule(works: &[LogWork<'_>]) -> Vec<Fetch> {
    let mut queues: Vec<VecDeque<usize>> =
        works.iter().map(|w| (w.first_record()..w.plan.records.len()).collect()).collect();
    let object_of = |log: usize, record: usize| works[log].plan.records[record].wal_object.as_str();
    // How many queued records name each object.
    let mut queued: HashMap<&str, usize> = HashMap::new();
    for (log, q) in queues.iter().enumerate() {
        for &record in q {
            *queued.entry(object_of(log, record)).or_default() += 1;
        }
    }
    let mut out = Vec::new();
    loop {
        let heads: Vec<(usize, &str)> = queues
            .iter()
            .enumerate()
            .filter_map(|(log, q)| q.front().map(|&r| (log, object_of(log, r))))
            .collect();
        let Some(&(_, fallback)) = heads.first() else { break };
        // An object no queue holds behind its head: every record naming it is a head.
        let at_head = |object: &str| heads.iter().filter(|(_, o)| *o == object).count();
        let object = heads
            .iter()
            .map(|(_, o)| *o)
            .find(|o| queued.get(o).copied().unwrap_or(0) == at_head(o))
            .unwrap_or(fallback);
        let mut needs = Vec::new();
        for (log, q) in queues.iter_mut().enumerate() {
            while let Some(&record) = q.front() {
                if object_of(log, record) != object {
                    break;
                }
                q.pop_front();
                needs.push(Need { log, record });
            }
        }
        if let Some(n) = queued.get_mut(object) {
            *n = n.saturating_sub(needs.len());
        }
        let wanted: u64 = needs.iter().map(|n| works[n.log].plan.records[n.record].entry_size_bytes).sum();
        let raw = &works[needs[0].log].plan.records[needs[0].record].raw;
        let size = raw.file_size.and_then(|s| u64::try_from(s).ok());
        // Whole when the wanted sections are a quarter of the object or more (or its size is
        // not recorded): one GET beats two for little more data.
        let whole = size.is_none_or(|size| wanted.saturating_mul(4) >= size);
        let bytes = if whole { size.unwrap_or(wanted) } else { wanted + INDEX_GUESS };
        out.push(Fetch { object: object.to_string(), needs, whole, bytes });
    }
    out
}

/// The first ranged GET of an object's index region.
const INDEX_GUESS: u64 = 4096;

/// Sections closer together than this are fetched with one ranged GET.
const MERGE_GAP: u64 = 1 << 20;

/// What a fetch brought in.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// The whole object, parsed.
    Whole(WalObject),
    /// Some sections: each log's section, and payload bytes from `part_start` of the payload
    /// region that hold it.
    Sections(HashMap<LogId, (LogSection, Bytes, u64)>),
}

fn corrupt(object: &str, detail: String) -> CompactError {
    CompactError::Corrupt { log_id: LogId::MAX, what: format!("WAL object {object}"), detail }
}

/// Runs one fetch. `logs` are the log ids of the fetch's needs.
pub(crate) async fn run(
    store: Arc<dyn ObjectStore>,
    object: String,
    whole: bool,
    file_size: Option<u64>,
    logs: Vec<LogId>,
) -> CompactResult<Fetched> {
    let path = ObjectPath::new(object.clone()).map_err(|e| corrupt(&object, e.to_string()))?;
    let failed = |e: ObjectStoreError| match e {
        ObjectStoreError::NotFound { .. } => {
            corrupt(&object, "the object named by a RAW record is missing".into())
        }
        e => CompactError::object(&path)(e),
    };
    if whole {
        let bytes = store.get(&path).await.map_err(failed)?;
        return WalObject::parse(bytes).map(Fetched::Whole).map_err(|e| corrupt(&object, e.to_string()));
    }
    let mut head = store.get_range(&path, ByteRange::Bounded(0..INDEX_GUESS)).await.map_err(failed)?;
    let index_end = wal::INDEX_LENGTH_PREFIX as u64
        + u64::from(wal::index_length(&head).map_err(|e| corrupt(&object, e.to_string()))?);
    if (head.len() as u64) < index_end {
        head = store.get_range(&path, ByteRange::Bounded(0..index_end)).await.map_err(failed)?;
    }
    let index = WalIndex::parse(&head).map_err(|e| corrupt(&object, e.to_string()))?;
    if let Some(len) = file_size {
        index.check_payload_region_len(len).map_err(|e| corrupt(&object, e.to_string()))?;
    }
    let base = index.payload_region_start();
    let mut sections: Vec<LogSection> = Vec::new();
    for log_id in logs {
        let section = index
            .section(log_id)
            .ok_or_else(|| corrupt(&object, format!("no log section for log {log_id}")))?;
        sections.push(section.clone());
    }
    sections.sort_by_key(|s| s.payload_span().start);
    // Spans read together: consecutive sections closer than MERGE_GAP share a GET.
    let mut groups: Vec<(std::ops::Range<u64>, Vec<LogSection>)> = Vec::new();
    for section in sections {
        let span = section.payload_span();
        match groups.last_mut() {
            Some((range, members)) if span.start <= range.end + MERGE_GAP => {
                range.end = range.end.max(span.end);
                members.push(section);
            }
            _ => groups.push((span, vec![section])),
        }
    }
    let mut out = HashMap::new();
    for (range, members) in groups {
        let part = if range.is_empty() {
            Bytes::new()
        } else if base + range.end <= head.len() as u64 {
            head.slice((base + range.start) as usize..(base + range.end) as usize)
        } else {
            store
                .get_range(&path, ByteRange::Bounded(base + range.start..base + range.end))
                .await
                .map_err(failed)?
        };
        for section in members {
            out.insert(section.log_id, (section, part.clone(), range.start));
        }
    }
    Ok(Fetched::Sections(out))
}

/// The entries of one RAW record from what its fetch brought in: offsets from the record's
/// start, every entry stamped with the record's creation time, those ending at or below
/// `trim_marker` left out. Payloads are zero-copy slices of the fetched bytes.
pub(crate) fn entries_of(
    fetched: &Fetched,
    log_id: LogId,
    raw: &RawRecord,
    start: Offset,
    created_ms: i64,
    trim_marker: Offset,
) -> Result<Vec<Entry>, String> {
    let (section, part, part_start) = match fetched {
        Fetched::Whole(object) => (
            object.section(log_id).ok_or_else(|| format!("no log section for log {log_id}"))?,
            object.payload_region(),
            0,
        ),
        Fetched::Sections(sections) => {
            let (section, part, part_start) = sections
                .get(&log_id)
                .ok_or_else(|| format!("no log section for log {log_id} was fetched"))?;
            (section, part, *part_start)
        }
    };
    section.check_matches_record(raw).map_err(|e| e.to_string())?;
    let payloads = section.slice_payloads(part, part_start).map_err(|e| e.to_string())?;
    let mut offset = start;
    let mut entries = Vec::with_capacity(payloads.len());
    for (d, payload) in section.entries.iter().zip(payloads) {
        let entry_start = offset;
        offset += u64::from(d.record_count);
        if offset <= trim_marker {
            continue;
        }
        entries.push(Entry {
            offset: entry_start,
            record_count: d.record_count,
            timestamp_ms: created_ms,
            payload,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlannedRecord;

    /// One-entry records of 10 payload bytes, in objects of 50.
    fn plan(objects: &[&str]) -> RangePlan {
        let raw = |o: &str| RawRecord {
            location: o.to_string(),
            message_count: 1,
            entry_size_bytes: 10,
            entry_count: 1,
            boundaries: vec![1],
            index_type: None,
            file_size: Some(50),
            offset_in_file: None,
            extra_data: Vec::new(),
        };
        let records = objects
            .iter()
            .enumerate()
            .map(|(i, o)| PlannedRecord {
                start: i as u64,
                end: i as u64 + 1,
                cumulative_end: 10 * (i as u64 + 1),
                entry_size_bytes: 10,
                wal_object: o.to_string(),
                created_ms: 0,
                raw: raw(o),
            })
            .collect();
        RangePlan {
            start: 0,
            end: objects.len() as u64,
            cumulative_start: 0,
            cumulative_end: 10 * objects.len() as u64,
            records,
        }
    }

    fn order(works: &[LogWork<'_>]) -> Vec<(String, Vec<(usize, usize)>)> {
        schedule(works)
            .into_iter()
            .map(|f| (f.object, f.needs.iter().map(|n| (n.log, n.record)).collect()))
            .collect()
    }

    #[test]
    fn shared_objects_are_fetched_once_for_every_log() {
        let (a, b, c) = (plan(&["o1", "o2", "o3"]), plan(&["o1", "o3"]), plan(&["o2", "o3", "o4"]));
        let works = [
            LogWork { log_id: LogId(1), plan: &a, trim_marker: 0 },
            LogWork { log_id: LogId(2), plan: &b, trim_marker: 0 },
            LogWork { log_id: LogId(3), plan: &c, trim_marker: 0 },
        ];
        let got = order(&works);
        let o = |s: &str, n: &[(usize, usize)]| (s.to_string(), n.to_vec());
        assert_eq!(
            got,
            vec![
                o("o1", &[(0, 0), (1, 0)]),
                o("o2", &[(0, 1), (2, 0)]),
                o("o3", &[(0, 2), (1, 1), (2, 1)]),
                o("o4", &[(2, 2)])
            ]
        );
        // A fifth of the object per log: two logs' sections make it worth a whole GET.
        let fetches = schedule(&works);
        assert!(fetches[0].whole && fetches[2].whole && !fetches[3].whole);
    }

    #[test]
    fn crossing_orders_fetch_again_rather_than_reorder() {
        let (a, b) = (plan(&["o1", "o2"]), plan(&["o2", "o1"]));
        let works = [
            LogWork { log_id: LogId(1), plan: &a, trim_marker: 0 },
            LogWork { log_id: LogId(2), plan: &b, trim_marker: 0 },
        ];
        let fetched: Vec<String> = order(&works).into_iter().map(|(o, _)| o).collect();
        // o1 for the first log; then o2 heads both queues; o1 again for the second.
        assert_eq!(fetched, ["o1", "o2", "o1"].map(String::from).to_vec());
    }

    #[test]
    fn records_at_or_below_b_are_not_fetched() {
        let a = plan(&["o1", "o2", "o3"]);
        let works = [LogWork { log_id: LogId(1), plan: &a, trim_marker: 2 }];
        assert_eq!(order(&works), vec![("o3".to_string(), vec![(0, 2)])]);
        let small = schedule(&works);
        assert!(!small[0].whole, "a fifth of the object, for one log: ranged");
    }
}
