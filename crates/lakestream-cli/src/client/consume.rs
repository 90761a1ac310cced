//! `consume`: entries of one partition from a starting point, printed as raw payloads, JSON
//! lines or a table; `--follow` keeps reading as entries arrive and rides through a lost
//! connection or a restarting server, resuming at the next offset it has not printed.

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use super::{Api, ClientError, ClientResult, partition_path, segment};

/// Where reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the group's committed offset, or 0 without a group or a commit.
    Committed,
    /// At this offset.
    Offset(u64),
    /// After the last entry (only what is appended from now on).
    End,
    /// At the first entry appended at or after this time (milliseconds since the epoch).
    Time(i64),
}

/// How entries are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The payload's bytes as they are, then the delimiter (binary-safe).
    Raw,
    /// One JSON object per entry: offset, record_count, timestamp_ms, payload_base64.
    Json,
    /// Offset, time, records and the payload (escaped, shortened) in columns.
    Table,
}

/// How `consume` reads.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    /// The partition.
    pub partition: u32,
    /// Where to start.
    pub start: Start,
    /// Stop after this many entries.
    pub count: Option<u64>,
    /// Keep waiting for new entries (and reconnect after failures).
    pub follow: bool,
    /// How entries are printed.
    pub format: Format,
    /// What follows each payload in the raw format.
    pub delimiter: Vec<u8>,
    /// At most this many payload bytes per fetch.
    pub max_bytes: Option<usize>,
    /// A consumer group: start at its committed offset (unless a start is given) and commit
    /// the next offset after each batch printed (generation 0, a lone consumer).
    pub group: Option<String>,
}

/// A group's committed offset for a partition, if it has one (an unknown group has none).
pub async fn committed_offset(
    api: &Api,
    ns: &str,
    group: &str,
    stream: &str,
    partition: u32,
) -> ClientResult<Option<u64>> {
    let path =
        format!("/v1/namespaces/{}/groups/{}/streams/{}", segment(ns), segment(group), segment(stream));
    match api.json("GET", &path, Value::Null).await {
        Ok(v) => Ok(v["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["partition"].as_u64() == Some(u64::from(partition)))
            .and_then(|p| p["committed"]["offset"].as_u64())),
        Err(e) if e.http_status == Some(404) => {
            // No such group yet: that is the first commit's job. A missing stream is still an
            // error (the fetch that follows reports it).
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Commits `offset` (the next offset the group reads) for a partition.
async fn commit(
    api: &Api,
    ns: &str,
    group: &str,
    stream: &str,
    partition: u32,
    offset: u64,
) -> ClientResult<()> {
    let path = format!(
        "/v1/namespaces/{}/groups/{}/streams/{}/partitions/{partition}",
        segment(ns),
        segment(group),
        segment(stream)
    );
    api.json("PUT", &path, serde_json::json!({ "offset": offset, "generation": 0 })).await.map(|_| ())
}

/// Parses `--from-time`: milliseconds since the epoch, an RFC 3339 time
/// (`2026-12-01T10:00:00Z`), or `-DURATION` for that long ago (`-15m`, `-2h`).
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, String> {
    let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    if let Some(ago) = s.strip_prefix('-') {
        let d = humantime::parse_duration(ago).map_err(|e| format!("--from-time {s:?}: {e}"))?;
        return Ok(now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).max(0));
    }
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    humantime::parse_rfc3339_weak(s).map(ms).map_err(|e| {
        format!("--from-time {s:?}: {e} (expected milliseconds since the epoch, RFC 3339, or -DURATION)")
    })
}

/// One fetch's answer.
struct Fetched {
    entries: Vec<Value>,
    next_offset: u64,
}

async fn fetch(
    api: &Api,
    path: &str,
    offset: u64,
    wait: Duration,
    max_bytes: Option<usize>,
) -> ClientResult<Fetched> {
    let mut query = format!("{path}?offset={offset}&max_wait_ms={}", wait.as_millis());
    if let Some(b) = max_bytes {
        query.push_str(&format!("&max_bytes={b}"));
    }
    let v = api.json("GET", &query, Value::Null).await?;
    let entries = v["entries"].as_array().cloned().unwrap_or_default();
    let next_offset = v["next_offset"]
        .as_u64()
        .ok_or_else(|| ClientError::failed(format!("GET {query}: the answer has no next_offset")))?;
    Ok(Fetched { entries, next_offset })
}

/// The partition's first and next offsets.
pub async fn offsets(api: &Api, ns: &str, stream: &str, partition: u32) -> ClientResult<(u64, u64)> {
    let v = api.json("GET", &partition_path(ns, stream, partition, "offsets"), Value::Null).await?;
    match (v["first_offset"].as_u64(), v["next_offset"].as_u64()) {
        (Some(first), Some(next)) => Ok((first, next)),
        _ => Err(ClientError::failed(format!("offsets of {ns}/{stream}/{partition}: unexpected answer {v}"))),
    }
}

/// The offset of the first entry appended at or after `time_ms`, by binary search over the
/// partition (entry times are append times, which rise with offsets; where writers' clocks
/// disagree the answer is the first offset of a run at or after the time).
pub async fn offset_for_time(
    api: &Api,
    ns: &str,
    stream: &str,
    partition: u32,
    time_ms: i64,
) -> ClientResult<u64> {
    let (mut lo, mut hi) = offsets(api, ns, stream, partition).await?;
    let path = partition_path(ns, stream, partition, "entries");
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let got = fetch(api, &path, mid, Duration::ZERO, Some(1)).await?;
        let Some(e) = got.entries.first() else {
            hi = mid; // nothing at or after `mid`
            continue;
        };
        let (Some(offset), Some(records), Some(ts)) =
            (e["offset"].as_u64(), e["record_count"].as_u64(), e["timestamp_ms"].as_i64())
        else {
            return Err(ClientError::failed(format!(
                "GET {path}: an entry lacks offset, record_count or timestamp_ms"
            )));
        };
        if ts < time_ms {
            lo = (offset + records.max(1)).max(mid + 1);
        } else {
            // The answer is at most `offset`; no entry starts in (mid, offset).
            hi = offset.clamp(lo, mid);
        }
    }
    Ok(lo)
}

/// Prints entries of a partition of `ns/stream` as `options` say.
pub async fn consume(api: &Api, ns: &str, stream: &str, options: &ConsumeOptions) -> ClientResult<()> {
    let committed = match &options.group {
        Some(group) => committed_offset(api, ns, group, stream, options.partition).await?,
        None => None,
    };
    let mut offset = match (options.start, committed) {
        (Start::Offset(o), _) => o,
        (Start::End, _) => offsets(api, ns, stream, options.partition).await?.1,
        (Start::Time(t), _) => offset_for_time(api, ns, stream, options.partition, t).await?,
        (Start::Committed, Some(c)) => c,
        (Start::Committed, None) => 0,
    };
    let path = partition_path(ns, stream, options.partition, "entries");
    let mut out = std::io::stdout().lock();
    let mut printed = 0u64;
    let mut pause = Duration::from_millis(100);
    if options.format == Format::Table {
        let _ = writeln!(out, "{:<12} {:<24} {:>7}  PAYLOAD", "OFFSET", "TIME", "RECORDS");
    }
    loop {
        if options.count.is_some_and(|n| printed >= n) {
            return Ok(());
        }
        let wait = if options.follow { Duration::from_secs(10) } else { Duration::ZERO };
        let got = match fetch(api, &path, offset, wait, options.max_bytes).await {
            Ok(got) => {
                pause = Duration::from_millis(100);
                got
            }
            Err(e) if options.follow && e.transient => {
                eprintln!("lakestream: {e}; retrying from offset {offset} in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(e) => return Err(e),
        };
        for e in &got.entries {
            if options.count.is_some_and(|n| printed >= n) {
                break;
            }
            print_entry(&mut out, e, options)?;
            printed += 1;
            if let (Some(o), Some(r)) = (e["offset"].as_u64(), e["record_count"].as_u64()) {
                offset = o + r.max(1);
            }
        }
        let _ = out.flush();
        let printed_through = offset;
        offset = offset.max(got.next_offset);
        if let Some(group) = &options.group
            && !got.entries.is_empty()
        {
            // What was printed is consumed: the group resumes after it.
            commit(api, ns, group, stream, options.partition, printed_through).await?;
        }
        if got.entries.is_empty() && !options.follow {
            return Ok(());
        }
    }
}

fn print_entry(out: &mut impl std::io::Write, e: &Value, options: &ConsumeOptions) -> ClientResult<()> {
    let payload = || {
        BASE64
            .decode(e["payload_base64"].as_str().unwrap_or(""))
            .map_err(|err| ClientError::failed(format!("entry {}: payload: {err}", e["offset"])))
    };
    let written = match options.format {
        Format::Json => writeln!(out, "{e}"),
        Format::Raw => out.write_all(&payload()?).and_then(|()| out.write_all(&options.delimiter)),
        Format::Table => {
            let time = e["timestamp_ms"]
                .as_i64()
                .and_then(|ms| u64::try_from(ms).ok())
                .map(|ms| {
                    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
                })
                .unwrap_or_default();
            let text: String = String::from_utf8_lossy(&payload()?).escape_debug().take(60).collect();
            writeln!(out, "{:<12} {:<24} {:>7}  {text}", e["offset"], time, e["record_count"])
        }
    };
    // A closed pipe (`| head`) ends the command quietly.
    match written {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(err) => Err(ClientError::failed(format!("writing standard output: {err}"))),
        Ok(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_users_write_them() {
        let now = 10_000_000;
        assert_eq!(parse_time("1234", now).unwrap(), 1234);
        assert_eq!(parse_time("-15m", now).unwrap(), (10_000 - 900) * 1000);
        assert_eq!(parse_time("1970-01-01T00:00:10Z", now).unwrap(), 10_000);
        let e = parse_time("yesterday", now).unwrap_err();
        assert!(e.contains("--from-time") && e.contains("RFC 3339"), "{e}");
    }
}
