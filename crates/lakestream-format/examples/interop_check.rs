//! Checks fixtures written by the Java interop generator (`tests/interop/run.sh`):
//!
//! - `fastpfor-cases.bin`: for each random array, our FastPFOR words must equal the words
//!   JavaFastPFOR 0.2.1's `IntegratedIntCompressor.compress` returned, and our decoder must
//!   turn their words back into the array;
//! - `kafka/manifest.tsv`: each record-batch file built with kafka-clients' `MemoryRecords`
//!   must be counted as the manifest says, or refused where it says `refuse`.
//!
//! Usage: `cargo run -p lakestream-format --example interop_check -- DIR`. Exits non-zero
//! with a description of every mismatch.

use std::path::Path;
use std::process::ExitCode;

use lakestream_format::{entry_offsets, kafka};

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: interop_check DIR");
        return ExitCode::from(2);
    };
    let dir = Path::new(&dir);
    let mut failures = Vec::new();
    let fastpfor = check_fastpfor(&dir.join("fastpfor-cases.bin"), &mut failures);
    let kafka = check_kafka(&dir.join("kafka"), &mut failures);
    for f in &failures {
        eprintln!("MISMATCH: {f}");
    }
    let passed = (fastpfor + kafka).saturating_sub(failures.len());
    println!("interop: {passed} passed, {} failed", failures.len());
    if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

struct Cursor<'a> {
    bytes: &'a [u8],
}

impl Cursor<'_> {
    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.bytes.split_first_chunk::<4>()?;
        self.bytes = rest;
        Some(u32::from_be_bytes(*head))
    }
}

/// Returns the number of cases checked.
fn check_fastpfor(path: &Path, failures: &mut Vec<String>) -> usize {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            failures.push(format!("{}: {e}", path.display()));
            return 1;
        }
    };
    let Some(body) = bytes.strip_prefix(b"LSFP") else {
        failures.push(format!("{}: missing the LSFP header", path.display()));
        return 1;
    };
    let mut c = Cursor { bytes: body };
    let Some(cases) = c.u32() else {
        failures.push("fastpfor: truncated header".into());
        return 1;
    };
    for case in 0..cases {
        let read = |c: &mut Cursor<'_>| -> Option<Vec<u32>> {
            let n = c.u32()? as usize;
            (0..n).map(|_| c.u32()).collect()
        };
        let (Some(values), Some(theirs)) = (read(&mut c), read(&mut c)) else {
            failures.push(format!("fastpfor case {case}: truncated file"));
            return cases as usize;
        };
        match entry_offsets::encode(&values) {
            Ok(ours) if ours == theirs => {}
            Ok(ours) => failures.push(format!(
                "fastpfor case {case} (n = {}): our words differ from IntegratedIntCompressor's (ours {} words, theirs {})",
                values.len(),
                ours.len(),
                theirs.len()
            )),
            Err(e) => failures.push(format!("fastpfor case {case}: our encoder refused the array: {e}")),
        }
        match entry_offsets::decode(&theirs) {
            Ok(decoded) if decoded == values => {}
            Ok(_) => failures.push(format!("fastpfor case {case}: decoding their words gives another array")),
            Err(e) => failures.push(format!("fastpfor case {case}: our decoder refused their words: {e}")),
        }
    }
    println!("fastpfor: {cases} arrays from JavaFastPFOR 0.2.1 checked both ways");
    cases as usize
}

/// Returns the number of fixtures checked.
fn check_kafka(dir: &Path, failures: &mut Vec<String>) -> usize {
    let manifest = match std::fs::read_to_string(dir.join("manifest.tsv")) {
        Ok(m) => m,
        Err(e) => {
            failures.push(format!("{}: {e}", dir.join("manifest.tsv").display()));
            return 1;
        }
    };
    let mut checked = 0;
    for line in manifest.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        checked += 1;
        let Some((file, expected)) = line.split_once('\t') else {
            failures.push(format!("kafka manifest line {line:?} has no tab"));
            continue;
        };
        let payload = match std::fs::read(dir.join(file)) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("kafka {file}: {e}"));
                continue;
            }
        };
        let counted = kafka::count_records(&payload);
        match (expected, counted) {
            ("refuse", Err(_)) => {}
            ("refuse", Ok(n)) => {
                failures.push(format!("kafka {file}: must be refused, but was counted as {n} records"))
            }
            (n, Ok(count)) if n.parse::<u32>().ok() == Some(count) => {}
            (n, Ok(count)) => failures.push(format!("kafka {file}: expected {n} records, counted {count}")),
            (n, Err(e)) => failures.push(format!("kafka {file}: expected {n} records, refused: {e}")),
        }
    }
    println!("kafka: {checked} MemoryRecords fixtures from kafka-clients checked");
    checked
}
