//! Timestamps as Go's `time.Time` marshals them: RFC3339 with up to nine
//! fraction digits, trailing zeros dropped, `Z` for a zero offset.

/// `2006-01-02T15:04:05.999999999Z07:00` for `t` (ns since the epoch)
/// shown at `offset_ns` east of UTC.
pub fn rfc3339_nano(t: i64, offset_ns: i64) -> String {
    let local = t as i128 + offset_ns as i128;
    let nanos_per_sec = 1_000_000_000i128;
    let secs = local.div_euclid(nanos_per_sec);
    let frac = local.rem_euclid(nanos_per_sec) as u32;
    let days = secs.div_euclid(86_400) as i64;
    let of_day = secs.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    );
    if frac != 0 {
        let digits = format!("{frac:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    let minutes = offset_ns / 60_000_000_000;
    if minutes == 0 {
        out.push('Z');
    } else {
        let sign = if minutes < 0 { '-' } else { '+' };
        let m = minutes.abs();
        out.push_str(&format!("{sign}{:02}:{:02}", m / 60, m % 60));
    }
    out
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        assert_eq!(rfc3339_nano(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_nano(1_422_568_543_702_900_257, 0),
            "2015-01-29T21:55:43.702900257Z"
        );
        assert_eq!(rfc3339_nano(1_500_000_000, 0), "1970-01-01T00:00:01.5Z");
        assert_eq!(rfc3339_nano(-1, 0), "1969-12-31T23:59:59.999999999Z");
        assert_eq!(
            rfc3339_nano(0, -5 * 3_600_000_000_000),
            "1969-12-31T19:00:00-05:00"
        );
        assert_eq!(
            rfc3339_nano(0, 19_800_000_000_000),
            "1970-01-01T05:30:00+05:30"
        );
        assert_eq!(
            rfc3339_nano(951_782_400_000_000_000, 0),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(rfc3339_nano(i64::MIN, 0), "1677-09-21T00:12:43.145224192Z");
        assert_eq!(rfc3339_nano(i64::MAX, 0), "2262-04-11T23:47:16.854775807Z");
    }
}
