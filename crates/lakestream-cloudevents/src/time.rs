//! RFC 3339 `date-time` parsing and canonical UTC rendering, without a date library: the codec
//! keeps `time` as its original string and only needs the instant for the Kafka record
//! timestamp and the protobuf `Timestamp`.

/// Parses an RFC 3339 `date-time` into seconds since the Unix epoch and nanoseconds.
///
/// `YYYY-MM-DDThh:mm:ss[.fraction](Z|±hh:mm)`; `T` and `Z` may be lower case; seconds are
/// mandatory; a leap second (`:60`) is accepted and counts as the next second; fractions of
/// any length are accepted and truncated to nanoseconds.
pub fn parse_rfc3339(text: &str) -> Option<(i64, u32)> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = bytes.get(range)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let separator = |at: usize, expected: &[u8]| bytes.get(at).is_some_and(|b| expected.contains(b));
    if !(separator(4, b"-")
        && separator(7, b"-")
        && separator(10, b"Tt")
        && separator(13, b":")
        && separator(16, b":"))
    {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut pos = 19;
    let mut nanos = 0u32;
    if bytes.get(pos) == Some(&b'.') {
        let digits = bytes[pos + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        for (index, digit) in bytes[pos + 1..pos + 1 + digits].iter().take(9).enumerate() {
            nanos += u32::from(digit - b'0') * 10u32.pow(8 - index as u32);
        }
        pos += 1 + digits;
    }
    let offset_seconds = match bytes.get(pos)? {
        b'Z' | b'z' if pos + 1 == bytes.len() => 0i64,
        sign @ (b'+' | b'-') if pos + 6 == bytes.len() && bytes[pos + 3] == b':' => {
            let (offset_hour, offset_minute) = (number(pos + 1..pos + 3)?, number(pos + 4..pos + 6)?);
            if offset_hour > 23 || offset_minute > 59 {
                return None;
            }
            let magnitude = i64::from(offset_hour * 3600 + offset_minute * 60);
            if *sign == b'+' { magnitude } else { -magnitude }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::from(year), month, day);
    let local = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some((local - offset_seconds, nanos))
}

/// Renders an instant as canonical UTC RFC 3339: `YYYY-MM-DDThh:mm:ssZ`, with a fraction of 3,
/// 6 or 9 digits when the nanoseconds need it. `None` for years outside 0000–9999 or nanos
/// of a second or more.
pub fn format_utc(seconds: i64, nanos: u32) -> Option<String> {
    if nanos >= 1_000_000_000 {
        return None;
    }
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return None;
    }
    let fraction = match nanos {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1_000 == 0 => format!(".{:06}", n / 1_000),
        n => format!(".{n:09}"),
    };
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    ))
}

fn is_leap(year: u32) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_rfc3339_forms_are_the_same_instant() {
        let expected = Some((1_522_949_460, 0)); // 2018-04-05T17:31:00Z
        for text in [
            "2018-04-05T17:31:00Z",
            "2018-04-05t17:31:00z",
            "2018-04-05T17:31:00.000000000Z",
            "2018-04-05T18:31:00+01:00",
            "2018-04-05T16:31:00-01:00",
        ] {
            assert_eq!(parse_rfc3339(text), expected, "{text}");
        }
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00.123456789123Z"), Some((0, 123_456_789)));
        assert_eq!(parse_rfc3339("2016-12-31T23:59:60Z"), parse_rfc3339("2017-01-01T00:00:00Z"));
    }

    #[test]
    fn time_that_is_not_rfc3339_is_refused() {
        // The conformance cases invalidTime*, and our own edge cases.
        for text in [
            "lunchtime",
            "2018-04-05T18:31Z",
            "2018-04-05T18:31:00X",
            "2018-04-05T18:31:00+25:00",
            "2018-04-05T18:31:00+xx:00",
            "2018-04-05T18:31:00+05",
            "2018-04-05T18:31:00",
            "2018-02-30T00:00:00Z",
            "2018-04-05T24:00:00Z",
            "2018-04-05T18:31:00.Z",
            "2018-04-05 18:31:00Z",
            "2018-04-05T18:31:00Z ",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text}");
        }
    }

    #[test]
    fn canonical_utc_rendering_round_trips() {
        for (text, seconds, nanos) in [
            ("2018-04-05T17:31:00Z", 1_522_949_460, 0),
            ("1970-01-01T00:00:00.001Z", 0, 1_000_000),
            ("1969-12-31T23:59:59.000001Z", -1, 1_000),
            ("2000-02-29T12:00:00.000000001Z", 951_825_600, 1),
        ] {
            assert_eq!(format_utc(seconds, nanos).as_deref(), Some(text));
            assert_eq!(parse_rfc3339(text), Some((seconds, nanos)));
        }
        assert_eq!(format_utc(0, 1_000_000_000), None);
    }
}
