//! The streaming-proof style checker over HTTP, the process-level sibling of the in-process
//! checker in `crates/lakestream-reader/tests/checker.rs` (same counts, same rules).
//!
//! Producers append sequence-numbered entries, one per request, each producer to one
//! partition, several producers per partition; every attempt's outcome is recorded. An
//! append whose outcome is unknown is retried with the same payload until it is
//! acknowledged or fails. The verifier then reads every partition and counts:
//!
//! - **lost** — acknowledged but not read back (must be 0);
//! - **misplaced** — read back, but not at the acknowledged offset (must be 0);
//! - **reordered** — a producer's entries read back out of its order, or acknowledged at
//!   offsets out of its order (must be 0);
//! - **phantom** — read back though every attempt failed (must be 0);
//! - **corrupt** — a payload that is not what its producer sent, or offsets that are not
//!   dense (must be 0);
//! - **duplicates** — read back more than once; allowed only where an attempt's outcome was
//!   unknown (the rest are **unexplained duplicates**, must be 0).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::api::{Api, Entry, Outcome};
use crate::history::{History, attempt_value, log_name};

/// Identifies one logical entry: (partition, producer, sequence number).
pub type Key = (u32, u32, u64);

/// The payload of `key`, `size` bytes (at least its header): a header naming the key, then
/// filler derived from it, so a corrupted or misattributed payload is detected.
pub fn payload(key: Key, size: usize) -> Bytes {
    payload_attempt(key, 0, size)
}

/// The payload of attempt `attempt` (from 1) of `key`: as [`payload`], naming the attempt
/// too, so that a read tells which attempt of a retried append was written (the
/// linearizability checker needs every append's value to be its own). Attempt 0 is
/// [`payload`]'s, which names none.
pub fn payload_attempt(key: Key, attempt: u32, size: usize) -> Bytes {
    let (p, producer, seq) = key;
    let mut out = if attempt == 0 {
        format!("e2e p={p} w={producer} s={seq};").into_bytes()
    } else {
        format!("e2e p={p} w={producer} s={seq} a={attempt};").into_bytes()
    };
    let mut x = (u64::from(p) << 48)
        ^ (u64::from(producer) << 32)
        ^ seq
        ^ (u64::from(attempt) << 40)
        ^ 0x5DEE_CE66_D1CE_5EED;
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(b'a' + (x % 26) as u8);
    }
    Bytes::from(out)
}

/// The key a payload names, if it is exactly what [`payload`] (or [`payload_attempt`]) makes
/// for that key.
pub fn parse_payload(bytes: &[u8]) -> Option<Key> {
    parse_payload_attempt(bytes).map(|(key, _)| key)
}

/// The key and attempt a payload names (attempt 0 for [`payload`]'s), if it is exactly what
/// [`payload_attempt`] makes for them.
pub fn parse_payload_attempt(bytes: &[u8]) -> Option<(Key, u32)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let header = text.strip_prefix("e2e ")?.split(';').next()?;
    let mut fields = header.split(' ');
    let mut next = |prefix: &str| fields.next()?.strip_prefix(prefix)?.parse::<u64>().ok();
    let p = u32::try_from(next("p=")?).ok()?;
    let w = u32::try_from(next("w=")?).ok()?;
    let s = next("s=")?;
    let attempt = match next("a=") {
        Some(a) => u32::try_from(a).ok().filter(|&a| a > 0)?,
        None => 0,
    };
    let key = (p, w, s);
    (payload_attempt(key, attempt, bytes.len()) == bytes).then_some((key, attempt))
}

/// Every attempt's outcome, by key; and, when recording, every attempt in a [`History`] for
/// the linearizability checker.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    outcomes: Arc<Mutex<HashMap<Key, Vec<Outcome>>>>,
    history: Option<History>,
}

impl Ledger {
    /// A ledger that also records every attempt (with its call and return times) in
    /// `history`; the producers then send each attempt's own payload
    /// ([`payload_attempt`]).
    pub fn recording(history: History) -> Self {
        Ledger { outcomes: Arc::default(), history: Some(history) }
    }

    /// The history it records into, if any.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// Records one attempt.
    pub fn record(&self, key: Key, outcome: Outcome) {
        self.outcomes.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().push(outcome);
    }

    /// A copy of every key's outcomes.
    pub fn snapshot(&self) -> HashMap<Key, Vec<Outcome>> {
        self.outcomes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the producers do.
#[derive(Debug, Clone)]
pub struct Load {
    /// The namespace.
    pub namespace: String,
    /// The stream.
    pub stream: String,
    /// Its partitions; producers are spread over them.
    pub partitions: u32,
    /// Producers per partition.
    pub producers_per_partition: u32,
    /// Payload bytes per entry.
    pub entry_bytes: usize,
    /// Attempts per entry before the producer gives up on it and moves on.
    pub max_attempts: u32,
}

/// Runs every producer until `stop` turns true; returns how many entries they sent.
pub async fn produce(api: Api, load: Load, ledger: Ledger, stop: watch::Receiver<bool>) -> u64 {
    produce_through(vec![api], load, ledger, stop).await
}

/// As [`produce`], with the producers of each partition spread over several writer
/// processes in turn (producer `w` uses `apis[w % apis.len()]`), so that writers append to
/// the same logs at once.
pub async fn produce_through(apis: Vec<Api>, load: Load, ledger: Ledger, stop: watch::Receiver<bool>) -> u64 {
    assert!(!apis.is_empty(), "produce_through needs at least one writer");
    let mut tasks = Vec::new();
    for p in 0..load.partitions {
        for w in 0..load.producers_per_partition {
            let api = apis[w as usize % apis.len()].clone();
            let (load, ledger, stop) = (load.clone(), ledger.clone(), stop.clone());
            tasks.push(tokio::spawn(async move { producer(api, load, ledger, stop, p, w).await }));
        }
    }
    let mut sent = 0;
    for t in tasks {
        sent += t.await.unwrap_or(0);
    }
    sent
}

async fn producer(api: Api, load: Load, ledger: Ledger, stop: watch::Receiver<bool>, p: u32, w: u32) -> u64 {
    let mut seq = 0;
    let client = ledger.history().map(History::client);
    let log = log_name(&load.stream, p);
    while !*stop.borrow() {
        let key = (p, w, seq);
        for attempt in 1..=load.max_attempts {
            // Without a history every attempt sends the same bytes, as a client retrying
            // would; with one each attempt's bytes are its own (see `payload_attempt`).
            let body = match client {
                Some(_) => [(payload_attempt(key, attempt, load.entry_bytes), 1)],
                None => [(payload(key, load.entry_bytes), 1)],
            };
            let call = ledger.history().map(History::now);
            let outcome = api
                .produce(&load.namespace, &load.stream, p, &body)
                .await
                .pop()
                .unwrap_or_else(|| Outcome::Unknown("no outcome".into()));
            if let (Some(history), Some(client), Some(call)) = (ledger.history(), client, call) {
                history.append(client, &log, call, &attempt_value(w, seq, attempt), 1, &outcome);
            }
            let done = matches!(outcome, Outcome::Acked { .. });
            ledger.record(key, outcome);
            // Keep retrying through a restart, but stop once the run is over.
            if done || attempt == load.max_attempts || *stop.borrow() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt.min(10)))).await;
        }
        seq += 1;
    }
    seq
}

/// The verifier's counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Keys acknowledged.
    pub acknowledged: usize,
    /// Keys with at least one unknown outcome.
    pub unknown: usize,
    /// Failed attempts.
    pub failed_attempts: usize,
    /// Entries read back.
    pub read: usize,
    /// Acknowledged but not read back.
    pub lost: usize,
    /// Read back, but not at an acknowledged offset.
    pub misplaced: usize,
    /// Out of a producer's order.
    pub reordered: usize,
    /// Read back though every attempt failed, or never sent.
    pub phantom: usize,
    /// Not what was sent, or offsets not dense.
    pub corrupt: usize,
    /// Extra copies read back.
    pub duplicates: usize,
    /// Extra copies of keys without an unknown outcome.
    pub unexplained_duplicates: usize,
}

impl Report {
    /// The counts that must be zero, as a tuple for one assertion.
    pub fn violations(&self) -> (usize, usize, usize, usize, usize, usize) {
        (self.lost, self.misplaced, self.reordered, self.phantom, self.corrupt, self.unexplained_duplicates)
    }
}

/// Checks what was read back (`reads`: partition → its entries in offset order) against
/// every recorded outcome.
pub fn verify(outcomes: &HashMap<Key, Vec<Outcome>>, reads: &BTreeMap<u32, Vec<Entry>>) -> Report {
    let mut report = Report::default();
    // Where each key was read back.
    let mut seen: HashMap<Key, Vec<u64>> = HashMap::new();
    for (&partition, entries) in reads {
        // The last sequence number seen per producer, for the read-order check. A retried
        // unknown append may reappear after later entries of its producer were read once
        // (its first copy was written, then the retry): only first copies count for order.
        let mut last: HashMap<u32, u64> = HashMap::new();
        let mut expected_offset = entries.first().map(|e| e.offset);
        for e in entries {
            report.read += 1;
            if Some(e.offset) != expected_offset {
                report.corrupt += 1;
            }
            expected_offset = Some(e.offset + u64::from(e.record_count));
            let Some(key) = parse_payload(&e.payload).filter(|k| k.0 == partition) else {
                report.corrupt += 1;
                continue;
            };
            let copies = seen.entry(key).or_default();
            if copies.is_empty() {
                if last.get(&key.1).is_some_and(|&prev| key.2 < prev) {
                    report.reordered += 1;
                }
                last.insert(key.1, key.2);
            }
            copies.push(e.offset);
        }
    }
    // Acknowledged offsets must rise with each producer's sequence numbers.
    let mut acked_by_producer: BTreeMap<(u32, u32), BTreeMap<u64, u64>> = BTreeMap::new();
    for (key, list) in outcomes {
        let acked: Vec<u64> = list
            .iter()
            .filter_map(|o| if let Outcome::Acked { offset, .. } = o { Some(*offset) } else { None })
            .collect();
        let unknown = list.iter().any(|o| matches!(o, Outcome::Unknown(_)));
        report.failed_attempts += list.iter().filter(|o| matches!(o, Outcome::Failed(_))).count();
        report.unknown += usize::from(unknown);
        let read = seen.get(key).cloned().unwrap_or_default();
        if let Some(&first) = acked.first() {
            report.acknowledged += 1;
            acked_by_producer.entry((key.0, key.1)).or_default().insert(key.2, first);
        }
        for off in &acked {
            if read.is_empty() {
                report.lost += 1;
            } else if !read.contains(off) {
                report.misplaced += 1;
            }
        }
        if acked.is_empty() && !unknown && !read.is_empty() {
            report.phantom += 1;
        }
        if read.len() > 1 {
            report.duplicates += read.len() - 1;
            if !unknown {
                report.unexplained_duplicates += read.len() - 1;
            }
        }
    }
    for offsets in acked_by_producer.values() {
        let mut prev = None;
        for &off in offsets.values() {
            if prev.is_some_and(|p| off <= p) {
                report.reordered += 1;
            }
            prev = Some(off);
        }
    }
    report.phantom += seen.keys().filter(|k| !outcomes.contains_key(k)).count();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: u64, key: Key) -> Entry {
        Entry { offset, record_count: 1, timestamp_ms: 0, payload: payload(key, 64) }
    }

    fn acked(offset: u64) -> Outcome {
        Outcome::Acked { offset, timestamp_ms: 0 }
    }

    #[test]
    fn payloads_round_trip_and_corruption_is_noticed() {
        let p = payload((3, 1, 99), 100);
        assert_eq!(p.len(), 100);
        assert_eq!(parse_payload(&p), Some((3, 1, 99)));
        assert_eq!(parse_payload_attempt(&p), Some(((3, 1, 99), 0)));
        let mut bad = p.to_vec();
        bad[80] ^= 1;
        assert_eq!(parse_payload(&bad), None);
        let second = payload_attempt((3, 1, 99), 2, 100);
        assert_ne!(second, payload_attempt((3, 1, 99), 3, 100));
        assert_eq!(parse_payload_attempt(&second), Some(((3, 1, 99), 2)));
        assert_eq!(parse_payload(&second), Some((3, 1, 99)));
        assert_eq!(parse_payload_attempt(b"\xff\xfe"), None);
    }

    #[test]
    fn a_clean_run_has_no_violations() {
        let outcomes = HashMap::from([
            ((0, 0, 0), vec![acked(0)]),
            ((0, 0, 1), vec![Outcome::Unknown("reset".into()), acked(2)]),
            ((0, 0, 2), vec![Outcome::Failed("refused".into())]),
        ]);
        let reads =
            BTreeMap::from([(0, vec![entry(0, (0, 0, 0)), entry(1, (0, 0, 1)), entry(2, (0, 0, 1))])]);
        let r = verify(&outcomes, &reads);
        assert_eq!(r.violations(), (0, 0, 0, 0, 0, 0), "{r:?}");
        assert_eq!((r.acknowledged, r.unknown, r.duplicates, r.failed_attempts), (2, 1, 1, 1));
    }

    #[test]
    fn every_violation_is_counted() {
        let outcomes = HashMap::from([
            ((0, 0, 0), vec![acked(0)]),
            ((0, 0, 1), vec![acked(1)]),
            ((0, 0, 2), vec![acked(5)]), // lost
            ((0, 0, 3), vec![Outcome::Failed("refused".into())]),
        ]);
        let reads = BTreeMap::from([(
            0,
            vec![
                entry(0, (0, 0, 1)), // reordered and misplaced
                entry(1, (0, 0, 0)),
                entry(2, (0, 0, 3)), // phantom
                entry(3, (0, 0, 0)), // an unexplained duplicate
                entry(7, (0, 9, 9)), // never sent, and a gap in the offsets
            ],
        )]);
        let r = verify(&outcomes, &reads);
        assert_eq!(
            (r.lost, r.reordered, r.phantom, r.unexplained_duplicates, r.corrupt),
            (1, 1, 2, 1, 1),
            "{r:?}"
        );
        assert_eq!(r.misplaced, 2, "{r:?}");
    }
}
