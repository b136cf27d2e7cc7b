//! Timestamp precision and the time range a point may have.

use super::error::{LineProtocolError, Result};

/// Timestamp precision of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanosecond,
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
}

impl Precision {
    /// v2 names: `ns`, `us`, `ms`, `s`. v1 also accepts `n`, `u`, `m`, `h`
    /// (and `ns`/`us`/`ms`/`s`). Returns `None` for anything else.
    pub fn parse(s: &str, allow_v1: bool) -> Option<Precision> {
        Some(match s {
            "" | "ns" => Precision::Nanosecond,
            "us" | "µs" => Precision::Microsecond,
            "ms" => Precision::Millisecond,
            "s" => Precision::Second,
            "n" if allow_v1 => Precision::Nanosecond,
            "u" if allow_v1 => Precision::Microsecond,
            "m" if allow_v1 => Precision::Minute,
            "h" if allow_v1 => Precision::Hour,
            _ => return None,
        })
    }

    /// Nanoseconds per unit.
    pub fn nanos_per_unit(self) -> i64 {
        match self {
            Precision::Nanosecond => 1,
            Precision::Microsecond => 1_000,
            Precision::Millisecond => 1_000_000,
            Precision::Second => 1_000_000_000,
            Precision::Minute => 60_000_000_000,
            Precision::Hour => 3_600_000_000_000,
        }
    }

    /// `ts` in this precision as nanoseconds, or an error when it is
    /// outside [`MIN_NANOS`]..=[`MAX_NANOS`] (InfluxDB's range).
    #[inline]
    pub fn to_nanos(self, ts: i64) -> Result<i64> {
        ts.checked_mul(self.nanos_per_unit())
            .filter(|t| nanos_in_range(*t))
            .ok_or(LineProtocolError::TimestampOutOfRange(ts))
    }
}

/// Earliest time a point may have, in nanoseconds since the epoch:
/// InfluxDB's `MinNanoTime` (`i64::MIN + 2`; InfluxDB keeps the two lowest
/// values as sentinels).
pub const MIN_NANOS: i64 = i64::MIN + 2;
/// Latest time a point may have: InfluxDB's `MaxNanoTime` (`i64::MAX - 1`).
pub const MAX_NANOS: i64 = i64::MAX - 1;

/// Whether a time in nanoseconds is within InfluxDB's range.
#[inline]
pub fn nanos_in_range(t: i64) -> bool {
    (MIN_NANOS..=MAX_NANOS).contains(&t)
}

impl Precision {}
