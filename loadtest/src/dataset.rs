//! Deterministic datasets (fixed seeds) so every run offers the same points.
//!
//! - `low`: a handful of series (3 measurements x 8 hosts), the front-door
//!   stress set of the ingest ramp study;
//! - `1m`: 1,000,000 series (1,000 hosts x 5 regions x 10 datacenters x 20
//!   services), 5 float fields per row, as in the protocol study;
//! - `100k`: the same shape with 100 hosts (100,000 series).

use crate::{Error, Result};
use std::str::FromStr;

/// SplitMix64: tiny, fast and stable forever (unlike library RNGs whose
/// streams may change between versions), which is what a fixed seed needs.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum DatasetKind {
    #[serde(rename = "low")]
    Low,
    #[serde(rename = "100k")]
    Series100k,
    #[serde(rename = "1m")]
    Series1m,
}

impl FromStr for DatasetKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "low" => Ok(DatasetKind::Low),
            "100k" => Ok(DatasetKind::Series100k),
            "1m" => Ok(DatasetKind::Series1m),
            other => Err(Error::InvalidArgument(format!(
                "unknown dataset {other:?}; use low, 100k or 1m"
            ))),
        }
    }
}

impl DatasetKind {
    pub fn name(self) -> &'static str {
        match self {
            DatasetKind::Low => "low",
            DatasetKind::Series100k => "100k",
            DatasetKind::Series1m => "1m",
        }
    }

    pub fn series_count(self) -> u64 {
        match self {
            DatasetKind::Low => 24,
            DatasetKind::Series100k => 100_000,
            DatasetKind::Series1m => 1_000_000,
        }
    }
}

pub const FIELD_NAMES: [&str; 5] = ["usage_user", "usage_system", "usage_idle", "load1", "temp"];

/// One point; tags are produced on demand from the series index so a million
/// series cost no memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub measurement: &'static str,
    pub tags: Vec<(&'static str, String)>,
    pub fields: Vec<(&'static str, f64)>,
    pub timestamp_ns: i64,
}

/// Generates points of a dataset from a seed. The same (kind, seed, start)
/// always yields the same points.
#[derive(Debug, Clone)]
pub struct Generator {
    kind: DatasetKind,
    rng: SplitMix64,
    /// Base timestamp; point `i` of the stream gets `base + i` ns so points
    /// of one run never collide on (series, time) (last write would win).
    base_ns: i64,
    next: i64,
}

impl Generator {
    pub fn new(kind: DatasetKind, seed: u64, base_ns: i64) -> Self {
        Generator {
            kind,
            rng: SplitMix64::new(seed),
            base_ns,
            next: 0,
        }
    }

    pub fn kind(&self) -> DatasetKind {
        self.kind
    }

    pub fn tags_of(kind: DatasetKind, series: u64) -> (&'static str, Vec<(&'static str, String)>) {
        match kind {
            DatasetKind::Low => {
                const M: [&str; 3] = ["cpu", "mem", "disk"];
                let m = M[(series % 3) as usize];
                (m, vec![("host", format!("host-{}", series / 3))])
            }
            DatasetKind::Series100k | DatasetKind::Series1m => {
                let hosts = if kind == DatasetKind::Series1m {
                    1000
                } else {
                    100
                };
                let host = series % hosts;
                let rest = series / hosts;
                (
                    "metrics",
                    vec![
                        ("dc", format!("dc-{}", (rest / 5) % 10)),
                        ("host", format!("host-{host}")),
                        ("region", format!("region-{}", rest % 5)),
                        ("service", format!("svc-{}", (rest / 50) % 20)),
                    ],
                )
            }
        }
    }

    pub fn next_point(&mut self) -> Point {
        let series = self.rng.below(self.kind.series_count());
        let (measurement, tags) = Self::tags_of(self.kind, series);
        // Two decimals keep text encodings short and exact to read back.
        let fields = FIELD_NAMES
            .iter()
            .map(|&f| (f, (self.rng.below(10_000) as f64) / 100.0))
            .collect();
        let timestamp_ns = self.base_ns + self.next;
        self.next += 1;
        Point {
            measurement,
            tags,
            fields,
            timestamp_ns,
        }
    }

    pub fn batch(&mut self, n: usize) -> Vec<Point> {
        (0..n).map(|_| self.next_point()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_points() {
        let a = Generator::new(DatasetKind::Series1m, 42, 0).batch(100);
        let b = Generator::new(DatasetKind::Series1m, 42, 0).batch(100);
        assert_eq!(a, b);
        let c = Generator::new(DatasetKind::Series1m, 43, 0).batch(100);
        assert_ne!(a, c);
    }

    #[test]
    fn million_series_are_distinct() {
        use std::collections::HashSet;
        let keys: HashSet<Vec<(&str, String)>> = (0..1_000_000u64)
            .step_by(997)
            .map(|s| Generator::tags_of(DatasetKind::Series1m, s).1)
            .collect();
        assert_eq!(keys.len(), (0..1_000_000u64).step_by(997).count());
        // the last index still maps inside the declared ranges
        let (_, t) = Generator::tags_of(DatasetKind::Series1m, 999_999);
        assert_eq!(t[3].1, "svc-19");
    }

    #[test]
    fn timestamps_are_unique_in_a_stream() {
        let pts = Generator::new(DatasetKind::Low, 1, 1_000).batch(50);
        for (i, p) in pts.iter().enumerate() {
            assert_eq!(p.timestamp_ns, 1_000 + i as i64);
        }
    }
}
