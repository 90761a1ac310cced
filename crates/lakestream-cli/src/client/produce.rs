//! `produce`: entries sent as they are read, in bounded requests, in input order.
//!
//! A thread reads the input and splits it into entries (by a delimiter, by 4-byte big-endian
//! length prefixes, or one entry per file); the async side gathers what is ready into a
//! request (at most `batch_entries` entries and `batch_bytes` payload bytes, waiting at most
//! `linger` for more) and sends it, one request at a time so that the stream keeps the
//! input's order. `tail -f log | lakestream produce s` therefore sends each line within
//! `linger` of reading it.

use std::io::{BufRead, BufReader, IsTerminal as _, Read};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Api, ClientError, ClientResult, ExitStatus, partition_path};

/// How standard input is cut into entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    /// Entries end with this byte string (a newline by default); empty entries are skipped.
    Delimited(Vec<u8>),
    /// Each entry is a 4-byte big-endian length, then that many bytes (binary-safe).
    LengthPrefixed,
}

/// Where entries come from.
#[derive(Debug, Clone)]
pub enum Input {
    /// Standard input, cut by a [`Framing`].
    Stdin(Framing),
    /// Each file is one entry.
    Files(Vec<PathBuf>),
}

/// How `produce` sends.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    /// The partition.
    pub partition: u32,
    /// Records each entry counts.
    pub record_count: u32,
    /// At most this many entries per request.
    pub batch_entries: usize,
    /// At most this many payload bytes per request (a larger entry goes alone).
    pub batch_bytes: usize,
    /// How long a request waits for more input once it holds one entry.
    pub linger: Duration,
    /// Print nothing per appended entry.
    pub quiet: bool,
    /// Show a progress bar on stderr (files only; default when stderr is a terminal).
    pub progress: Option<bool>,
}

/// One entry read from the input, with a label naming it in error messages.
#[derive(Debug)]
struct Item {
    payload: Vec<u8>,
    label: String,
}

/// Parses a `--delimiter` value: `\n`, `\t`, `\r`, `\0` and `\\` escapes are understood.
pub fn parse_delimiter(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next() {
            Some('n') => out.push(b'\n'),
            Some('t') => out.push(b'\t'),
            Some('r') => out.push(b'\r'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            other => return Err(format!("--delimiter {s:?}: unknown escape \\{}", other.unwrap_or(' '))),
        }
    }
    if out.is_empty() {
        return Err("--delimiter: must not be empty".into());
    }
    Ok(out)
}

/// Reads `reader` and sends each entry (or the framing error that stops it) into `tx`.
fn split(mut reader: impl BufRead, framing: &Framing, tx: &mpsc::Sender<ClientResult<Item>>) {
    let send = |item: ClientResult<Item>| tx.blocking_send(item).is_ok();
    match framing {
        Framing::Delimited(delimiter) => {
            let last = *delimiter.last().expect("a delimiter is never empty");
            let noun = if delimiter.as_slice() == b"\n" { "line" } else { "record" };
            let mut number = 0u64;
            let mut buf = Vec::new();
            loop {
                let mut eof = false;
                // Read up to the delimiter's last byte until the buffer ends with all of it.
                loop {
                    match reader.read_until(last, &mut buf) {
                        Ok(0) => {
                            eof = true;
                            break;
                        }
                        Ok(_) if buf.ends_with(delimiter) => break,
                        Ok(_) => continue,
                        Err(e) => {
                            send(Err(ClientError::failed(format!("reading standard input: {e}"))));
                            return;
                        }
                    }
                }
                if buf.ends_with(delimiter) {
                    buf.truncate(buf.len() - delimiter.len());
                }
                number += 1;
                if !buf.is_empty() {
                    let item = Item { payload: std::mem::take(&mut buf), label: format!("{noun} {number}") };
                    if !send(Ok(item)) {
                        return;
                    }
                }
                if eof {
                    return;
                }
            }
        }
        Framing::LengthPrefixed => {
            let mut position = 0u64;
            let mut number = 0u64;
            loop {
                let mut prefix = [0u8; 4];
                match read_full(&mut reader, &mut prefix) {
                    Ok(0) => return,
                    Ok(4) => {}
                    Ok(n) => {
                        send(Err(ClientError::usage(format!(
                            "standard input: {n} byte(s) at byte {position}, where a 4-byte length prefix was expected"
                        ))));
                        return;
                    }
                    Err(e) => {
                        send(Err(ClientError::failed(format!("reading standard input: {e}"))));
                        return;
                    }
                }
                let len = u32::from_be_bytes(prefix) as usize;
                let mut payload = vec![0; len];
                match read_full(&mut reader, &mut payload) {
                    Ok(n) if n == len => {}
                    Ok(n) => {
                        send(Err(ClientError::usage(format!(
                            "standard input: the entry at byte {position} announces {len} byte(s) but the input ends after {n}"
                        ))));
                        return;
                    }
                    Err(e) => {
                        send(Err(ClientError::failed(format!("reading standard input: {e}"))));
                        return;
                    }
                }
                number += 1;
                let item = Item { payload, label: format!("entry {number} at byte {position}") };
                position += 4 + len as u64;
                if !send(Ok(item)) {
                    return;
                }
            }
        }
    }
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A progress bar on stderr over a known number of bytes.
struct Progress {
    total_bytes: u64,
    total_items: usize,
    bytes: u64,
    items: usize,
}

impl Progress {
    fn advance(&mut self, items: usize, bytes: u64) {
        self.items += items;
        self.bytes += bytes;
        let fraction = if self.total_bytes == 0 { 1.0 } else { self.bytes as f64 / self.total_bytes as f64 };
        let filled = (fraction * 30.0).round() as usize;
        eprint!(
            "\r[{}{}] {:>3}% {}/{} files, {:.1}/{:.1} MiB",
            "#".repeat(filled.min(30)),
            ".".repeat(30 - filled.min(30)),
            (fraction * 100.0).round() as u32,
            self.items,
            self.total_items,
            self.bytes as f64 / 1048576.0,
            self.total_bytes as f64 / 1048576.0,
        );
        if self.items == self.total_items {
            eprintln!();
        }
    }
}

/// Produces `input` to a partition of `ns/stream`. Prints each appended entry's offset
/// (unless quiet); returns an error naming every entry that was not appended.
pub async fn produce(
    api: &Api,
    ns: &str,
    stream: &str,
    input: Input,
    options: &ProduceOptions,
) -> ClientResult<()> {
    let (tx, mut rx) = mpsc::channel::<ClientResult<Item>>(1024);
    let mut progress = None;
    match input {
        Input::Stdin(framing) => {
            std::thread::spawn(move || split(BufReader::new(std::io::stdin().lock()), &framing, &tx));
        }
        Input::Files(files) => {
            let mut total_bytes = 0;
            for f in &files {
                total_bytes += std::fs::metadata(f)
                    .map_err(|e| ClientError::usage(format!("{}: {e}", f.display())))?
                    .len();
            }
            if options.progress.unwrap_or_else(|| std::io::stderr().is_terminal()) {
                progress = Some(Progress { total_bytes, total_items: files.len(), bytes: 0, items: 0 });
            }
            std::thread::spawn(move || {
                for f in files {
                    let item = std::fs::read(&f)
                        .map(|payload| Item { payload, label: f.display().to_string() })
                        .map_err(|e| ClientError::usage(format!("{}: {e}", f.display())));
                    if tx.blocking_send(item).is_err() {
                        return;
                    }
                }
            });
        }
    }
    let path = partition_path(ns, stream, options.partition, "entries");
    let mut failed: Vec<String> = Vec::new();
    let mut carried: Option<Item> = None;
    let mut input_error: Option<ClientError> = None;
    let mut out = std::io::stdout().lock();
    'requests: loop {
        let first = match carried.take() {
            Some(item) => item,
            None => match rx.recv().await {
                Some(Ok(item)) => item,
                Some(Err(e)) => {
                    input_error = Some(e);
                    break;
                }
                None => break,
            },
        };
        let mut batch_bytes = first.payload.len();
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + options.linger;
        while batch.len() < options.batch_entries && batch_bytes < options.batch_bytes {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Ok(item))) => {
                    if batch_bytes + item.payload.len() > options.batch_bytes {
                        carried = Some(item);
                        break;
                    }
                    batch_bytes += item.payload.len();
                    batch.push(item);
                }
                Ok(Some(Err(e))) => {
                    input_error = Some(e);
                    break;
                }
                Ok(None) | Err(_) => break,
            }
        }
        let answers = match send_batch(api, &path, &batch, options.record_count).await {
            Ok(answers) => answers,
            Err(e) => {
                // The whole request was refused: name its entries, send nothing more.
                for item in &batch {
                    failed.push(format!("{}: {}", item.label, e.message));
                }
                report(&failed);
                return Err(ClientError {
                    message: format!(
                        "{} entr(y/ies) not appended; the rest of the input was not sent",
                        failed.len()
                    ),
                    ..e
                });
            }
        };
        if answers.len() != batch.len() {
            return Err(ClientError::failed(format!(
                "POST {path}: {} answers for {} entries",
                answers.len(),
                batch.len()
            )));
        }
        for (item, answer) in batch.iter().zip(&answers) {
            match answer.get("error") {
                Some(e) => failed.push(format!(
                    "{}: {}",
                    item.label,
                    e["message"].as_str().unwrap_or("(no message)")
                )),
                None if !options.quiet => {
                    use std::io::Write as _;
                    let _ = writeln!(
                        out,
                        "appended at offset {} ({} record(s))",
                        answer["offset"], answer["record_count"]
                    );
                }
                None => {}
            }
        }
        if let Some(p) = &mut progress {
            p.advance(batch.len(), batch_bytes as u64);
        }
        if input_error.is_some() {
            break 'requests;
        }
    }
    if let Some(e) = input_error {
        report(&failed);
        return Err(e);
    }
    if failed.is_empty() {
        return Ok(());
    }
    report(&failed);
    Err(ClientError {
        status: ExitStatus::EntriesFailed,
        message: format!("{} entr(y/ies) not appended", failed.len()),
        transient: false,
        http_status: None,
    })
}

/// Names every failed entry on stderr.
fn report(failed: &[String]) {
    for f in failed {
        eprintln!("not appended: {f}");
    }
}

/// Sends one request; a 429 (nothing was written) is retried after a pause.
async fn send_batch(api: &Api, path: &str, batch: &[Item], record_count: u32) -> ClientResult<Vec<Value>> {
    let entries: Vec<Value> = batch
        .iter()
        .map(|i| json!({"payload_base64": BASE64.encode(&i.payload), "record_count": record_count}))
        .collect();
    let body = json!({ "entries": entries });
    let mut pause = Duration::from_millis(100);
    let mut attempts = 0;
    loop {
        match api.json("POST", path, body.clone()).await {
            Ok(v) => return Ok(v["entries"].as_array().cloned().unwrap_or_default()),
            Err(e) if e.http_status == Some(429) && attempts < 10 => {
                attempts += 1;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(input: &[u8], framing: Framing) -> Vec<ClientResult<Item>> {
        let (tx, mut rx) = mpsc::channel(64);
        let input = input.to_vec();
        std::thread::spawn(move || split(std::io::Cursor::new(input), &framing, &tx)).join().unwrap();
        let mut out = Vec::new();
        while let Ok(i) = rx.try_recv() {
            out.push(i);
        }
        out
    }

    fn payloads(input: &[u8], framing: Framing) -> Vec<Vec<u8>> {
        items(input, framing).into_iter().map(|i| i.unwrap().payload).collect()
    }

    #[test]
    fn lines_are_entries_and_empty_lines_are_skipped() {
        let got = payloads(b"a\n\nbb\nlast", Framing::Delimited(b"\n".to_vec()));
        assert_eq!(got, vec![b"a".to_vec(), b"bb".to_vec(), b"last".to_vec()]);
    }

    #[test]
    fn a_multi_byte_delimiter_splits_binary_input() {
        let got = payloads(b"\x00\xff|x|\x01||", Framing::Delimited(b"||".to_vec()));
        assert_eq!(got, vec![b"\x00\xff|x|\x01".to_vec()]);
        let got = payloads(b"a--b--", Framing::Delimited(parse_delimiter("--").unwrap()));
        assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn length_prefixed_frames_carry_any_bytes() {
        let mut input = Vec::new();
        for p in [&b"\n\x00bin"[..], b"", b"z"] {
            input.extend_from_slice(&(p.len() as u32).to_be_bytes());
            input.extend_from_slice(p);
        }
        assert_eq!(
            payloads(&input, Framing::LengthPrefixed),
            vec![b"\n\x00bin".to_vec(), vec![], b"z".to_vec()]
        );
    }

    #[test]
    fn a_truncated_frame_is_an_error_naming_its_byte() {
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend_from_slice(b"abc");
        input.extend_from_slice(&10u32.to_be_bytes());
        input.extend_from_slice(b"short");
        let got = items(&input, Framing::LengthPrefixed);
        assert_eq!(got.len(), 2);
        let e = got.into_iter().nth(1).unwrap().unwrap_err();
        assert_eq!(e.status, ExitStatus::Usage);
        assert!(e.message.contains("at byte 7") && e.message.contains("announces 10"), "{e}");
        let got = items(&[0, 0], Framing::LengthPrefixed);
        assert!(got[0].as_ref().unwrap_err().message.contains("2 byte(s) at byte 0"));
    }

    #[test]
    fn delimiters_understand_escapes() {
        assert_eq!(parse_delimiter("\\n").unwrap(), b"\n");
        assert_eq!(parse_delimiter("\\0").unwrap(), b"\0");
        assert_eq!(parse_delimiter("\\r\\n").unwrap(), b"\r\n");
        assert!(parse_delimiter("").unwrap_err().contains("empty"));
        assert!(parse_delimiter("\\q").unwrap_err().contains("\\q"));
    }
}
