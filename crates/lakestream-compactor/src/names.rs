//! Object names the compactor writes and reads.
//!
//! - Compacted files: `ls-{L}-{uuid}.parquet`, companions `ls-{L}-{uuid}.index`, in
//!   `{namespace}/{stream}/` of the compacted root. The spec asks only for a unique name
//!   ending in `.parquet`; the log ID in the name lets the collector of orphaned files know
//!   which log's records could name a file, without a catalog. Files named otherwise (Ursa's
//!   `ursa-{uuid}.parquet`) are never collected as orphans.
//! - WAL objects: `yyyy/MM/dd/HH/mm/ss/{uuid}` in UTC, as our writer names them; the time
//!   lets the collector skip young objects and stop a time-ordered listing early.

use lakestream_format::LogId;
use lakestream_format::compacted::{INDEX_SUFFIX, PARQUET_SUFFIX};

/// The prefix of every compacted file name this crate writes.
pub const FILE_PREFIX: &str = "ls-";

/// The name of a new compacted file of `log_id`.
pub fn compacted_file_name(log_id: LogId, uuid: &str) -> String {
    format!("{FILE_PREFIX}{}-{uuid}{PARQUET_SUFFIX}", log_id.0)
}

/// For a file name of ours (`ls-{L}-{uuid}.parquet` or `.index`), the log and the Parquet
/// file's name; `None` for any other name.
pub fn parse_compacted_name(file_name: &str) -> Option<(LogId, String)> {
    let stem = file_name
        .strip_suffix(PARQUET_SUFFIX)
        .or_else(|| file_name.strip_suffix(INDEX_SUFFIX))?
        .strip_prefix(FILE_PREFIX)?;
    let (log, uuid) = stem.split_once('-')?;
    if log.is_empty() || !log.bytes().all(|b| b.is_ascii_digit()) || (log.len() > 1 && log.starts_with('0')) {
        return None;
    }
    if uuid.is_empty() || uuid.contains(PARQUET_SUFFIX) {
        return None;
    }
    let log_id = LogId(log.parse().ok()?);
    Some((log_id, format!("{FILE_PREFIX}{log}-{uuid}{PARQUET_SUFFIX}")))
}

/// The time, in ms since the epoch, at the start of a WAL object name
/// `yyyy/MM/dd/HH/mm/ss/...`; `None` when the name does not start that way.
pub fn wal_name_time_ms(name: &str) -> Option<i64> {
    let mut parts = name.split('/');
    let mut field = |digits: usize, range: std::ops::RangeInclusive<i64>| -> Option<i64> {
        let p = parts.next()?;
        if p.len() != digits || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: i64 = p.parse().ok()?;
        range.contains(&v).then_some(v)
    };
    let (year, month, day) = (field(4, 0..=9999)?, field(2, 1..=12)?, field(2, 1..=31)?);
    let (hour, minute, second) = (field(2, 0..=23)?, field(2, 0..=59)?, field(2, 0..=59)?);
    parts.next()?; // the unique part must follow
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the era-based algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use lakestream_format::compacted::validate_compacted_name;

    use super::*;

    // spec-rule: 9bc0ff7256 [Compactor] A compactor MUST give each compacted file a name that ends in .par…
    #[test]
    fn compacted_names_are_valid_and_carry_the_log() {
        // [Compactor] a name that ends in .parquet and contains .parquet nowhere else.
        let name = compacted_file_name(LogId(42), "3f2b7c1e-0000-4000-8000-000000000001");
        validate_compacted_name(&name).unwrap();
        assert_eq!(parse_compacted_name(&name), Some((LogId(42), name.clone())));
        let companion = name.replace(".parquet", ".index");
        assert_eq!(parse_compacted_name(&companion), Some((LogId(42), name)));
        for other in ["ursa-abc.parquet", "ls-x-1.parquet", "ls-01-u.parquet", "ls-1-.parquet", "ls-1-u.txt"]
        {
            assert_eq!(parse_compacted_name(other), None, "{other}");
        }
    }

    #[test]
    fn wal_names_give_their_utc_time() {
        assert_eq!(wal_name_time_ms("1970/01/01/00/00/00/u"), Some(0));
        assert_eq!(wal_name_time_ms("2026/11/30/08/36/28/u"), Some(1_796_027_788_000));
        assert_eq!(wal_name_time_ms("2024/02/29/23/59/59/x/y"), Some(1_709_251_199_000));
        for bad in [
            "2026/11/30/08/36/28",
            "2026/13/30/08/36/28/u",
            "26/11/30/08/36/28/u",
            "abc",
            "2026/11/30/24/00/00/u",
        ] {
            assert_eq!(wal_name_time_ms(bad), None, "{bad}");
        }
    }
}
