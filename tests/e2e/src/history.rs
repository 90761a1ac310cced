//! The history of a run for the linearizability checker (`tests/lincheck`, Porcupine): every
//! append with its outcome (acknowledged at an offset, refused, or unknown), every read with
//! the entries and trim marker it was answered, every tail (first and next offset) and trim,
//! each with its call and return time on one monotonic clock, and the faults injected. An
//! operation whose outcome is unknown has no return time: it may take effect at any moment
//! after its call.
//!
//! Written as JSON lines (one operation per line; the fields are documented in
//! `tests/lincheck/history.go`). Entries are named by the value their payload carries
//! (producer, sequence number and attempt, see [`crate::checker::payload_attempt`]), unique per
//! attempt, so the checker can tell which attempt of a retried append a read returned.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};

use crate::api::{Batch, Entry, Offsets, Outcome};
use crate::checker::parse_payload_attempt;
use crate::{Error, Result};

/// A recorder shared by every client of a run. Cheap to clone.
#[derive(Debug, Clone)]
pub struct History {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    started: Instant,
    lines: Mutex<Vec<String>>,
    next_client: AtomicU32,
}

/// What a trim was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrimResult {
    /// The marker stored after it.
    Stored(u64),
    /// Refused: nothing was written.
    Failed(String),
    /// It may or may not have moved the marker.
    Unknown(String),
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Self {
        History {
            inner: Arc::new(Inner {
                started: Instant::now(),
                lines: Mutex::new(Vec::new()),
                next_client: AtomicU32::new(0),
            }),
        }
    }

    /// A new client id (one per sequential actor: producer, reader, trimmer).
    pub fn client(&self) -> u32 {
        self.inner.next_client.fetch_add(1, Ordering::Relaxed)
    }

    /// Nanoseconds since the history started.
    pub fn now(&self) -> u64 {
        u64::try_from(self.inner.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn push(&self, line: Value) {
        self.inner.lines.lock().unwrap_or_else(|e| e.into_inner()).push(line.to_string());
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.inner.lines.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An append of the entry named `value` (`count` records) to `log`, called at `call`,
    /// answered now with `outcome`.
    pub fn append(&self, client: u32, log: &str, call: u64, value: &str, count: u32, outcome: &Outcome) {
        let mut line = json!({"client": client, "log": log, "call": call, "op": "append", "value": value, "count": count});
        let now = self.now();
        match outcome {
            Outcome::Acked { offset, .. } => {
                line["outcome"] = json!("ok");
                line["offset"] = json!(offset);
                line["return"] = json!(now);
            }
            Outcome::Failed(e) => {
                line["outcome"] = json!("failed");
                line["error"] = json!(e);
                line["return"] = json!(now);
            }
            Outcome::Unknown(e) => {
                line["outcome"] = json!("unknown");
                line["error"] = json!(e);
            }
        }
        self.push(line);
    }

    /// A read of `log` from `from`, called at `call`, answered now with `batch`. `to_end`: the
    /// entries are known to run to the log's end (see [`crate::lin::snapshot`]).
    pub fn read(&self, client: u32, log: &str, call: u64, from: u64, batch: &Batch, to_end: bool) {
        let entries: Vec<Value> = batch
            .entries
            .iter()
            .map(|e| json!({"offset": e.offset, "count": e.record_count, "value": value_of(e)}))
            .collect();
        self.push(json!({"client": client, "log": log, "call": call, "return": self.now(), "op": "read",
            "from": from, "marker": batch.trim_marker, "entries": entries, "to_end": to_end}));
    }

    /// A tail (`GET …/offsets`) of `log`, called at `call`, answered now.
    pub fn tail(&self, client: u32, log: &str, call: u64, offsets: &Offsets) {
        self.push(json!({"client": client, "log": log, "call": call, "return": self.now(), "op": "tail",
            "first": offsets.first_offset, "next": offsets.next_offset}));
    }

    /// A trim of `log` through `through`, called at `call`, answered now.
    pub fn trim(&self, client: u32, log: &str, call: u64, through: u64, result: &TrimResult) {
        let mut line = json!({"client": client, "log": log, "call": call, "op": "trim", "through": through});
        match result {
            TrimResult::Stored(marker) => {
                line["outcome"] = json!("ok");
                line["marker"] = json!(marker);
                line["return"] = json!(self.now());
            }
            TrimResult::Failed(e) => {
                line["outcome"] = json!("failed");
                line["error"] = json!(e);
                line["return"] = json!(self.now());
            }
            TrimResult::Unknown(e) => {
                line["outcome"] = json!("unknown");
                line["error"] = json!(e);
            }
        }
        self.push(line);
    }

    /// A fault injected now (`what`: its kind, e.g. "kill -9 writer"; counted by kind).
    pub fn fault(&self, what: &str) {
        let now = self.now();
        self.push(json!({"op": "fault", "what": what, "call": now, "return": now}));
    }

    /// Writes the history to `path`, one record per line.
    pub fn write_to(&self, path: &Path) -> Result<()> {
        let lines = self.inner.lines.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| Error::new(format!("cannot create {}: {e}", path.display())))?,
        );
        for line in lines {
            writeln!(file, "{line}").map_err(|e| Error::new(format!("writing {}: {e}", path.display())))?;
        }
        file.flush().map_err(|e| Error::new(format!("writing {}: {e}", path.display())))
    }
}

/// The name a log goes by in the history: `stream/partition`.
pub fn log_name(stream: &str, partition: u32) -> String {
    format!("{stream}/{partition}")
}

/// The value an entry read back carries: what its payload names, or a description of bytes
/// that name nothing (never equal to an appended value, so the checker rejects them).
pub fn value_of(e: &Entry) -> String {
    match parse_payload_attempt(&e.payload) {
        Some(((_, producer, seq), attempt)) => attempt_value(producer, seq, attempt),
        None => {
            let head: String = e.payload.iter().take(24).map(|b| format!("{b:02x}")).collect();
            format!("unrecognized:{}:{head}", e.payload.len())
        }
    }
}

/// The value of attempt `attempt` of producer `producer`'s entry `seq`.
pub fn attempt_value(producer: u32, seq: u64, attempt: u32) -> String {
    format!("w{producer}s{seq}a{attempt}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::payload_attempt;

    #[test]
    fn records_are_json_lines_the_checker_reads() {
        let h = History::new();
        let c = h.client();
        h.append(c, "s/0", 1, "w0s0a1", 1, &Outcome::Acked { offset: 0, timestamp_ms: 5 });
        h.append(c, "s/0", 2, "w0s1a1", 1, &Outcome::Unknown("reset".into()));
        let entry =
            Entry { offset: 0, record_count: 1, timestamp_ms: 5, payload: payload_attempt((0, 0, 0), 1, 64) };
        h.read(c, "s/0", 3, 0, &Batch { entries: vec![entry], next_offset: 1, trim_marker: 0 }, true);
        h.trim(c, "s/0", 4, 0, &TrimResult::Stored(0));
        h.fault("kill -9 writer");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        h.write_to(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0]["offset"], 0);
        assert_eq!(lines[1]["outcome"], "unknown");
        assert!(lines[1].get("return").is_none(), "an unknown outcome has no return: {}", lines[1]);
        assert_eq!(lines[2]["entries"][0]["value"], "w0s0a1");
        assert_eq!(lines[2]["to_end"], true);
        assert_eq!(lines[3]["marker"], 0);
        assert_eq!(lines[4]["what"], "kill -9 writer");
    }
}
