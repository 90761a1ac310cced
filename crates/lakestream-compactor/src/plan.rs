//! Scheduling: which range of a log to compact next, as a pure function of the log's records,
//! its trim marker and the time.
//!
//! Rules (spec "Compaction", C1; Appendix E for the closing thresholds):
//! - A range `[s, e)` starts at the start of a RAW record (which is 0 or the end offset of
//!   the record sequenced before it) and ends at the end of a RAW record; every record ending
//!   in `(s, e]` is RAW and the records are adjacent.
//! - Records that end at or below B are not compacted: hard trim removes them.
//! - A range closes when it holds `max_range_bytes` of payload, or when its oldest entry is
//!   `max_range_age` old; `entry_size_bytes` stays below 2³¹.
//! - A PARQUET record that overlaps earlier records is the trace of a compaction that
//!   stopped between C3 and C4; the planner reports its C4 as a repair to run first.

use lakestream_format::Offset;
use lakestream_format::entry_index::{IndexValue, RawRecord};

use crate::config::MAX_RANGE_PAYLOAD;
use crate::records::IndexRecord;

/// A RAW record a compaction replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRecord {
    /// The record's start offset.
    pub start: Offset,
    /// Its end offset.
    pub end: Offset,
    /// The cumulative size at its end.
    pub cumulative_end: u64,
    /// Its `entry_size_bytes`.
    pub entry_size_bytes: u64,
    /// The WAL object it names.
    pub wal_object: String,
    /// Its creation timestamp.
    pub created_ms: i64,
    /// Its value, which locates its section in the WAL object.
    pub raw: RawRecord,
}

/// A range to compact: `[start, end)` with its cumulative sizes and the RAW records it
/// replaces, in offset order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangePlan {
    /// `s`.
    pub start: Offset,
    /// `e`.
    pub end: Offset,
    /// `c_s`.
    pub cumulative_start: u64,
    /// `c_e`, the cumulative size in the key of the last record.
    pub cumulative_end: u64,
    /// The records, `R_1 … R_k`.
    pub records: Vec<PlannedRecord>,
}

impl RangePlan {
    /// The payload bytes of the range, `c_e − c_s`.
    pub fn payload_bytes(&self) -> u64 {
        self.cumulative_end - self.cumulative_start
    }
}

/// A C4 left undone by a compaction that stopped after its C3: the PARQUET record covering
/// `[start, end)` overlaps records ending inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingRetire {
    /// `s` of the interrupted compaction.
    pub start: Offset,
    /// `e` of the interrupted compaction.
    pub end: Offset,
}

/// What the planner found for a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planning {
    /// Interrupted C4 steps to finish before anything else.
    pub repairs: Vec<PendingRetire>,
    /// The next range.
    pub next: NextRange,
}

/// The next range of a log, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextRange {
    /// A closed range: compact it now.
    Ready(RangePlan),
    /// A range that is still open; it closes by age at `closes_at_ms` unless it fills first.
    Open {
        /// When its oldest entry reaches `max_range_age`.
        closes_at_ms: i64,
        /// Its payload so far.
        payload_bytes: u64,
    },
    /// No RAW record above B.
    Nothing,
}

/// The thresholds that close a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Close at this much payload.
    pub max_range_bytes: u64,
    /// Close when the oldest entry is this old, in ms.
    pub max_range_age_ms: i64,
}

/// Plans the next compaction of a log from its records (in key order), its trim marker `b`
/// and the time `now_ms`.
pub fn plan(records: &[IndexRecord], b: Offset, now_ms: i64, thresholds: Thresholds) -> Planning {
    let repairs = interrupted_retires(records);
    // Records that an interrupted C4 will delete are not candidates.
    let covered = |r: &IndexRecord| repairs.iter().any(|p| r.end() > p.start && r.end() < p.end);
    let live: Vec<&IndexRecord> = records.iter().filter(|r| !covered(r)).collect();
    let Some(first) = live.iter().position(|r| r.is_raw() && r.end() > b) else {
        return Planning { repairs, next: NextRange::Nothing };
    };
    let mut chosen: Vec<&IndexRecord> = vec![live[first]];
    let mut payload = live[first].value.entry_size_bytes();
    for r in &live[first + 1..] {
        let previous = chosen[chosen.len() - 1];
        let adjacent = r.start == previous.end();
        let fits = payload + r.value.entry_size_bytes() <= MAX_RANGE_PAYLOAD;
        if !r.is_raw() || !adjacent || !fits || payload >= thresholds.max_range_bytes {
            break;
        }
        payload += r.value.entry_size_bytes();
        chosen.push(r);
    }
    let oldest_ms = chosen[0].created_ms;
    let closes_at_ms = oldest_ms.saturating_add(thresholds.max_range_age_ms);
    if payload < thresholds.max_range_bytes && now_ms < closes_at_ms {
        return Planning { repairs, next: NextRange::Open { closes_at_ms, payload_bytes: payload } };
    }
    // Every chosen record is RAW (the range stops at any other).
    let records: Vec<PlannedRecord> = chosen
        .iter()
        .filter_map(|r| match &r.value {
            IndexValue::Raw(raw) => Some(PlannedRecord {
                start: r.start,
                end: r.end(),
                cumulative_end: r.key.cumulative_size,
                entry_size_bytes: r.value.entry_size_bytes(),
                wal_object: raw.location.clone(),
                created_ms: r.created_ms,
                raw: raw.clone(),
            }),
            IndexValue::Parquet(_) => None,
        })
        .collect();
    let plan = RangePlan {
        start: chosen[0].start,
        end: chosen[chosen.len() - 1].end(),
        cumulative_start: chosen[0].cumulative_start(),
        cumulative_end: chosen[chosen.len() - 1].key.cumulative_size,
        records,
    };
    Planning { repairs, next: NextRange::Ready(plan) }
}

/// PARQUET records that overlap records ending inside them: C3 took effect, C4 did not.
fn interrupted_retires(records: &[IndexRecord]) -> Vec<PendingRetire> {
    records
        .iter()
        .filter(|p| !p.is_raw())
        .filter(|p| records.iter().any(|r| r.end() > p.start && r.end() < p.end()))
        .map(|p| PendingRetire { start: p.start, end: p.end() })
        .collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use lakestream_format::LogId;
    use lakestream_format::entry_index::{EntryIndex, ParquetRange, RawParts, decode};
    use lakestream_format::file_index::{FileIndex, FileIndexEntry};
    use lakestream_format::keys::IndexKey;

    use super::*;

    const T: Thresholds = Thresholds { max_range_bytes: 100, max_range_age_ms: 180_000 };

    /// A RAW record [start, end) of `size` payload bytes ending at cumulative `cum`.
    fn raw(start: u64, end: u64, size: u64, cum: u64, created_ms: i64) -> IndexRecord {
        let counts = [(end - start) as u32];
        let value = EntryIndex::raw_from_parts(&RawParts {
            location: &format!("wal-{end}"),
            record_counts: &counts,
            entry_size_bytes: size,
            payload_region_len: size,
            single_section: true,
        })
        .unwrap()
        .encode();
        record(end, cum, value, created_ms)
    }

    fn parquet(start: u64, end: u64, cs: u64, ce: u64) -> IndexRecord {
        let files =
            FileIndex::new(vec![FileIndexEntry { last_offset: end - 1, name: "f.parquet".into() }]).unwrap();
        let range = ParquetRange { start, end, cumulative_start: cs, cumulative_end: ce };
        record(end, ce, EntryIndex::parquet(range, &files).unwrap().encode(), 0)
    }

    fn record(end: u64, cum: u64, value: Vec<u8>, created_ms: i64) -> IndexRecord {
        let key = IndexKey::new(LogId(1), end, cum);
        let decoded = decode(&value).unwrap();
        IndexRecord {
            key,
            start: end - u64::from(decoded.message_count()),
            value: decoded,
            value_bytes: Bytes::from(value),
            created_ms,
            version: 1,
        }
    }

    #[test]
    fn a_range_closes_by_age_and_covers_adjacent_raw_records() {
        let records = [raw(0, 2, 10, 10, 1000), raw(2, 5, 10, 20, 2000), raw(5, 6, 10, 30, 3000)];
        let open = plan(&records, 0, 1000 + 179_999, T);
        assert_eq!(open.next, NextRange::Open { closes_at_ms: 181_000, payload_bytes: 30 });
        let ready = plan(&records, 0, 181_000, T);
        let NextRange::Ready(p) = ready.next else { panic!("{ready:?}") };
        assert_eq!((p.start, p.end, p.cumulative_start, p.cumulative_end), (0, 6, 0, 30));
        assert_eq!(p.records.len(), 3);
        assert_eq!(p.records[1].wal_object, "wal-5");
    }

    #[test]
    fn a_range_closes_at_max_bytes_with_the_record_that_fills_it() {
        let records = [raw(0, 1, 60, 60, 0), raw(1, 2, 60, 120, 0), raw(2, 3, 60, 180, 0)];
        let NextRange::Ready(p) = plan(&records, 0, 1, T).next else { panic!() };
        assert_eq!((p.start, p.end, p.payload_bytes()), (0, 2, 120));
    }

    // spec-rule: 05a5353448 [Compactor] The range MUST start at offset 0 or at the end offset of an earlie…
    #[test]
    fn c1_range_starts_after_the_last_parquet_record_and_stops_at_a_non_raw_one() {
        // C1: every record ending in (s, e] must be RAW; s is the end of an earlier record.
        let records = [parquet(0, 4, 0, 40), raw(4, 6, 5, 45, 0), raw(6, 7, 5, 50, 0)];
        let NextRange::Ready(p) = plan(&records, 0, 1_000_000, T).next else { panic!() };
        assert_eq!((p.start, p.end, p.cumulative_start), (4, 7, 40));
        let records = [raw(0, 2, 5, 5, 0), parquet(2, 4, 5, 10), raw(4, 6, 5, 15, 0)];
        let NextRange::Ready(p) = plan(&records, 0, 1_000_000, T).next else { panic!() };
        assert_eq!((p.start, p.end), (0, 2), "never reaches across a PARQUET record");
    }

    #[test]
    fn records_at_or_below_b_are_left_for_hard_trim() {
        let records = [raw(0, 2, 5, 5, 0), raw(2, 4, 5, 10, 0), raw(4, 6, 5, 15, 0)];
        let NextRange::Ready(p) = plan(&records, 4, 1_000_000, T).next else { panic!() };
        assert_eq!((p.start, p.end), (4, 6));
        // A record straddling B is compacted (its entries above B must stay readable).
        let NextRange::Ready(p) = plan(&records, 3, 1_000_000, T).next else { panic!() };
        assert_eq!((p.start, p.end), (2, 6));
        assert_eq!(plan(&records, 6, 1_000_000, T).next, NextRange::Nothing);
    }

    #[test]
    fn a_gap_ends_the_range() {
        let records = [raw(0, 2, 5, 5, 0), raw(3, 4, 5, 10, 0)];
        let NextRange::Ready(p) = plan(&records, 0, 1_000_000, T).next else { panic!() };
        assert_eq!(p.end, 2);
    }

    #[test]
    fn a_parquet_record_overlapping_raw_records_is_an_interrupted_c4() {
        // Between C3 and C4 the PARQUET record at K(L,e,c_e) overlaps R_1..R_(k-1).
        let records = [raw(0, 2, 5, 5, 0), raw(2, 3, 5, 10, 0), parquet(0, 5, 0, 15), raw(5, 6, 5, 20, 0)];
        let planning = plan(&records, 0, 1_000_000, T);
        assert_eq!(planning.repairs, vec![PendingRetire { start: 0, end: 5 }]);
        let NextRange::Ready(p) = planning.next else { panic!() };
        assert_eq!((p.start, p.end), (5, 6), "the covered records are not planned again");
    }

    // spec-rule: c4b514634e [Compactor] A compactor SHOULD keep entry_size_bytes below 2³¹; Appendix E giv…
    #[test]
    fn range_payload_stays_below_2_pow_31() {
        let big = MAX_RANGE_PAYLOAD / 2 + 1;
        let records = [raw(0, 1, big, big, 0), raw(1, 2, big, 2 * big, 0)];
        let t = Thresholds { max_range_bytes: MAX_RANGE_PAYLOAD, max_range_age_ms: 1 };
        let NextRange::Ready(p) = plan(&records, 0, 10, t).next else { panic!() };
        assert_eq!(p.end, 1);
    }
}
