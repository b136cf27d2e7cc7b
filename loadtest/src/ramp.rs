//! The open-model ramp: offered request rates step up, first through the
//! listed rates, then (with a growth factor) on and on with no fixed
//! ceiling, until a step delivers less than a given share of what it
//! offered. A fixed top step hides the limit of a system that keeps up with
//! it (issue 18: RF=1 delivered 100% at the old 500k ceiling).

use crate::report::StepReport;
use crate::resources::ResourceSpec;
use crate::runner::{self, Pool};
use crate::target::Target;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// Which rates a ramp offers and when it stops. Rates are requests/s.
#[derive(Debug, Clone, PartialEq)]
pub struct RampPlan {
    /// The first steps, in order.
    pub listed: Vec<f64>,
    /// After the listed steps, each step offers this factor times the
    /// previous one; `<= 1` means the listed steps are all.
    pub grow: f64,
    /// Stop after the first step below this % of offered; 0 never stops early.
    pub stop_below_pct: f64,
    /// A safety net against a runaway ramp (a misconfigured sink that
    /// acknowledges everything); not a ceiling a real run should reach.
    pub max_steps: usize,
}

impl RampPlan {
    pub fn new(listed: Vec<f64>, grow: f64, stop_below_pct: f64, max_steps: usize) -> Result<Self> {
        if listed.is_empty() || listed.iter().any(|r| r.is_nan() || *r <= 0.0) {
            return Err(Error::InvalidArgument(
                "give positive rates (req/s) or point rates (points/s)".into(),
            ));
        }
        if grow > 1.0 && stop_below_pct <= 0.0 {
            return Err(Error::InvalidArgument(
                "a growing ramp needs --stop-below-pct > 0, or it never ends".into(),
            ));
        }
        Ok(RampPlan {
            listed,
            grow,
            stop_below_pct,
            max_steps: max_steps.max(1),
        })
    }

    /// The offered rate of step `i` (0-based), or `None` when the plan has
    /// no step `i`.
    pub fn rate_at(&self, i: usize) -> Option<f64> {
        if i >= self.max_steps {
            return None;
        }
        if let Some(r) = self.listed.get(i) {
            return Some(*r);
        }
        if self.grow <= 1.0 {
            return None;
        }
        let last = *self.listed.last()?;
        let beyond = (i + 1 - self.listed.len()) as i32;
        Some(last * self.grow.powi(beyond))
    }

    /// Whether a step that delivered `pct` of what it offered ends the ramp.
    pub fn stops_after(&self, pct_of_offered: Option<f64>) -> bool {
        pct_of_offered.unwrap_or(100.0) < self.stop_below_pct
    }
}

/// How each step runs.
pub struct StepSettings {
    pub step: Duration,
    pub pause: Duration,
    pub warmup: Duration,
    pub max_inflight: usize,
}

/// Runs the plan against `target`. Returns the steps and notes for the
/// report (warm-up, why it stopped).
pub async fn run(
    target: &Target,
    pool: &Arc<Pool>,
    plan: &RampPlan,
    settings: &StepSettings,
    res: &ResourceSpec,
) -> (Vec<StepReport>, Vec<String>) {
    let pts = pool.avg_points();
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    let first = plan.listed[0];
    if !settings.warmup.is_zero() {
        let w = runner::open_step(
            target,
            pool,
            first,
            settings.warmup,
            settings.max_inflight,
            &ResourceSpec::default(),
        )
        .await;
        notes.push(format!(
            "{} s warm-up at {first:.1} req/s not recorded ({} acked)",
            settings.warmup.as_secs_f64(),
            w.stats.acked_requests
        ));
        tokio::time::sleep(settings.pause).await;
    }
    let mut i = 0;
    while let Some(rate) = plan.rate_at(i) {
        if i > 0 {
            tokio::time::sleep(settings.pause).await;
        }
        let o = runner::open_step(
            target,
            pool,
            rate,
            settings.step,
            settings.max_inflight,
            res,
        )
        .await;
        let step = StepReport::from_outcome(format!("{rate:.1} req/s"), Some(rate), None, pts, o);
        tracing::info!(
            step = %step.label,
            achieved_pps = step.achieved_pps as u64,
            achieved_rps = step.achieved_rps as u64,
            pct = step.pct_of_offered.unwrap_or(0.0),
            p95_ms = step.p95_ms.unwrap_or(0.0),
            p99_ms = step.p99_ms.unwrap_or(0.0),
            errors = ?step.errors,
            "step done"
        );
        let stop = plan.stops_after(step.pct_of_offered);
        steps.push(step);
        if stop {
            notes.push(format!(
                "stopped after the step below {}% of offered",
                plan.stop_below_pct
            ));
            return (steps, notes);
        }
        i += 1;
    }
    if plan.grow > 1.0 {
        notes.push(format!(
            "stopped at the safety limit of {} steps, still above {}% of offered",
            plan.max_steps, plan.stop_below_pct
        ));
    }
    (steps, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_then_growing_without_ceiling() {
        let p = RampPlan::new(vec![10.0, 20.0], 1.5, 80.0, 100).unwrap();
        assert_eq!(p.rate_at(0), Some(10.0));
        assert_eq!(p.rate_at(1), Some(20.0));
        assert_eq!(p.rate_at(2), Some(30.0));
        assert_eq!(p.rate_at(3), Some(45.0));
        // far beyond any fixed list: still a step
        assert!(p.rate_at(40).unwrap() > 1e7);
        assert_eq!(p.rate_at(100), None);
    }

    #[test]
    fn without_growth_the_list_is_all() {
        let p = RampPlan::new(vec![10.0, 20.0], 0.0, 0.0, 100).unwrap();
        assert_eq!(p.rate_at(1), Some(20.0));
        assert_eq!(p.rate_at(2), None);
    }

    #[test]
    fn stops_below_the_delivery_floor() {
        let p = RampPlan::new(vec![10.0], 1.25, 80.0, 100).unwrap();
        assert!(!p.stops_after(Some(80.0)));
        assert!(p.stops_after(Some(79.9)));
        assert!(!p.stops_after(None));
    }

    #[test]
    fn refuses_a_ramp_that_never_ends_or_has_no_rates() {
        assert!(RampPlan::new(vec![10.0], 1.25, 0.0, 100).is_err());
        assert!(RampPlan::new(vec![], 0.0, 0.0, 100).is_err());
        assert!(RampPlan::new(vec![0.0], 0.0, 0.0, 100).is_err());
    }
}
