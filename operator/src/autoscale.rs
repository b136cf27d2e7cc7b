//! Autoscaling policy: observed ingest rate -> desired node count.

use crate::crd::AutoscalingSpec;

/// What the autoscaler saw and did last, kept per cluster by the reconciler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Cluster-wide points/s accepted by the routers.
    pub points_per_second: f64,
    /// Seconds since the last scale-down (None: never).
    pub since_last_scale_down: Option<u64>,
}

/// Desired node count: enough cores for the observed rate at the target per
/// core, within `[min, max]`. Scaling up is immediate; scaling down happens
/// at most once per cooldown and by one node at a time, because every
/// scale-down moves shard replicas.
pub fn desired_nodes(policy: &AutoscalingSpec, cores: u32, current: i32, obs: Observation) -> i32 {
    let per_node = policy.target_points_per_second_per_core.max(1) as f64 * cores.max(1) as f64;
    let need = (obs.points_per_second.max(0.0) / per_node).ceil() as i32;
    let want = need.clamp(policy.min_nodes, policy.max_nodes.max(policy.min_nodes));
    if want >= current {
        return want;
    }
    let cooled = obs
        .since_last_scale_down
        .is_none_or(|s| s >= policy.scale_down_cooldown_seconds);
    if cooled {
        (current - 1).max(want)
    } else {
        current.clamp(policy.min_nodes, policy.max_nodes.max(policy.min_nodes))
    }
}

/// Rate between two samples of a monotonically increasing counter; a reset
/// (restart of a router) yields the new value over the interval.
pub fn counter_rate(prev: (f64, f64), now: (f64, f64)) -> f64 {
    let (t0, v0) = prev;
    let (t1, v1) = now;
    let dt = t1 - t0;
    if dt <= 0.0 {
        return 0.0;
    }
    let dv = if v1 >= v0 { v1 - v0 } else { v1 };
    dv / dt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AutoscalingSpec {
        AutoscalingSpec {
            enabled: true,
            min_nodes: 3,
            max_nodes: 10,
            target_points_per_second_per_core: 250_000,
            scale_down_cooldown_seconds: 600,
        }
    }

    fn obs(rate: f64, since: Option<u64>) -> Observation {
        Observation {
            points_per_second: rate,
            since_last_scale_down: since,
        }
    }

    #[test]
    fn scales_up_to_the_rate_within_bounds() {
        // 4 cores * 250k = 1M points/s per node.
        assert_eq!(desired_nodes(&policy(), 4, 3, obs(5.5e6, None)), 6);
        assert_eq!(desired_nodes(&policy(), 4, 3, obs(1e9, None)), 10, "max");
        assert_eq!(desired_nodes(&policy(), 4, 3, obs(0.0, None)), 3, "min");
    }

    #[test]
    fn scales_down_one_node_per_cooldown() {
        assert_eq!(
            desired_nodes(&policy(), 4, 8, obs(1e6, Some(60))),
            8,
            "cooling down"
        );
        assert_eq!(desired_nodes(&policy(), 4, 8, obs(1e6, Some(601))), 7);
        assert_eq!(desired_nodes(&policy(), 4, 8, obs(1e6, None)), 7);
        assert_eq!(
            desired_nodes(&policy(), 4, 4, obs(3.5e6, Some(601))),
            4,
            "still needed"
        );
    }

    #[test]
    fn counter_rate_handles_resets() {
        assert_eq!(counter_rate((0.0, 100.0), (10.0, 1100.0)), 100.0);
        assert_eq!(counter_rate((0.0, 5000.0), (10.0, 200.0)), 20.0);
        assert_eq!(counter_rate((10.0, 1.0), (10.0, 2.0)), 0.0);
    }
}
