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

#[async_trait]
pub trait SampleSource: Send + Sync {
    /// Every series matching all `matchers`, with its samples whose time is
    /// within `[start_ms, end_ms]` (both ends included). Series with no
    /// sample in the range may be left out.
    async fn select(
        &self,
        matchers: &[LabelMatcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Series>>;
}

/// Series held in memory: the reference source for tests and for
/// checking another source's answers.
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    pub series: Vec<Series>,
}

impl MemorySource {
    pub fn add(&mut self, labels: Labels, samples: Vec<(i64, f64)>) {
        self.series.push(Series { labels, samples });
    }
}

#[async_trait]
impl SampleSource for MemorySource {
    async fn select(
        &self,
        matchers: &[LabelMatcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Series>> {
        Ok(self
            .series
            .iter()
            .filter(|s| matchers.iter().all(|m| m.matches_labels(&s.labels)))
            .map(|s| Series {
                labels: s.labels.clone(),
                samples: s
                    .samples
                    .iter()
                    .copied()
                    .filter(|(t, _)| *t >= start_ms && *t <= end_ms)
                    .collect(),
            })
            .filter(|s| !s.samples.is_empty())
            .collect())
    }
}
