//! The decisions of the ShardhouseBackup and ShardhouseRestore controllers,
//! as plain functions over plain data (no clock, no client): is a backup
//! due and for which schedule slot, when to look again, what the status
//! says after a run, and what a restore should do next.
//! `backup_controller` does the I/O around them.

use crate::crd::{
    ClusterCondition, Phase, RestorePhase, ShardBackupIndex, ShardhouseBackupStatus,
    ShardhouseClusterStatus,
};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use shardhouse_backup::Manifest;

/// The annotation whose new value asks for one backup now, outside the
/// schedule (`kubectl annotate shb NAME shardhouse.dev/backup-now=$(date +%s) --overwrite`).
pub const BACKUP_NOW_ANNOTATION: &str = "shardhouse.dev/backup-now";

/// A parsed `spec.schedule`: five fields as in a CronJob, in UTC.
#[derive(Debug, Clone)]
pub struct Schedule(Cron);

impl Schedule {
    /// Parses a CronJob-style expression: `minute hour dom month dow` or a
    /// nickname (`@daily`...). Seconds and years are refused: a CronJob
    /// has neither.
    pub fn parse(expr: &str) -> Result<Schedule, String> {
        CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map(Schedule)
            .map_err(|e| format!("schedule {expr:?} is not a cron expression of five fields: {e}"))
    }

    /// The first slot strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        self.0
            .find_next_occurrence(&t.to_zoned(TimeZone::UTC), false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The last slot at or before `t`.
    pub fn latest_at_or_before(&self, t: Timestamp) -> Option<Timestamp> {
        self.0
            .find_previous_occurrence(&t.to_zoned(TimeZone::UTC), true)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// What a ShardhouseBackup's reconcile knows when it decides.
#[derive(Debug, Clone)]
pub struct BackupClock<'a> {
    pub now: Timestamp,
    /// When the resource was created: slots before it are not owed.
    pub created: Timestamp,
    pub suspend: bool,
    /// The `shardhouse.dev/backup-now` annotation, if any.
    pub manual_request: Option<&'a str>,
    pub status: &'a ShardhouseBackupStatus,
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Back up now. `slot` is the schedule slot the run is for (recorded as
    /// `lastScheduleTime` on success); `None` for a manual run.
    Run {
        slot: Option<Timestamp>,
        manual: Option<String>,
    },
    /// Nothing until then (the next slot, or the retry after a failure).
    WaitUntil(Timestamp),
    /// Suspended: nothing until the spec changes.
    Suspended,
}

fn parse_time(s: Option<&str>) -> Option<Timestamp> {
    s.and_then(|s| s.parse().ok())
}

/// Pause before retrying a failed run: 30 s, doubling, at most 10 minutes.
pub fn retry_delay(failures: u32) -> SignedDuration {
    let secs = 30i64.saturating_mul(1 << failures.saturating_sub(1).min(5));
    SignedDuration::from_secs(secs.min(600))
}

/// Whether a run is due. Like a CronJob: the newest slot since the last
/// successful run (or the resource's creation) is owed, older missed ones
/// collapse into it; a failed run is retried with `retry_delay` until it
/// succeeds or the next slot takes its place. A new value of the
/// `backup-now` annotation runs once at once, even while suspended.
pub fn due(schedule: &Schedule, clock: &BackupClock) -> Due {
    let st = clock.status;
    if let Some(req) = clock.manual_request {
        if st.last_manual_request.as_deref() != Some(req) {
            return Due::Run {
                slot: None,
                manual: Some(req.to_string()),
            };
        }
    }
    if clock.suspend {
        return Due::Suspended;
    }
    let since = parse_time(st.last_schedule_time.as_deref())
        .unwrap_or(clock.created)
        .max(clock.created);
    let owed = schedule
        .latest_at_or_before(clock.now)
        .filter(|slot| *slot > since);
    let next = schedule.next_after(clock.now);
    match owed {
        Some(slot) => {
            let retry_at = parse_time(st.last_failure_time.as_deref())
                .filter(|_| st.consecutive_failures > 0)
                .map(|t| t + retry_delay(st.consecutive_failures));
            match retry_at {
                // A retry never waits past the next slot.
                Some(at) if at > clock.now => Due::WaitUntil(next.map_or(at, |n| n.min(at))),
                _ => Due::Run {
                    slot: Some(slot),
                    manual: None,
                },
            }
        }
        // A schedule that never fires again (`0 0 30 2 *`) waits a day at a
        // time, so a fixed spec is picked up.
        None => Due::WaitUntil(next.unwrap_or(clock.now + SignedDuration::from_hours(24))),
    }
}

/// How long to sleep until `until`, at least a second, at most an hour (a
/// changed clock or a lost watch event is noticed within the hour).
pub fn requeue_after(now: Timestamp, until: Timestamp) -> std::time::Duration {
    let secs = until.duration_since(now).as_secs_f64().clamp(1.0, 3600.0);
    std::time::Duration::from_secs_f64(secs)
}

/// Sets condition `type_`, keeping its transition time when its status
/// did not change.
pub fn set_condition(
    conditions: &mut Vec<ClusterCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    let last = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.to_string(), |c| c.last_transition_time.clone());
    conditions.retain(|c| c.type_ != type_);
    conditions.push(ClusterCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: last,
        observed_generation: generation,
    });
    conditions.sort_by_key(|c| if c.type_ == "Ready" { 0 } else { 1 });
}

/// Per-shard indexes of a manifest, and their range `lo..hi`.
pub fn shard_indexes(m: &Manifest) -> (Vec<ShardBackupIndex>, Option<String>) {
    let shards: Vec<ShardBackupIndex> = m
        .shards
        .iter()
        .map(|s| ShardBackupIndex {
            shard: s.shard,
            node_id: s.node_id,
            commit_index: s.commit_index,
            flushed_index: s.flushed_index,
        })
        .collect();
    let lo = shards.iter().map(|s| s.commit_index).min();
    let hi = shards.iter().map(|s| s.commit_index).max();
    let range = lo.zip(hi).map(|(lo, hi)| format!("{lo}..{hi}"));
    (shards, range)
}

/// The status after a successful run.
pub fn after_success(
    prev: &ShardhouseBackupStatus,
    m: &Manifest,
    slot: Option<Timestamp>,
    manual: Option<String>,
    kept: Vec<String>,
    now: Timestamp,
) -> ShardhouseBackupStatus {
    let (shards, index_range) = shard_indexes(m);
    let mut st = prev.clone();
    st.last_backup = Some(m.id.clone());
    if let Some(slot) = slot {
        st.last_schedule_time = Some(slot.to_string());
    }
    if manual.is_some() {
        st.last_manual_request = manual;
    }
    st.last_success_time = Some(now.to_string());
    st.last_size_bytes = Some(m.stats.bytes);
    st.last_uploaded_bytes = Some(m.stats.bytes_uploaded);
    st.last_duration_seconds = Some(m.finished_ms.saturating_sub(m.started_ms) as f64 / 1000.0);
    st.index_range = index_range;
    st.shards = shards;
    st.kept_backups = kept;
    st.consecutive_failures = 0;
    st.last_failure_time = None;
    let msg = format!(
        "backup {} of {} shards: {} bytes ({} uploaded), Raft index {}",
        m.id,
        m.shards.len(),
        m.stats.bytes,
        m.stats.bytes_uploaded,
        st.index_range.as_deref().unwrap_or("-")
    );
    set_condition(
        &mut st.conditions,
        "Ready",
        true,
        "BackupSucceeded",
        msg,
        &now.to_string(),
        None,
    );
    st
}

/// The status after a failed run. A manual request is used up by its run
/// (a failure is reported, not retried: annotate again to retry).
pub fn after_failure(
    prev: &ShardhouseBackupStatus,
    manual: Option<String>,
    error: &str,
    now: Timestamp,
) -> ShardhouseBackupStatus {
    let mut st = prev.clone();
    if manual.is_some() {
        st.last_manual_request = manual;
    } else {
        st.consecutive_failures = st.consecutive_failures.saturating_add(1);
        st.last_failure_time = Some(now.to_string());
    }
    set_condition(
        &mut st.conditions,
        "Ready",
        false,
        "BackupFailed",
        error.to_string(),
        &now.to_string(),
        None,
    );
    st
}

/// What a ShardhouseRestore's reconcile should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreStep {
    /// Succeeded or Failed: nothing more, ever.
    Finished,
    /// The target cluster is not there or not running yet.
    Wait(String),
    /// Run the restore now.
    Start,
    /// The status says Restoring but this operator never started it: it
    /// restarted mid-way. The cluster may hold part of the backup, so it is
    /// not tried again.
    Interrupted,
}

/// The next step of a restore: once, into a Running cluster whose every
/// shard is healthy (every replica must take its parts). `started_here`:
/// this operator process started it (a status that says otherwise lags).
pub fn restore_step(
    phase: RestorePhase,
    started_here: bool,
    cluster: Option<&ShardhouseClusterStatus>,
    cluster_name: &str,
) -> RestoreStep {
    match phase {
        RestorePhase::Succeeded | RestorePhase::Failed => return RestoreStep::Finished,
        _ if started_here => return RestoreStep::Wait("restore started".into()),
        RestorePhase::Restoring => return RestoreStep::Interrupted,
        RestorePhase::Pending | RestorePhase::WaitingForCluster => {}
    }
    let Some(st) = cluster else {
        return RestoreStep::Wait(format!(
            "waiting for ShardhouseCluster {cluster_name} to exist and run"
        ));
    };
    let all_healthy = match st.shards_healthy.split_once('/') {
        Some((h, t)) => !t.is_empty() && h == t && t != "0",
        None => false,
    };
    if st.phase != Phase::Running || !all_healthy {
        return RestoreStep::Wait(format!(
            "waiting for ShardhouseCluster {cluster_name} to be Running with every shard healthy (now {:?}, shards {})",
            st.phase,
            if st.shards_healthy.is_empty() { "-" } else { &st.shards_healthy }
        ));
    }
    RestoreStep::Start
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_backup::manifest::Stats;
    use shardhouse_backup::ShardManifest;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn clock<'a>(now: &str, st: &'a ShardhouseBackupStatus) -> BackupClock<'a> {
        BackupClock {
            now: t(now),
            created: t("2026-11-01T10:00:00Z"),
            suspend: false,
            manual_request: None,
            status: st,
        }
    }

    #[test]
    fn schedules_are_cronjob_expressions_in_utc() {
        let s = Schedule::parse("30 2 * * *").unwrap();
        assert_eq!(
            s.next_after(t("2026-11-01T10:00:00Z")),
            Some(t("2026-11-02T02:30:00Z"))
        );
        assert_eq!(
            s.latest_at_or_before(t("2026-11-02T02:30:00Z")),
            Some(t("2026-11-02T02:30:00Z")),
            "a slot is due at its own minute"
        );
        let daily = Schedule::parse("@daily").unwrap();
        assert_eq!(
            daily.next_after(t("2026-11-01T10:00:00Z")),
            Some(t("2026-11-02T00:00:00Z"))
        );
        // Sunday is 0 and 7, as in a CronJob; 2026-11-01 is a Sunday.
        for expr in ["0 12 * * 0", "0 12 * * 7", "0 12 * * SUN"] {
            assert_eq!(
                Schedule::parse(expr)
                    .unwrap()
                    .next_after(t("2026-10-30T00:00:00Z")),
                Some(t("2026-11-01T12:00:00Z")),
                "{expr}"
            );
        }
        for bad in [
            "",
            "every day",
            "0 0 12 * * *",
            "61 * * * *",
            "* * * * * 2027",
        ] {
            let e = Schedule::parse(bad).unwrap_err();
            assert!(e.contains("five fields"), "{bad}: {e}");
        }
    }

    #[test]
    fn nothing_is_due_before_the_first_slot_after_creation() {
        let s = Schedule::parse("0 * * * *").unwrap();
        let st = ShardhouseBackupStatus::default();
        // Created at 10:00:00 exactly: that slot is not owed, 11:00 is.
        assert_eq!(
            due(&s, &clock("2026-11-01T10:30:00Z", &st)),
            Due::WaitUntil(t("2026-11-01T11:00:00Z"))
        );
        assert_eq!(
            due(&s, &clock("2026-11-01T11:00:05Z", &st)),
            Due::Run {
                slot: Some(t("2026-11-01T11:00:00Z")),
                manual: None
            }
        );
    }

    #[test]
    fn missed_slots_collapse_into_the_newest_and_a_done_slot_is_not_rerun() {
        let s = Schedule::parse("0 * * * *").unwrap();
        let mut st = ShardhouseBackupStatus {
            last_schedule_time: Some("2026-11-01T11:00:00Z".into()),
            ..Default::default()
        };
        // The operator was down from 11:30 to 15:10: one run, for 15:00.
        assert_eq!(
            due(&s, &clock("2026-11-01T15:10:00Z", &st)),
            Due::Run {
                slot: Some(t("2026-11-01T15:00:00Z")),
                manual: None
            }
        );
        st.last_schedule_time = Some("2026-11-01T15:00:00Z".into());
        assert_eq!(
            due(&s, &clock("2026-11-01T15:10:00Z", &st)),
            Due::WaitUntil(t("2026-11-01T16:00:00Z"))
        );
    }

    #[test]
    fn a_failed_run_is_retried_with_backoff_until_the_next_slot() {
        let s = Schedule::parse("0 * * * *").unwrap();
        let st = ShardhouseBackupStatus {
            last_schedule_time: Some("2026-11-01T10:00:00Z".into()),
            consecutive_failures: 3,
            last_failure_time: Some("2026-11-01T11:00:10Z".into()),
            ..Default::default()
        };
        assert_eq!(retry_delay(1), SignedDuration::from_secs(30));
        assert_eq!(retry_delay(3), SignedDuration::from_secs(120));
        assert_eq!(retry_delay(40), SignedDuration::from_secs(600));
        // 3 failures: 2 minutes after the last one.
        assert_eq!(
            due(&s, &clock("2026-11-01T11:01:00Z", &st)),
            Due::WaitUntil(t("2026-11-01T11:02:10Z"))
        );
        assert_eq!(
            due(&s, &clock("2026-11-01T11:02:10Z", &st)),
            Due::Run {
                slot: Some(t("2026-11-01T11:00:00Z")),
                manual: None
            }
        );
        // A retry never waits past the next slot.
        let every_minute = Schedule::parse("* * * * *").unwrap();
        assert_eq!(
            due(&every_minute, &clock("2026-11-01T11:01:30Z", &st)),
            Due::WaitUntil(t("2026-11-01T11:02:00Z"))
        );
    }

    #[test]
    fn suspend_stops_scheduled_runs_but_not_a_manual_request() {
        let s = Schedule::parse("0 * * * *").unwrap();
        let mut st = ShardhouseBackupStatus::default();
        let mut c = clock("2026-11-01T12:00:01Z", &st);
        c.suspend = true;
        assert_eq!(due(&s, &c), Due::Suspended);
        c.manual_request = Some("1");
        assert_eq!(
            due(&s, &c),
            Due::Run {
                slot: None,
                manual: Some("1".into())
            }
        );
        st.last_manual_request = Some("1".into());
        let mut c = clock("2026-11-01T10:10:00Z", &st);
        c.manual_request = Some("1");
        assert_eq!(
            due(&s, &c),
            Due::WaitUntil(t("2026-11-01T11:00:00Z")),
            "a request already acted on is not run again"
        );
    }

    fn manifest() -> Manifest {
        let shard = |shard, node_id, commit_index| ShardManifest {
            shard,
            node_id,
            commit_index,
            flushed_index: commit_index + 2,
            databases: vec![],
            tables: vec![],
            stats: Stats::default(),
        };
        Manifest {
            format: shardhouse_backup::manifest::FORMAT,
            id: "b-20261101T110000Z".into(),
            cluster: "demo".into(),
            started_ms: 1_000,
            finished_ms: 3_500,
            shard_count: 2,
            replication_factor: 1,
            shard_map: serde_json::Value::Null,
            shards: vec![shard(0, 1, 40), shard(1, 2, 17)],
            stats: Stats {
                files: 9,
                bytes: 12_345,
                files_uploaded: 2,
                bytes_uploaded: 678,
            },
        }
    }

    #[test]
    fn status_after_a_success_comes_from_the_manifest() {
        let prev = after_failure(
            &ShardhouseBackupStatus::default(),
            None,
            "node 2 unreachable",
            t("2026-11-01T11:00:10Z"),
        );
        assert_eq!(prev.consecutive_failures, 1);
        assert_eq!(prev.conditions[0].status, "False");
        let st = after_success(
            &prev,
            &manifest(),
            Some(t("2026-11-01T11:00:00Z")),
            None,
            vec!["b-1".into(), "b-20261101T110000Z".into()],
            t("2026-11-01T11:00:14Z"),
        );
        assert_eq!(st.last_backup.as_deref(), Some("b-20261101T110000Z"));
        assert_eq!(
            st.last_schedule_time.as_deref(),
            Some("2026-11-01T11:00:00Z")
        );
        assert_eq!(
            st.last_success_time.as_deref(),
            Some("2026-11-01T11:00:14Z")
        );
        assert_eq!(st.last_size_bytes, Some(12_345));
        assert_eq!(st.last_uploaded_bytes, Some(678));
        assert_eq!(st.last_duration_seconds, Some(2.5));
        assert_eq!(st.index_range.as_deref(), Some("17..40"));
        assert_eq!(st.shards.len(), 2);
        assert_eq!(
            (
                st.shards[1].node_id,
                st.shards[1].commit_index,
                st.shards[1].flushed_index
            ),
            (2, 17, 19)
        );
        assert_eq!(st.consecutive_failures, 0);
        assert_eq!(st.last_failure_time, None);
        let ready = &st.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(ready.last_transition_time, "2026-11-01T11:00:14Z");
        assert!(ready.message.contains("12345 bytes"), "{}", ready.message);
    }

    #[test]
    fn a_failed_manual_run_is_used_up_not_retried() {
        let st = after_failure(
            &ShardhouseBackupStatus::default(),
            Some("7".into()),
            "boom",
            t("2026-11-01T11:00:10Z"),
        );
        assert_eq!(st.last_manual_request.as_deref(), Some("7"));
        assert_eq!(st.consecutive_failures, 0);
    }

    fn cluster(phase: Phase, healthy: &str) -> ShardhouseClusterStatus {
        ShardhouseClusterStatus {
            phase,
            shards_healthy: healthy.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_restore_waits_for_a_healthy_running_cluster_and_runs_once() {
        use RestorePhase as P;
        let running = cluster(Phase::Running, "8/8");
        assert_eq!(
            restore_step(P::Pending, false, Some(&running), "new"),
            RestoreStep::Start
        );
        assert_eq!(
            restore_step(P::WaitingForCluster, false, Some(&running), "new"),
            RestoreStep::Start
        );
        for st in [
            cluster(Phase::Provisioning, "0/8"),
            cluster(Phase::Running, "7/8"),
            cluster(Phase::Running, ""),
            cluster(Phase::Degraded, "8/8"),
        ] {
            assert!(
                matches!(
                    restore_step(P::Pending, false, Some(&st), "new"),
                    RestoreStep::Wait(_)
                ),
                "{st:?}"
            );
        }
        let RestoreStep::Wait(why) = restore_step(P::Pending, false, None, "new") else {
            panic!()
        };
        assert!(why.contains("new"), "{why}");
        for done in [P::Succeeded, P::Failed] {
            assert_eq!(
                restore_step(done, false, Some(&running), "new"),
                RestoreStep::Finished
            );
        }
        assert_eq!(
            restore_step(P::Restoring, false, Some(&running), "new"),
            RestoreStep::Interrupted,
            "a restore found half-way after a restart is not run again"
        );
        // Started by this process, the status not yet seen: never twice.
        for phase in [P::Pending, P::WaitingForCluster, P::Restoring] {
            assert!(matches!(
                restore_step(phase, true, Some(&running), "new"),
                RestoreStep::Wait(_)
            ));
        }
    }

    #[test]
    fn requeue_is_clamped() {
        let now = t("2026-11-01T11:00:00Z");
        assert_eq!(requeue_after(now, now), std::time::Duration::from_secs(1));
        assert_eq!(
            requeue_after(now, t("2026-11-01T11:00:30Z")),
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            requeue_after(now, t("2026-11-03T11:00:00Z")),
            std::time::Duration::from_secs(3600)
        );
    }
}
