//! Where samples come from: the router reads them from its shards, tests
//! from memory. The engine asks once per selector for the raw samples of
//! every matching series in a closed time range.

use async_trait::async_trait;
use regex::Regex;

use crate::labels::Labels;
use crate::Result;

/// One raw series: its labels (`__name__` included) and its samples in
/// time order, stale markers (NaN with bits 0x7ff0000000000002) kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub samples: Vec<(i64, f64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

/// A label matcher as Prometheus applies it: regexes are anchored at both
/// ends, and a label that is absent matches as the empty string.
#[derive(Debug, Clone)]
pub struct LabelMatcher {
    pub name: String,
    pub kind: MatchKind,
    pub value: String,
    /// `^(?:value)$`, compiled for the regex kinds.
    pub regex: Option<Regex>,
}

impl LabelMatcher {
    pub fn new(kind: MatchKind, name: &str, value: &str) -> Result<Self> {
        let regex = match kind {
            MatchKind::Regex | MatchKind::NotRegex => {
                Some(Regex::new(&format!("^(?:{value})$")).map_err(|e| {
                    crate::Error::BadData(format!("invalid regular expression {value:?}: {e}"))
                })?)
            }
            _ => None,
        };
        Ok(LabelMatcher {
            name: name.to_string(),
            kind,
            value: value.to_string(),
            regex,
        })
    }

    pub fn matches(&self, value: &str) -> bool {
        match self.kind {
            MatchKind::Equal => self.value == value,
            MatchKind::NotEqual => self.value != value,
            MatchKind::Regex => self.regex.as_ref().is_some_and(|r| r.is_match(value)),
            MatchKind::NotRegex => !self.regex.as_ref().is_some_and(|r| r.is_match(value)),
        }
    }

    pub fn matches_labels(&self, labels: &Labels) -> bool {
        self.matches(labels.get(&self.name))
    }
}

/// The times a node is evaluated at: `first + k * step` for
/// `k < count` (an instant query is one time; a subquery has its own step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub first: i64,
    pub step: i64,
    pub count: i64,
}

impl Grid {
    pub fn new(first: i64, step: i64, count: i64) -> Self {
        Grid {
            first,
            step: step.max(1),
            count: count.max(0),
        }
    }

    /// The last time of the grid (`first` when the grid is empty).
    pub fn last(&self) -> i64 {
        self.first + (self.count - 1).max(0) * self.step
    }

    /// The time at index `k`.
    pub fn at(&self, k: i64) -> i64 {
        self.first + k * self.step
    }
}

/// Which of a selector's samples the engine will ever look at, so that a
/// source may leave the others out (and count only those against the
/// sample limit). `All` is always a correct answer to give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needed {
    /// Every sample in the range.
    All,
    /// An instant selector read at the reference times of `grid`: at
    /// time r it takes the newest sample at or before r if that is not
    /// older than `lookback`. So per series only the newest sample of each
    /// interval `(r[k-1], r[k]]` (of `[r[0] - lookback, r[0]]` for k = 0)
    /// is ever used, and only if it is within `lookback` of `r[k]`;
    /// stale markers are samples like any other here.
    NewestPerStep { grid: Grid, lookback: i64 },
    /// A range selector read at the reference times of `grid`: only
    /// samples inside some window `[r[k] - range, r[k]]` are used (all of
    /// them when windows overlap, `step <= range`).
    Windows { grid: Grid, range: i64 },
}

impl Needed {
    /// The interval index k of a sample time for `NewestPerStep`: 0 up to
    /// `r[0]`, else the k with `r[k-1] < t <= r[k]`; `None` past the last
    /// time. The SQL of a source must compute the same.
    pub fn step_index(grid: &Grid, t: i64) -> Option<i64> {
        if t > grid.last() || grid.count == 0 {
            None
        } else if t <= grid.first {
            Some(0)
        } else {
            Some((t - grid.first - 1) / grid.step + 1)
        }
    }

    /// Whether windows leave gaps between them, so pruning pays.
    pub fn windows_prune(grid: &Grid, range: i64) -> bool {
        grid.count > 1 && grid.step > range
    }

    /// Whether time `t` lies in some window `[r[k] - range, r[k]]`.
    pub fn in_window(grid: &Grid, range: i64, t: i64) -> bool {
        grid.count > 0
            && t <= grid.last()
            && t >= grid.first - range
            && (grid.last() - t) % grid.step <= range
    }

    /// The samples of one series (in time order) this selection keeps:
    /// the reference for what a source computes in its own language.
    pub fn keep(&self, samples: &[(i64, f64)]) -> Vec<(i64, f64)> {
        match *self {
            Needed::All => samples.to_vec(),
            Needed::Windows { grid, range } => samples
                .iter()
                .copied()
                .filter(|(t, _)| Needed::in_window(&grid, range, *t))
                .collect(),
            Needed::NewestPerStep { grid, lookback } => {
                let mut out: Vec<(i64, i64, f64)> = Vec::new();
                for &(t, v) in samples {
                    let Some(k) = Needed::step_index(&grid, t) else {
                        continue;
                    };
                    match out.last_mut() {
                        Some(last) if last.0 == k => *last = (k, t, v),
                        _ => out.push((k, t, v)),
                    }
                }
                out.into_iter()
                    .filter(|(k, t, _)| *t >= grid.at(*k) - lookback)
                    .map(|(_, t, v)| (t, v))
                    .collect()
            }
        }
    }
}

/// One selector's read: its matchers, the closed time range, which of the
/// samples in it are needed, and how many samples the query may still
/// read.
#[derive(Debug, Clone)]
pub struct Selection {
    pub matchers: Vec<LabelMatcher>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub needed: Needed,
    /// A source that would return more samples than this may stop and
    /// answer [`crate::Error::TooManySamples`] instead.
    pub limit: usize,
}

impl Selection {
    /// Every sample of the series in `[start_ms, end_ms]`, without a
    /// limit (remote_read).
    pub fn all(matchers: Vec<LabelMatcher>, start_ms: i64, end_ms: i64) -> Self {
        Selection {
            matchers,
            start_ms,
            end_ms,
            needed: Needed::All,
            limit: usize::MAX,
        }
    }
}

#[async_trait]
pub trait SampleSource: Send + Sync {
    /// Every series matching all `matchers`, with its samples whose time is
    /// within `[start_ms, end_ms]` (both ends included), of which those
    /// `needed` does not keep may be left out. Series with no sample in
    /// the range may be left out.
    async fn select(&self, sel: &Selection) -> Result<Vec<Series>>;
}

/// Series held in memory: the reference source for tests and for
/// checking another source's answers. It leaves out what `needed` says,
/// as the shards do, unless `keep_all` is set.
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    pub series: Vec<Series>,
    pub keep_all: bool,
}

impl MemorySource {
    pub fn add(&mut self, labels: Labels, samples: Vec<(i64, f64)>) {
        self.series.push(Series { labels, samples });
    }
}

#[async_trait]
impl SampleSource for MemorySource {
    async fn select(&self, sel: &Selection) -> Result<Vec<Series>> {
        let needed = if self.keep_all {
            Needed::All
        } else {
            sel.needed
        };
        Ok(self
            .series
            .iter()
            .filter(|s| sel.matchers.iter().all(|m| m.matches_labels(&s.labels)))
            .map(|s| {
                let in_range: Vec<(i64, f64)> = s
                    .samples
                    .iter()
                    .copied()
                    .filter(|(t, _)| *t >= sel.start_ms && *t <= sel.end_ms)
                    .collect();
                Series {
                    labels: s.labels.clone(),
                    samples: needed.keep(&in_range),
                }
            })
            .filter(|s| !s.samples.is_empty())
            .collect())
    }
}
