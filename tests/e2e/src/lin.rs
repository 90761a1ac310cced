//! Linearizability runs: besides the checker's producers (whose every attempt a recording
//! [`Ledger`](crate::checker::Ledger) writes into the [`History`]), a tail reader per
//! partition (fetches from where it got to, with a short wait, and now and then the
//! partition's offsets), a trimmer (soft trims below what the tail readers have read, so
//! every offset is read by someone before it becomes unreadable), and at the end a read of
//! each partition to its end ([`snapshot`]). Then the history goes to the Porcupine checker
//! in `tests/lincheck` ([`check`]), with the planted anomalies it must reject.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{Api, Batch, Entry, retry};
use crate::history::{History, log_name};
use crate::rng::Rng;
use crate::{Error, Result};

/// Every entry some read returned, by partition and offset (the first copy read).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    entries: Arc<Mutex<BTreeMap<u32, BTreeMap<u64, Entry>>>>,
}

impl Observed {
    fn insert(&self, partition: u32, entries: &[Entry]) {
        let mut all = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let log = all.entry(partition).or_default();
        for e in entries {
            log.entry(e.offset).or_insert_with(|| e.clone());
        }
    }

    /// Each partition's entries in offset order, from offset 0: what the readers saw of the
    /// whole log, trimmed parts included (for [`crate::checker::verify`]).
    pub fn logs(&self, partitions: u32) -> BTreeMap<u32, Vec<Entry>> {
        let all = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        (0..partitions)
            .map(|p| (p, all.get(&p).map(|l| l.values().cloned().collect()).unwrap_or_default()))
            .collect()
    }
}

/// What the observers watch.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The namespace.
    pub namespace: String,
    /// The stream.
    pub stream: String,
    /// Its partitions.
    pub partitions: u32,
}

/// The running tail readers and trimmer.
#[derive(Debug)]
pub struct Observers {
    tasks: Vec<JoinHandle<()>>,
    /// Entries the readers saw.
    pub observed: Observed,
}

impl Observers {
    /// Starts a tail reader of every partition through `reader`, and, with `trims` set, a
    /// trimmer through that writer; each records into `history` until `stop` turns true.
    pub fn start(
        reader: Api,
        trims: Option<Api>,
        watched: &Watched,
        history: &History,
        stop: &watch::Receiver<bool>,
        seed: u64,
    ) -> Observers {
        let observed = Observed::default();
        let progress: Vec<Arc<AtomicU64>> = (0..watched.partitions).map(|_| Arc::default()).collect();
        let mut tasks = Vec::new();
        for p in 0..watched.partitions {
            tasks.push(tokio::spawn(tail_reader(
                reader.clone(),
                watched.clone(),
                p,
                history.clone(),
                observed.clone(),
                progress[p as usize].clone(),
                stop.clone(),
            )));
        }
        if let Some(writer) = trims {
            tasks.push(tokio::spawn(trimmer(
                writer,
                watched.clone(),
                history.clone(),
                progress,
                stop.clone(),
                seed,
            )));
        }
        Observers { tasks, observed }
    }

    /// Waits for every observer to stop (after `stop` turned true).
    pub async fn join(self) -> Observed {
        for t in self.tasks {
            let _ = t.await;
        }
        self.observed
    }
}

/// Reads a partition from 0 as entries arrive, each fetch an operation of the history; every
/// eighth round also its offsets. Failed requests (a process being killed) record nothing.
async fn tail_reader(
    api: Api,
    w: Watched,
    p: u32,
    history: History,
    observed: Observed,
    progress: Arc<AtomicU64>,
    stop: watch::Receiver<bool>,
) {
    let client = history.client();
    let log = log_name(&w.stream, p);
    let mut next = 0u64;
    let mut round = 0u64;
    while !*stop.borrow() {
        round += 1;
        if round.is_multiple_of(8) {
            let call = history.now();
            if let Ok(offsets) = api.offsets(&w.namespace, &w.stream, p).await {
                history.tail(client, &log, call, &offsets);
            }
        }
        let call = history.now();
        match api.fetch_wait(&w.namespace, &w.stream, p, next, 64 << 10, Duration::from_millis(200)).await {
            Ok(batch) => {
                history.read(client, &log, call, next, &batch, false);
                observed.insert(p, &batch.entries);
                if !batch.entries.is_empty() {
                    next = batch.next_offset;
                    progress.store(next, Ordering::Relaxed);
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Every 0.5–1.5 s soft-trims a partition through a point below what its tail reader has
/// read (two thirds of it), so that every offset is read before it is trimmed.
async fn trimmer(
    api: Api,
    w: Watched,
    history: History,
    progress: Vec<Arc<AtomicU64>>,
    stop: watch::Receiver<bool>,
    seed: u64,
) {
    let client = history.client();
    let rng = Rng::new(seed ^ 0x7121_3000);
    while !*stop.borrow() {
        tokio::time::sleep(Duration::from_millis(rng.between(500, 1500))).await;
        let p = rng.between(0, u64::from(w.partitions) - 1) as u32;
        let read = progress[p as usize].load(Ordering::Relaxed);
        if read < 3 {
            continue;
        }
        let through = read * 2 / 3;
        let call = history.now();
        let answer = api.trim(&w.namespace, &w.stream, p, through).await;
        history.trim(client, &log_name(&w.stream, p), call, through, &answer);
    }
}

/// Reads partition `p` from its first offset to its end, as one operation of the history
/// that runs to the end: the offsets are read before and after, and the read is repeated
/// until they agree (nothing was appended or trimmed meanwhile, so the entries are the log
/// at any moment in between). Retries failed requests until `patience` has passed.
pub async fn snapshot(
    api: &Api,
    history: &History,
    w: &Watched,
    p: u32,
    patience: Duration,
) -> Result<Vec<Entry>> {
    let client = history.client();
    let log = log_name(&w.stream, p);
    let deadline = Instant::now() + patience;
    let (ns, stream) = (w.namespace.as_str(), w.stream.as_str());
    loop {
        let call = history.now();
        let before = retry(deadline, || api.offsets(ns, stream, p)).await?;
        let mut entries = Vec::new();
        let mut next = before.first_offset;
        let mut marker = None;
        loop {
            // Small fetches: over a WAL of many small objects a large one may take longer
            // than a request's timeout.
            let batch = retry(deadline, || api.fetch(ns, stream, p, next, 256 << 10)).await?;
            marker.get_or_insert(batch.trim_marker);
            if batch.entries.is_empty() {
                if next >= before.next_offset {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Error::new(format!(
                        "{log}: no entry at offset {next} though the next offset is {}",
                        before.next_offset
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            next = batch.next_offset;
            entries.extend(batch.entries);
            if next >= before.next_offset {
                break;
            }
        }
        let after = retry(deadline, || api.offsets(ns, stream, p)).await?;
        if after == before && next == before.next_offset {
            let batch = Batch { entries, next_offset: next, trim_marker: marker.unwrap_or(0) };
            history.read(client, &log, call, before.first_offset, &batch, true);
            return Ok(batch.entries);
        }
        if Instant::now() > deadline {
            return Err(Error::new(format!("{log}: the log kept changing while it was read to its end")));
        }
    }
}

/// Every partition read to its end ([`snapshot`]), into `observed` as well.
pub async fn snapshot_all(
    api: &Api,
    history: &History,
    w: &Watched,
    observed: &Observed,
    patience: Duration,
) -> Result<()> {
    for p in 0..w.partitions {
        let entries = snapshot(api, history, w, p, patience).await?;
        observed.insert(p, &entries);
    }
    Ok(())
}

/// The checker's binary: `LAKESTREAM_LINCHECK_BIN` (scripts/test builds it), else built with
/// `go build` from `tests/lincheck` next to this crate (Go 1.22+ and the Go module proxy for
/// Porcupine; fails with instructions when Go is missing, never skips).
pub fn checker_bin() -> Result<PathBuf> {
    if let Ok(bin) = std::env::var("LAKESTREAM_LINCHECK_BIN") {
        let path = PathBuf::from(&bin);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::new(format!("LAKESTREAM_LINCHECK_BIN={bin:?} is not a file")))
        };
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lincheck");
    let out_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(Path::parent).map(Path::to_path_buf))
        .unwrap_or_else(std::env::temp_dir);
    let bin = out_dir.join("lincheck");
    // A name of its own, then a rename: suites running at once never see half a binary.
    let partial = out_dir.join(format!("lincheck.{}.partial", std::process::id()));
    let output = Command::new("go")
        .args(["build", "-o"])
        .arg(&partial)
        .arg(".")
        .current_dir(&source)
        .output()
        .map_err(|e| {
            Error::new(format!(
                "cannot run `go build` in {} ({e}): the linearizability checker needs Go 1.22 or later; \
                 install it, or set LAKESTREAM_LINCHECK_BIN to a built checker (scripts/test builds one)",
                source.display()
            ))
        })?;
    if !output.status.success() {
        return Err(Error::new(format!(
            "`go build` of the checker in {} failed ({}):\n{}",
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    std::fs::rename(&partial, &bin)
        .map_err(|e| Error::new(format!("cannot move {}: {e}", partial.display())))?;
    Ok(bin)
}

/// What the checker found in one history, and whether it rejected each planted anomaly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Operations checked.
    pub ops: u64,
    /// Logs (partitions) checked.
    pub logs: usize,
    /// Logs not linearizable, plus trim markers that went backwards.
    pub violations: u64,
    /// Logs not decided within the timeout.
    pub undecided: u64,
    /// Appends acknowledged.
    pub appends_ok: u64,
    /// Appends of unknown outcome that took effect (their entry was read).
    pub unknown_applied: u64,
    /// Appends of unknown outcome that did not (every offset was read, theirs nowhere).
    pub unknown_not_applied: u64,
    /// Appends of unknown outcome left undetermined.
    pub unknown_undetermined: u64,
    /// Appends refused.
    pub appends_failed: u64,
    /// Reads, and the entries they returned.
    pub reads: u64,
    /// Entries the reads returned.
    pub entries_read: u64,
    /// Tails.
    pub tails: u64,
    /// Trims answered.
    pub trims: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Planted anomaly → caught.
    pub mutants: BTreeMap<String, bool>,
    /// The checker's report as text.
    pub text: String,
}

impl Verdict {
    /// One line for a suite's output.
    pub fn summary(&self) -> String {
        format!(
            "{} operations on {} logs: {} appends acknowledged, unknown outcomes {} applied / {} not / {} undetermined, \
             {} refused; {} reads ({} entries), {} tails, {} trims; faults {:?}; {} violations, {} undecided; \
             planted anomalies caught: {:?}",
            self.ops,
            self.logs,
            self.appends_ok,
            self.unknown_applied,
            self.unknown_not_applied,
            self.unknown_undetermined,
            self.appends_failed,
            self.reads,
            self.entries_read,
            self.tails,
            self.trims,
            self.faults,
            self.violations,
            self.undecided,
            self.mutants
        )
    }
}

/// Writes `history` to `dir/history.jsonl` (and, when `LAKESTREAM_E2E_HISTORY_DIR` is set,
/// to `<that>/<suite>-<pid>.jsonl`), runs the checker on it with the planted anomalies, and
/// returns what it found. Logs that are not linearizable are drawn (Porcupine's HTML) into
/// `dir/lincheck/`.
pub fn check(suite: &str, history: &History, dir: &Path) -> Result<Verdict> {
    let path = dir.join("history.jsonl");
    history.write_to(&path)?;
    if let Ok(keep) = std::env::var("LAKESTREAM_E2E_HISTORY_DIR") {
        let kept = Path::new(&keep).join(format!("{suite}-{}.jsonl", std::process::id()));
        std::fs::create_dir_all(&keep).map_err(|e| Error::new(format!("cannot create {keep}: {e}")))?;
        history.write_to(&kept)?;
        println!("{suite}: history kept in {}", kept.display());
    }
    let bin = checker_bin()?;
    let output = Command::new(&bin)
        .arg("-json")
        .arg("-mutants")
        .arg("-viz")
        .arg(dir.join("lincheck"))
        .arg(&path)
        .output()
        .map_err(|e| Error::new(format!("cannot run {}: {e}", bin.display())))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let (text, json_line) = stdout.trim_end().rsplit_once('\n').unwrap_or(("", stdout.trim_end()));
    let report: serde_json::Value = serde_json::from_str(json_line).map_err(|e| {
        Error::new(format!(
            "the checker ({}) printed no report ({e}; exit {}):\n{stdout}\n{}",
            bin.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    })?;
    verdict_of(&report, &path, text)
}

fn verdict_of(report: &serde_json::Value, path: &Path, text: &str) -> Result<Verdict> {
    let key = path.to_string_lossy();
    let h = report
        .pointer(&format!("/histories/{}", key.replace('~', "~0").replace('/', "~1")))
        .ok_or_else(|| Error::new(format!("the checker's report has no entry for {key}: {report}")))?;
    let num =
        |v: &serde_json::Value, name: &str| v.get(name).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let logs = h.get("logs").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
    let sum = |name: &str| logs.iter().map(|l| num(l, name)).sum::<u64>();
    let faults = h
        .get("faults")
        .and_then(serde_json::Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    let mutants = report
        .get("mutants")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .map(|m| {
                    let kind = m.get("kind").and_then(serde_json::Value::as_str).unwrap_or("?").to_string();
                    (kind, m.get("caught").and_then(serde_json::Value::as_bool).unwrap_or(false))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Verdict {
        ops: num(h, "ops"),
        logs: logs.len(),
        violations: num(h, "violations"),
        undecided: num(h, "undecided"),
        appends_ok: sum("appends_ok"),
        unknown_applied: sum("unknown_applied"),
        unknown_not_applied: sum("unknown_not_applied"),
        unknown_undetermined: sum("unknown_undetermined"),
        appends_failed: sum("appends_failed"),
        reads: sum("reads"),
        entries_read: sum("entries_read"),
        tails: sum("tails"),
        trims: sum("trims"),
        faults,
        mutants,
        text: text.to_string(),
    })
}

/// [`check`], then asserts: every log linearizable and decided, every planted anomaly caught,
/// appends acknowledged, and (with `expect_faults`) every fault kind named injected.
pub fn assert_linearizable(suite: &str, history: &History, dir: &Path, expect_faults: &[&str]) -> Verdict {
    let verdict = check(suite, history, dir).unwrap_or_else(|e| panic!("{suite}: {e}"));
    println!("{}", verdict.text);
    println!("{suite}: linearizability: {}", verdict.summary());
    assert_eq!(
        (verdict.violations, verdict.undecided),
        (0, 0),
        "{suite}: the history is not linearizable (violations, undecided); the checker said:\n{}",
        verdict.text
    );
    assert!(
        verdict.appends_ok > 0 && verdict.reads > 0,
        "{suite}: nothing acknowledged or read: {verdict:?}"
    );
    for kind in ["lost", "duplicate", "reorder"] {
        assert_eq!(
            verdict.mutants.get(kind),
            Some(&true),
            "{suite}: the checker did not reject the history with a planted {kind} entry:\n{}",
            verdict.text
        );
    }
    for fault in expect_faults {
        assert!(
            verdict.faults.get(*fault).is_some_and(|&n| n > 0),
            "{suite}: no {fault:?} fault in the history: {:?}",
            verdict.faults
        );
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_from_the_checkers_json() {
        let path = Path::new("/tmp/x/history.jsonl");
        let report = serde_json::json!({
            "histories": {"/tmp/x/history.jsonl": {
                "logs": [{"log": "s/0", "result": "Ok", "ops": 10, "appends_ok": 4, "reads": 3},
                         {"log": "s/1", "result": "Ok", "ops": 5, "appends_ok": 2, "unknown_applied": 1}],
                "faults": {"kill -9": 2}, "ops": 15, "violations": 0, "undecided": 0}},
            "mutants": [{"kind": "lost", "caught": true}, {"kind": "reorder", "caught": false}],
            "ok": false
        });
        let v = verdict_of(&report, path, "text").unwrap();
        assert_eq!((v.ops, v.logs, v.appends_ok, v.unknown_applied, v.reads), (15, 2, 6, 1, 3));
        assert_eq!(v.faults.get("kill -9"), Some(&2));
        assert_eq!(v.mutants.get("lost"), Some(&true));
        assert_eq!(v.mutants.get("reorder"), Some(&false));
        assert!(verdict_of(&report, Path::new("/elsewhere"), "").is_err());
    }
}
