//! What a ShardhouseBackup or ShardhouseRestore spec asks of a run, as the
//! `Knobs` and `Options` that `shardhouse-ctl` hands the same library, or
//! why the spec cannot be run. Plain functions over the specs, apart from
//! the reconcilers so that a test can show each field reaches the run.
//!
//! The CRD's schema already bounds these fields when the apiserver checks
//! it; they are checked again here because a CRD installed before a field
//! existed (helm never upgrades CRDs) lets any value, or none, through.

use crate::backup::{max_bytes_per_sec, Knobs, Options};
use crate::backup_schedule::Schedule;
use crate::crd::{ShardhouseBackupSpec, ShardhouseRestoreSpec};

/// Most shards or files at once the CRD allows (its schema's maximum).
const MAX_AT_ONCE: u32 = 64;

/// The Event reason and condition reason of a spec that cannot be run.
pub(super) const INVALID_SPEC: &str = "InvalidSpec";

/// The parsed schedule, or why the spec cannot run: the reason
/// (`InvalidSchedule` when the schedule does not parse, else
/// `InvalidSpec`) and every problem found, so that one fix is enough.
pub(super) fn runnable(spec: &ShardhouseBackupSpec) -> Result<Schedule, (&'static str, String)> {
    match (Schedule::parse(&spec.schedule), backup_settings(spec)) {
        (Ok(s), Ok(_)) => Ok(s),
        (Err(e), Ok(_)) => Err(("InvalidSchedule", e)),
        (Ok(_), Err(e)) => Err((INVALID_SPEC, e)),
        (Err(a), Err(b)) => Err(("InvalidSchedule", format!("{a}; {b}"))),
    }
}

/// The knobs and options of a backup run of `spec`.
pub(super) fn backup_settings(spec: &ShardhouseBackupSpec) -> Result<(Knobs, Options), String> {
    settings(spec.parallel_shards, spec.jobs, spec.max_mb_per_second)
}

/// The knobs and options of the restore of `spec` (every database).
pub(super) fn restore_settings(spec: &ShardhouseRestoreSpec) -> Result<(Knobs, Options), String> {
    settings(spec.parallel_shards, spec.jobs, spec.max_mb_per_second)
}

fn settings(
    parallel_shards: u32,
    jobs: u32,
    max_mb_per_second: Option<f64>,
) -> Result<(Knobs, Options), String> {
    let mut errors = Vec::new();
    for (name, v) in [
        ("spec.parallelShards", parallel_shards),
        ("spec.jobs", jobs),
    ] {
        if !(1..=MAX_AT_ONCE).contains(&v) {
            errors.push(format!("{name} is {v}: give 1 to {MAX_AT_ONCE}"));
        }
    }
    let rate = max_bytes_per_sec("spec.maxMbPerSecond", max_mb_per_second.unwrap_or(0.0))
        .unwrap_or_else(|e| {
            errors.push(e);
            0
        });
    if !errors.is_empty() {
        return Err(format!(
            "{}; nothing runs until the spec is fixed",
            errors.join("; ")
        ));
    }
    let knobs = Knobs {
        parallel_shards: parallel_shards as usize,
        jobs,
    };
    let opts = Options {
        max_bytes_per_sec: rate,
        ..Options::default()
    };
    Ok((knobs, opts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ShardhouseBackup, ShardhouseRestore};

    fn backup(spec: &str) -> ShardhouseBackupSpec {
        let yaml = format!(
            "apiVersion: shardhouse.dev/v1alpha1\nkind: ShardhouseBackup\nmetadata: {{name: b}}\nspec:\n  clusterRef: prod\n  schedule: '@daily'\n  destination: /backups\n{spec}"
        );
        serde_yaml::from_str::<ShardhouseBackup>(&yaml)
            .unwrap()
            .spec
    }

    fn restore(spec: &str) -> ShardhouseRestoreSpec {
        let yaml = format!(
            "apiVersion: shardhouse.dev/v1alpha1\nkind: ShardhouseRestore\nmetadata: {{name: r}}\nspec:\n  clusterRef: new\n  source: /backups\n{spec}"
        );
        serde_yaml::from_str::<ShardhouseRestore>(&yaml)
            .unwrap()
            .spec
    }

    #[test]
    fn a_backup_spec_reaches_the_knobs_and_options_of_its_run() {
        let (k, o) = backup_settings(&backup(
            "  parallelShards: 3\n  jobs: 7\n  maxMbPerSecond: 12.5\n",
        ))
        .unwrap();
        assert_eq!((k.parallel_shards, k.jobs), (3, 7));
        assert_eq!(o.max_bytes_per_sec, 12_500_000);
        assert!(!o.live_progress && o.database.is_none());
    }

    #[test]
    fn a_restore_spec_reaches_the_knobs_and_options_of_its_run() {
        let (k, o) = restore_settings(&restore(
            "  parallelShards: 1\n  jobs: 16\n  maxMbPerSecond: 40\n",
        ))
        .unwrap();
        assert_eq!((k.parallel_shards, k.jobs), (1, 16));
        assert_eq!(o.max_bytes_per_sec, 40_000_000);
        assert!(o.database.is_none());
    }

    #[test]
    fn absent_fields_are_the_ctl_defaults_and_no_rate_limit() {
        for (k, o) in [
            backup_settings(&backup("")).unwrap(),
            restore_settings(&restore("")).unwrap(),
            backup_settings(&backup("  maxMbPerSecond: 0\n")).unwrap(),
        ] {
            let ctl = Knobs::default();
            assert_eq!((k.parallel_shards, k.jobs), (ctl.parallel_shards, ctl.jobs));
            assert_eq!(o.max_bytes_per_sec, 0);
        }
    }

    #[test]
    fn a_bad_value_is_refused_naming_every_field_and_what_to_give() {
        let e = backup_settings(&backup(
            "  parallelShards: 0\n  jobs: 65\n  maxMbPerSecond: -5\n",
        ))
        .unwrap_err();
        assert!(e.contains("spec.parallelShards is 0: give 1 to 64"), "{e}");
        assert!(e.contains("spec.jobs is 65: give 1 to 64"), "{e}");
        assert!(
            e.contains("spec.maxMbPerSecond is -5: give 0 (no limit) or at least 0.1"),
            "{e}"
        );
        assert!(e.ends_with("nothing runs until the spec is fixed"), "{e}");
        let e = restore_settings(&restore("  maxMbPerSecond: 0.01\n")).unwrap_err();
        assert!(e.starts_with("spec.maxMbPerSecond is 0.01"), "{e}");
    }

    #[test]
    fn a_backup_runs_only_with_a_schedule_and_settings_that_both_hold() {
        assert!(runnable(&backup("  maxMbPerSecond: 20\n")).is_ok());
        let (reason, e) = runnable(&backup("  maxMbPerSecond: 0.05\n")).unwrap_err();
        assert_eq!(reason, INVALID_SPEC);
        // As docs/operations.md quotes it.
        assert_eq!(
            e,
            "spec.maxMbPerSecond is 0.05: give 0 (no limit) or at least 0.1 MB/s per node (10^6 bytes per second), e.g. 50; nothing runs until the spec is fixed"
        );
        let mut spec = backup("  jobs: 0\n");
        spec.schedule = "every day".into();
        let (reason, e) = runnable(&spec).unwrap_err();
        assert_eq!(reason, "InvalidSchedule");
        assert!(e.contains("spec.jobs is 0"), "both problems at once: {e}");
    }
}
