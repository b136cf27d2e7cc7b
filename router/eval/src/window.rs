//! `GROUP BY time(interval[, offset])` windows, `tz()` zones and the bucket
//! range of a query, computed as InfluxDB 1.8's `IteratorOptions.Window`
//! does: buckets align to the Unix epoch plus the offset; with a zone, to
//! local midnight (the zone's offset shifts the alignment, and a change of
//! offset inside a window moves its edges when the change is shorter than
//! the interval).
//!
//! Zones: `UTC` (and its aliases), fixed offsets (`Etc/GMT+5` is UTC−5,
//! POSIX's inverted sign) and every zone of the IANA database
//! (`America/Los_Angeles`), read as [`Zone::Rules`] (transition instants
//! and offsets) from the database `jiff` bundles.

use shardhouse_influxql::time::TimeRange;
use shardhouse_influxql::TimeOffset;

use crate::error::{Error, Result};

/// InfluxQL's smallest and largest representable times.
pub const MIN_TIME: i64 = i64::MIN + 2;
pub const MAX_TIME: i64 = i64::MAX - 1;
const SECOND: i64 = 1_000_000_000;

/// A `tz()` zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zone {
    Utc,
    /// Seconds east of UTC.
    Fixed(i64),
    /// Offsets that change: `initial` (seconds east of UTC) until the first
    /// transition; each transition is (instant in ns, new offset in seconds),
    /// sorted by instant.
    Rules {
        initial: i64,
        transitions: Vec<(i64, i64)>,
    },
}

impl Zone {
    /// The zone's offset at instant `t`, in nanoseconds.
    pub fn offset_ns(&self, t: i64) -> i64 {
        let seconds = match self {
            Zone::Utc => 0,
            Zone::Fixed(s) => *s,
            Zone::Rules {
                initial,
                transitions,
            } => {
                let after = transitions.partition_point(|(at, _)| *at <= t);
                if after == 0 {
                    *initial
                } else {
                    transitions[after - 1].1
                }
            }
        };
        seconds * SECOND
    }
}

/// Resolves a `tz('name')` the way Go's `time.LoadLocation` would for the
/// zones this crate knows.
pub fn time_zone(name: &str) -> Result<Zone> {
    const UTC_NAMES: &[&str] = &[
        "UTC",
        "UCT",
        "GMT",
        "GMT0",
        "GMT+0",
        "GMT-0",
        "Greenwich",
        "Universal",
        "Zulu",
        "Etc/UTC",
        "Etc/UCT",
        "Etc/GMT",
        "Etc/GMT0",
        "Etc/GMT+0",
        "Etc/GMT-0",
        "Etc/Greenwich",
        "Etc/Universal",
        "Etc/Zulu",
    ];
    if name.is_empty() || UTC_NAMES.contains(&name) {
        return Ok(Zone::Utc);
    }
    if let Some(rest) = name.strip_prefix("Etc/GMT") {
        let (sign, digits) = match rest.as_bytes().first() {
            Some(b'+') => (-1, &rest[1..]),
            Some(b'-') => (1, &rest[1..]),
            _ => return Err(Error::UnknownTimeZone(name.to_string())),
        };
        let hours: i64 = digits
            .parse()
            .ok()
            .filter(|h| !digits.starts_with('0') && *h >= 1)
            .ok_or_else(|| Error::UnknownTimeZone(name.to_string()))?;
        let in_range = if sign < 0 { hours <= 12 } else { hours <= 14 };
        if !in_range {
            return Err(Error::UnknownTimeZone(name.to_string()));
        }
        return Ok(Zone::Fixed(sign * hours * 3600));
    }
    named_zone(name).ok_or_else(|| Error::UnknownTimeZone(name.to_string()))
}

/// A zone of the IANA database (bundled with the router through `jiff`, so
/// the answer does not depend on the host's zoneinfo): its offsets over the
/// whole InfluxQL time range, as transitions.
fn named_zone(name: &str) -> Option<Zone> {
    // Go's LoadLocation reads names as paths; these are never zone names.
    if name.starts_with('/') || name.contains("..") || name.contains('\\') {
        return None;
    }
    let tz = jiff::tz::TimeZone::get(name).ok()?;
    let first = jiff::Timestamp::from_nanosecond(i128::from(MIN_TIME)).ok()?;
    let initial = i64::from(tz.to_offset(first).seconds());
    let transitions: Vec<(i64, i64)> = tz
        .following(first)
        .map(|t| (t.timestamp().as_nanosecond(), t.offset().seconds()))
        .take_while(|(at, _)| *at <= i128::from(MAX_TIME))
        .map(|(at, offset)| (at as i64, i64::from(offset)))
        .collect();
    Some(if transitions.is_empty() {
        Zone::Fixed(initial)
    } else {
        Zone::Rules {
            initial,
            transitions,
        }
    })
}

/// A `GROUP BY time(duration, offset)` interval, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub duration: i64,
    /// Normalized into `(-duration, duration)`, as InfluxDB does.
    pub offset: i64,
}

impl Interval {
    /// `time(duration[, offset])`; `now` is the query's now (for
    /// `time(1m, now())`, which aligns buckets to now).
    pub fn new(duration: i64, offset: Option<TimeOffset>, now: i64) -> Result<Interval> {
        if duration <= 0 {
            return Err(Error::InvalidInterval);
        }
        let offset = match offset {
            None => 0,
            Some(TimeOffset::Duration(d)) => d % duration,
            Some(TimeOffset::Now) => now - floor_to(now, duration),
        };
        Ok(Interval { duration, offset })
    }
}

/// Go's `Time.Truncate` for instants after year 1 (what `now` is).
fn floor_to(t: i64, d: i64) -> i64 {
    t - t.rem_euclid(d)
}

/// Everything that decides which bucket a point falls in: the query's time
/// range, its `GROUP BY time()` interval and its zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Windowing {
    /// `None` without `GROUP BY time()`: the whole range is one bucket.
    pub interval: Option<Interval>,
    /// `[start, end)`; `i64::MIN` / `i64::MAX` mean unbounded.
    pub range: TimeRange,
    /// `None` without `tz()`.
    pub zone: Option<Zone>,
}

impl Windowing {
    pub fn new(interval: Option<Interval>, range: TimeRange, zone: Option<Zone>) -> Self {
        Windowing {
            interval,
            range,
            zone,
        }
    }

    /// InfluxDB's `opt.StartTime` (inclusive).
    pub fn start_time(&self) -> i64 {
        if self.range.has_start() {
            self.range.start.max(MIN_TIME)
        } else {
            MIN_TIME
        }
    }

    /// InfluxDB's `opt.EndTime` (inclusive).
    pub fn end_time(&self) -> i64 {
        if self.range.has_end() {
            (self.range.end - 1).min(MAX_TIME)
        } else {
            MAX_TIME
        }
    }

    fn zone_offset(&self, t: i64) -> i64 {
        self.zone.as_ref().map_or(0, |z| z.offset_ns(t))
    }

    /// The `[start, end)` of the window holding `t` (InfluxDB's
    /// `IteratorOptions.Window`).
    pub fn window(&self, t: i64) -> (i64, i64) {
        let Some(iv) = self.interval else {
            return (self.start_time(), self.end_time().wrapping_add(1));
        };
        let d = iv.duration;
        let t = t.wrapping_sub(iv.offset);
        let zone = self.zone_offset(t);
        let mut dt = t.wrapping_add(zone) % d;
        if dt < 0 {
            dt += d;
        }
        let mut start = if MIN_TIME.wrapping_add(dt) >= t {
            MIN_TIME
        } else {
            t - dt
        };
        start = start.wrapping_add(iv.offset);
        if self.zone.is_some() {
            // Now at local midnight: re-read the offset, which may have
            // changed since `t`, and move the start if it did.
            let o = zone - self.zone_offset(start);
            if o != 0 && o.abs() < d {
                start += o;
            }
        }
        let rest = d - dt;
        let mut end = if MAX_TIME.wrapping_sub(rest) <= t {
            MAX_TIME
        } else {
            t + rest
        };
        if self.zone.is_some() {
            let end_offset = self.zone_offset(end);
            let o = zone - end_offset;
            if o != 0 && o.abs() < d {
                // Clocks going back add time to this window; clocks going
                // forward skip time, which belongs to the next window only if
                // the switch happens inside this one.
                if o > 0 || self.zone_offset(end + o) == end_offset {
                    end += o;
                }
            }
        }
        (start, end.wrapping_add(iv.offset))
    }

    /// The time InfluxDB reports for the bucket holding `t`: the window's
    /// start, or without `GROUP BY time()` the query's start (0 when the
    /// query has none). Shards key their partials by this.
    pub fn bucket_start(&self, t: i64) -> i64 {
        let start = self.window(t).0;
        if start == MIN_TIME {
            0
        } else {
            start
        }
    }

    /// The buckets `fill()` walks for this query, in output order: from
    /// the window of the range's start to the window of its last instant.
    /// Empty without `GROUP BY time()` or with an unbounded range.
    pub fn buckets(&self, ascending: bool) -> Vec<i64> {
        let mut out = Vec::new();
        if self.interval.is_none() || !self.range.has_start() || !self.range.has_end() {
            return out;
        }
        let (first, last) = self.fill_bounds(ascending);
        let mut cursor = BucketCursor::new(self, first, ascending);
        while (ascending && cursor.time <= last) || (!ascending && cursor.time >= last) {
            out.push(cursor.time);
            cursor.advance(self);
        }
        out
    }

    /// The first and last bucket `fill()` produces (InfluxDB's fill
    /// iterator bounds), in output order.
    pub(crate) fn fill_bounds(&self, ascending: bool) -> (i64, i64) {
        let start = self.window(self.start_time()).0;
        let end = self.window(self.end_time()).0;
        if ascending {
            (start, end)
        } else {
            (end, start)
        }
    }
}

/// Steps from bucket to bucket the way InfluxDB's fill iterator does.
pub(crate) struct BucketCursor {
    pub time: i64,
    offset: i64,
    ascending: bool,
}

impl BucketCursor {
    pub fn new(windowing: &Windowing, time: i64, ascending: bool) -> Self {
        BucketCursor {
            time,
            offset: windowing.zone_offset(time),
            ascending,
        }
    }

    pub fn advance(&mut self, windowing: &Windowing) {
        let d = windowing.interval.map_or(0, |iv| iv.duration);
        self.time = if self.ascending {
            self.time.saturating_add(d)
        } else {
            self.time.saturating_sub(d)
        };
        if windowing.zone.is_some() {
            let offset = windowing.zone_offset(self.time - 1);
            if offset != self.offset {
                let diff = self.offset - offset;
                if diff.abs() < d {
                    self.time += diff;
                }
                self.offset = offset;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MIN;

    fn grouped(duration: i64, offset: i64, zone: Option<Zone>) -> Windowing {
        Windowing::new(
            Some(Interval { duration, offset }),
            TimeRange::UNBOUNDED,
            zone,
        )
    }

    #[test]
    fn windows_align_to_epoch_plus_offset() {
        let w = grouped(10 * SECOND, 0, None);
        assert_eq!(w.window(12 * SECOND), (10 * SECOND, 20 * SECOND));
        assert_eq!(w.window(-1), (-10 * SECOND, 0));
        let w = grouped(MIN, 30 * SECOND, None);
        assert_eq!(w.window(34 * SECOND), (30 * SECOND, 90 * SECOND));
        assert_eq!(w.window(29 * SECOND), (-30 * SECOND, 30 * SECOND));
        let w = grouped(MIN, -15 * SECOND, None);
        assert_eq!(w.window(50 * SECOND), (45 * SECOND, 105 * SECOND));
    }

    #[test]
    fn fixed_zones_shift_alignment() {
        // Daily buckets in UTC-5 start at 05:00 UTC.
        let w = grouped(24 * HOUR, 0, Some(time_zone("Etc/GMT+5").unwrap()));
        assert_eq!(w.window(3 * HOUR), (-19 * HOUR, 5 * HOUR));
        assert_eq!(w.window(5 * HOUR), (5 * HOUR, 29 * HOUR));
        // A half-hour zone moves hourly buckets by 30 minutes.
        let w = grouped(HOUR, 0, Some(Zone::Fixed(5 * 3600 + 1800)));
        assert_eq!(w.window(3 * HOUR), (5 * HOUR / 2, 7 * HOUR / 2));
    }

    #[test]
    fn zone_names() {
        assert_eq!(time_zone("UTC").unwrap(), Zone::Utc);
        assert_eq!(time_zone("Etc/GMT-14").unwrap(), Zone::Fixed(14 * 3600));
        assert!(matches!(
            time_zone("Etc/GMT+13"),
            Err(Error::UnknownTimeZone(_))
        ));
        assert!(matches!(
            time_zone("Etc/GMT+05"),
            Err(Error::UnknownTimeZone(_))
        ));
        assert!(matches!(
            time_zone("Nowhere"),
            Err(Error::UnknownTimeZone(_))
        ));
        assert!(matches!(
            time_zone("Europe/Nowhere"),
            Err(Error::UnknownTimeZone(_))
        ));
        // Paris: UTC+1 in winter, UTC+2 from the last Sunday of March.
        let paris = time_zone("Europe/Paris").unwrap();
        let jan_2020 = 1_577_836_800 * SECOND;
        let jul_2020 = 1_593_561_600 * SECOND;
        assert_eq!(paris.offset_ns(jan_2020), HOUR);
        assert_eq!(paris.offset_ns(jul_2020), 2 * HOUR);
        // 2020-03-29T01:00:00Z is the switch.
        let switch = 1_585_443_600 * SECOND;
        assert_eq!(paris.offset_ns(switch - 1), HOUR);
        assert_eq!(paris.offset_ns(switch), 2 * HOUR);
    }

    #[test]
    fn offsets_normalize() {
        let iv = Interval::new(MIN, Some(TimeOffset::Duration(90 * SECOND)), 0).unwrap();
        assert_eq!(iv.offset, 30 * SECOND);
        let iv = Interval::new(MIN, Some(TimeOffset::Now), 150 * SECOND).unwrap();
        assert_eq!(iv.offset, 30 * SECOND);
        assert!(Interval::new(0, None, 0).is_err());
    }

    #[test]
    fn bucket_range_of_a_query() {
        let w = Windowing::new(
            Some(Interval {
                duration: 10 * SECOND,
                offset: 0,
            }),
            TimeRange {
                start: 5 * SECOND,
                end: 40 * SECOND,
            },
            None,
        );
        let s = |v: &[i64]| v.iter().map(|x| x * SECOND).collect::<Vec<_>>();
        assert_eq!(w.buckets(true), s(&[0, 10, 20, 30]));
        assert_eq!(w.buckets(false), s(&[30, 20, 10, 0]));
        // Without GROUP BY time the bucket is the query start (or 0).
        let w = Windowing::new(None, TimeRange::UNBOUNDED, None);
        assert_eq!(w.bucket_start(12345), 0);
    }

    #[test]
    fn daylight_saving_rules_move_day_edges() {
        // A zone at UTC+1 that moves to UTC+2 at 01:00 UTC on day 1.
        let switch = 24 * HOUR + HOUR;
        let zone = Zone::Rules {
            initial: 3600,
            transitions: vec![(switch, 7200)],
        };
        let w = grouped(24 * HOUR, 0, Some(zone));
        // Day 1 starts at local midnight (23:00 UTC on day 0) and ends at
        // local midnight of day 2 (22:00 UTC on day 1): 23 hours.
        assert_eq!(w.window(24 * HOUR + 2 * HOUR), (23 * HOUR, 46 * HOUR));
        let mut w = w;
        w.range = TimeRange {
            start: 23 * HOUR,
            end: 70 * HOUR,
        };
        assert_eq!(w.buckets(true), vec![23 * HOUR, 46 * HOUR]);
    }

    #[test]
    fn los_angeles_days_around_daylight_saving() {
        // InfluxDB's TestServer_Query_TimeZone: on 2000-04-02 Los Angeles
        // moves from UTC-8 to UTC-7 (a 23-hour day), on 2000-10-29 back (25).
        let la = time_zone("America/Los_Angeles").unwrap();
        let utc = |s: i64| s * SECOND;
        let apr2 = utc(954_662_400); // 2000-04-02T00:00:00-08:00
        let w = grouped(24 * HOUR, 0, Some(la.clone()));
        assert_eq!(w.window(apr2 + 12 * HOUR), (apr2, apr2 + 23 * HOUR));
        assert_eq!(
            w.window(apr2 + 30 * HOUR),
            (apr2 + 23 * HOUR, apr2 + 47 * HOUR)
        );
        let oct29 = utc(972_777_600) + 7 * HOUR; // 2000-10-29T00:00:00-07:00
        assert_eq!(w.window(oct29 + HOUR), (oct29, oct29 + 25 * HOUR));
        // Hourly: 01:00 happens twice on 2000-10-29 (-07:00, then -08:00).
        let w = grouped(HOUR, 0, Some(la));
        let one_am = oct29 + HOUR;
        assert_eq!(w.window(one_am + MIN), (one_am, one_am + HOUR));
        assert_eq!(
            w.window(one_am + HOUR + MIN),
            (one_am + HOUR, one_am + 2 * HOUR)
        );
    }
}
