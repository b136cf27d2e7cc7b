//! Rollups: per measurement, the engine keeps each series' fields
//! aggregated over 1-minute and 1-hour buckets (count, sum, min, max,
//! first, last), next to the raw points, so a long-range panel reads one
//! row per series and bucket instead of every point. The names and shapes
//! here are what the engine creates (node/engine/src/rollups.rs) and what
//! the router's statements read (router/src/read/influx/rollup.rs); both
//! sides must agree byte for byte. docs/storage.md ("Rollups") says when a
//! read may use them.

/// One rollup granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Part of the tables' names: `1m`, `1h`.
    pub name: &'static str,
    /// The bucket width in nanoseconds. Buckets start at multiples of it
    /// since the Unix epoch (UTC), so they never straddle a day and a
    /// rollup's day partitions are the raw table's.
    pub step_ns: i64,
}

/// Every level, coarsest first (the order a planner tries them).
pub const LEVELS: [Level; 2] = [
    Level {
        name: "1h",
        step_ns: 3_600_000_000_000,
    },
    Level {
        name: "1m",
        step_ns: 60_000_000_000,
    },
];

/// The rollup table of `measurement` at `level`: `_sh_1m_cpu`. The `_sh_`
/// prefix keeps it out of the measurements' namespace.
pub fn table(level: &Level, measurement: &str) -> String {
    format!("_sh_{}_{measurement}", level.name)
}

/// The materialized view that fills [`table`] from the measurement's
/// inserts: `_sh_v1m_cpu`.
pub fn view(level: &Level, measurement: &str) -> String {
    format!("_sh_v{}_{measurement}", level.name)
}

/// Whether `name` is a rollup table (not a view): retention drops its
/// expired days as it does a measurement's.
pub fn is_rollup_table(name: &str) -> bool {
    LEVELS
        .iter()
        .any(|l| name.starts_with(&format!("_sh_{}_", l.name)))
}

/// What a rollup keeps of a field in each bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The number of points with a value (UInt64).
    Count,
    /// The sum of the values (the field's type).
    Sum,
    /// The smallest value (nullable: no value in the bucket).
    Min,
    /// The largest value.
    Max,
    /// `(time, -value)` of the earliest point: the smallest tuple is the
    /// earliest point and, between series at one time, the largest value
    /// (InfluxDB's tie rule). `(i64::MAX, 0)` when the bucket has none.
    First,
    /// `(time, value)` of the latest point; `(i64::MIN, 0)` when none.
    Last,
}

impl Part {
    fn tag(self) -> &'static str {
        match self {
            Part::Count => "c",
            Part::Sum => "s",
            Part::Min => "n",
            Part::Max => "x",
            Part::First => "f",
            Part::Last => "l",
        }
    }
}

/// The column of `part` of `field`: `c:usage`. Every tag is one letter
/// before the `:`, so no two (part, field) pairs share a name.
pub fn column(part: Part, field: &str) -> String {
    format!("{}:{field}", part.tag())
}

/// A field's value type as rollups see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Float,
    Int,
    UInt,
    /// Strings and booleans: only counted.
    Other,
}

/// The parts a rollup keeps of a field of `kind`, in column order.
pub fn parts(kind: Kind) -> &'static [Part] {
    match kind {
        Kind::Float | Kind::Int => &[
            Part::Count,
            Part::Sum,
            Part::Min,
            Part::Max,
            Part::First,
            Part::Last,
        ],
        Kind::UInt => &[Part::Count, Part::Sum, Part::Min, Part::Max],
        Kind::Other => &[Part::Count],
    }
}

/// The coarsest level whose buckets tile `GROUP BY time(duration, offset)`
/// windows exactly (both multiples of its step), or with no interval the
/// coarsest; `None` when none does (`time(90s)`).
pub fn level_for(interval: Option<(i64, i64)>) -> Option<Level> {
    LEVELS.iter().copied().find(|l| match interval {
        None => true,
        Some((d, off)) => d > 0 && d % l.step_ns == 0 && off.rem_euclid(l.step_ns) == 0,
    })
}

/// The start of the bucket of width `step` holding `t` (`None` below the
/// first whole bucket of the i64 range).
pub fn floor(t: i64, step: i64) -> Option<i64> {
    t.checked_sub(t.rem_euclid(step))
}

/// The whole buckets of width `step` inside the inclusive range
/// `[start, end]`: `[lo, hi)`, both bucket starts; `None` when no whole
/// bucket fits. The rest of the range (less than a bucket at each end)
/// is read raw.
pub fn whole_buckets(start: i64, end: i64, step: i64) -> Option<(i64, i64)> {
    let r = start.rem_euclid(step);
    let lo = if r == 0 {
        start
    } else {
        start.checked_add(step - r)?
    };
    // `end` is inclusive: the bucket holding it is whole only when it
    // ends right after `end`.
    let hi = match end.checked_add(1) {
        Some(e) => floor(e, step)?,
        None => floor(end, step)?,
    };
    (lo < hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = 60_000_000_000;
    const H: i64 = 60 * M;

    #[test]
    fn levels_tile_intervals_that_are_multiples_of_their_step() {
        assert_eq!(level_for(Some((H, 0))).unwrap().name, "1h");
        assert_eq!(level_for(Some((24 * H, 0))).unwrap().name, "1h");
        assert_eq!(level_for(Some((5 * M, 0))).unwrap().name, "1m");
        assert_eq!(level_for(Some((H, 30 * M))).unwrap().name, "1m");
        assert_eq!(level_for(Some((H, -M))).unwrap().name, "1m");
        assert_eq!(level_for(Some((90_000_000_000, 0))), None);
        assert_eq!(level_for(Some((M, 1))), None);
        assert_eq!(level_for(None).unwrap().name, "1h");
    }

    #[test]
    fn whole_buckets_leave_the_partial_ends_to_raw_points() {
        assert_eq!(whole_buckets(0, 3 * M - 1, M), Some((0, 3 * M)));
        assert_eq!(whole_buckets(1, 3 * M - 1, M), Some((M, 3 * M)));
        assert_eq!(whole_buckets(1, 3 * M, M), Some((M, 3 * M)));
        assert_eq!(whole_buckets(1, 2 * M - 2, M), None);
        assert_eq!(whole_buckets(-M - 1, 0, M), Some((-M, 0)));
        assert_eq!(
            whole_buckets(i64::MIN, i64::MAX, H),
            Some((
                i64::MIN + H - i64::MIN.rem_euclid(H),
                i64::MAX - i64::MAX.rem_euclid(H)
            ))
        );
        assert_eq!(floor(-1, M), Some(-M));
        assert_eq!(floor(i64::MIN, H), None);
    }

    #[test]
    fn names_keep_parts_apart_and_are_engine_tables() {
        assert_eq!(column(Part::Count, "u"), "c:u");
        assert_ne!(column(Part::Count, "s:u"), column(Part::Sum, "u"));
        let t = table(&LEVELS[1], "cpu");
        assert_eq!(t, "_sh_1m_cpu");
        assert!(crate::names::is_engine_table(&t));
        assert!(is_rollup_table(&t));
        assert!(!is_rollup_table(&view(&LEVELS[1], "cpu")));
        assert!(!is_rollup_table("cpu"));
        assert_eq!(parts(Kind::Other), &[Part::Count]);
    }
}
