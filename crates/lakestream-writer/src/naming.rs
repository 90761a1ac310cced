//! WAL object names.
//!
//! The spec asks only that a name is never reused. We use Ursa's form
//! `yyyy/MM/dd/HH/mm/ss/{uuid}` — in UTC, where Ursa uses the writer's local time zone
//! (addendum §12, row 11) — so that a WAL root shared with Ursa stays collectable by its
//! garbage collector, and so that names sort by creation time, which our reclamation uses to
//! find candidates cheaply.

/// A civil UTC date and time, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime {
    /// Year, e.g. 2026.
    pub year: i64,
    /// Month, 1–12.
    pub month: u32,
    /// Day of month, 1–31.
    pub day: u32,
    /// Hour, 0–23.
    pub hour: u32,
    /// Minute, 0–59.
    pub minute: u32,
    /// Second, 0–59.
    pub second: u32,
}

impl UtcTime {
    /// The UTC civil time of `ms` milliseconds since the Unix epoch (negative values allowed).
    pub fn from_epoch_ms(ms: i64) -> Self {
        let secs = ms.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        UtcTime {
            year,
            month,
            day,
            hour: (sod / 3600) as u32,
            minute: (sod % 3600 / 60) as u32,
            second: (sod % 60) as u32,
        }
    }

    /// `yyyy/MM/dd/HH/mm/ss`, the directory part of a WAL object name.
    pub fn path_prefix(&self) -> String {
        format!(
            "{:04}/{:02}/{:02}/{:02}/{:02}/{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day): the era-based
/// algorithm, exact for every i64 day count we can meet.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The name of a new WAL object: `yyyy/MM/dd/HH/mm/ss/{uuid}` for the UTC time `now_ms`.
/// `uuid` must be fresh (a random UUID), which makes the name unique.
pub fn wal_object_name(now_ms: i64, uuid: &str) -> String {
    format!("{}/{}", UtcTime::from_epoch_ms(now_ms).path_prefix(), uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_known_dates() {
        assert_eq!(UtcTime::from_epoch_ms(0).path_prefix(), "1970/01/01/00/00/00");
        // 2023-11-14T22:13:20Z
        assert_eq!(UtcTime::from_epoch_ms(1_700_000_000_000).path_prefix(), "2023/11/14/22/13/20");
        // Leap day, and the last second of a leap year.
        assert_eq!(UtcTime::from_epoch_ms(951_782_400_000).path_prefix(), "2000/02/29/00/00/00");
        assert_eq!(UtcTime::from_epoch_ms(1_735_689_599_999).path_prefix(), "2024/12/31/23/59/59");
        assert_eq!(UtcTime::from_epoch_ms(-1).path_prefix(), "1969/12/31/23/59/59");
    }

    #[test]
    fn names_sort_by_time() {
        let a = wal_object_name(1_700_000_000_000, "00000000-0000-4000-8000-000000000000");
        let b = wal_object_name(1_700_000_001_000, "00000000-0000-4000-8000-000000000000");
        assert!(a < b);
        assert_eq!(a, "2023/11/14/22/13/20/00000000-0000-4000-8000-000000000000");
    }

    #[test]
    fn day_counting_matches_a_naive_walk() {
        // Walk day by day over four centuries and compare with the algorithm.
        let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        for days in 0..146_097 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let len = match m {
                1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
                4 | 6 | 9 | 11 => 30,
                _ if leap(y) => 29,
                _ => 28,
            };
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
