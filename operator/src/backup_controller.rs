//! The ShardhouseBackup and ShardhouseRestore controllers: when a backup is
//! due (`backup_schedule::due`) the operator runs it itself with the
//! library `shardhouse-ctl backup create` uses, against the cluster's etcd
//! and nodes, applies retention, and writes status and Events; a
//! ShardhouseRestore restores once into its new cluster when that cluster
//! runs. The decisions are in `backup_schedule`; this module is the I/O
//! (the backup reconciler here, status writes in `status`, the restore
//! reconciler in `restore`).
//!
//! Deleting either resource deletes nothing at the destination: backups
//! outlive the objects that took them (no finalizer).

mod restore;
mod settings;
mod status;

pub use restore::reconcile_restore;

use crate::backup;
use crate::backup_schedule::{self as decide, BackupClock, Due, Schedule};
use crate::crd::{ShardhouseBackup, ShardhouseBackupStatus, ShardhouseCluster, ShardhouseRestore};
use crate::rebalance::ClusterMeta;
use crate::resources::{self, MANAGER};
use crate::{Error, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use shardhouse_common::credential::ClusterToken;
use status::{write_backup_status, Fresh, STALE_RETRY};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Keys a `credentialsSecret` must hold.
pub const CREDENTIAL_KEYS: [&str; 2] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];

/// Shared by the reconciles of both resources.
pub struct Context {
    pub client: Client,
    reporter: Reporter,
    /// Restores this process started (`namespace/name`): a restore found
    /// `Restoring` and not in here was interrupted by a restart. Kept after
    /// they finish, so a reconcile that still sees the `Restoring` status
    /// (the watch lags our last write) waits instead of failing it.
    restores_started: Mutex<BTreeSet<String>>,
    /// The last run per backup (`namespace/name`): the same decision again
    /// means the watch has not yet shown the status that run wrote.
    last_run: Mutex<BTreeMap<String, Due>>,
}

impl Context {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            reporter,
            client,
            restores_started: Mutex::new(BTreeSet::new()),
            last_run: Mutex::new(BTreeMap::new()),
        }
    }

    fn restores_started(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.restores_started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn last_run(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Due>> {
        self.last_run.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An Event about `obj` (best effort: a failure to record one must not
    /// fail the reconcile that did the work).
    async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        // A recorder per Event: one that is kept folds every later Event
        // of the same reason into the first one's series and note, and
        // each run's outcome (its backup id, its error) must be seen.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(%e, reason, "could not publish event");
        }
    }
}

/// Runs both controllers until the process is told to stop.
pub async fn run(client: Client) {
    let ctx = Arc::new(Context::new(client.clone()));
    let wc = watcher::Config::default().any_semantic();
    let backups = Controller::new(Api::<ShardhouseBackup>::all(client.clone()), wc.clone())
        .shutdown_on_signal()
        .run(reconcile_backup, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(%e, "backup reconcile error");
            }
        });
    let restores = Controller::new(Api::<ShardhouseRestore>::all(client), wc)
        .shutdown_on_signal()
        .run(reconcile_restore, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(%e, "restore reconcile error");
            }
        });
    futures::join!(backups, restores);
}

/// API errors (status writes, reads): try again soon. Failed backups and
/// restores are not errors here: they are in the status.
fn error_policy<K>(obj: Arc<K>, err: &Error, _ctx: Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    crate::metrics::RECONCILE_ERRORS.inc();
    tracing::warn!(name = %obj.name_any(), %err, "backup/restore reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

fn namespace<K: Resource>(obj: &K) -> Result<String> {
    obj.namespace()
        .ok_or(Error::MissingField("metadata.namespace"))
}

/// `ClusterMeta` of a ShardhouseCluster, as `shardhouse-ctl --etcd E
/// --cluster C` builds it: its etcd endpoints, its name in etcd, and the
/// cluster credential when the cluster requires one.
async fn cluster_meta(
    client: &Client,
    c: &ShardhouseCluster,
    ns: &str,
) -> Result<ClusterMeta, String> {
    let token = match c.cluster_token_secret() {
        None => None,
        Some((name, key)) => {
            let text = secret_value(client, ns, &name, &key).await?;
            Some(
                ClusterToken::new(&text, &format!("Secret {name} key `{key}`"))
                    .map_err(|e| e.to_string())?,
            )
        }
    };
    let endpoints = c.etcd_endpoints();
    let meta = ClusterMeta::connect(&endpoints, &resources::etcd_cluster_key(c))
        .await
        .map_err(|e| e.to_string())?;
    Ok(meta.with_node_token(token))
}

/// One key of a Secret, as text.
async fn secret_value(client: &Client, ns: &str, name: &str, key: &str) -> Result<String, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{name}: {e}"))?
        .ok_or_else(|| format!("Secret {ns}/{name} does not exist"))?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .ok_or_else(|| format!("Secret {ns}/{name} has no key `{key}`"))?;
    String::from_utf8(bytes).map_err(|_| format!("Secret {ns}/{name} key `{key}` is not text"))
}

/// The credentials Secret holds both keys. The backup library reads S3
/// credentials from the environment of the operator and of the node pods
/// (`Destination::open`), so the Secret is checked here and must also be
/// given to them (docs/operations.md, "Backups on Kubernetes").
async fn check_credentials(client: &Client, ns: &str, secret: Option<&str>) -> Result<(), String> {
    let Some(name) = secret else { return Ok(()) };
    for key in CREDENTIAL_KEYS {
        let v = secret_value(client, ns, name, key).await?;
        if v.trim().is_empty() {
            return Err(format!("Secret {ns}/{name} key `{key}` is empty"));
        }
    }
    Ok(())
}

async fn get_cluster(client: &Client, ns: &str, name: &str) -> Result<Option<ShardhouseCluster>> {
    Ok(Api::<ShardhouseCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?)
}

// ---------------------------------------------------------------- backups

pub async fn reconcile_backup(b: Arc<ShardhouseBackup>, ctx: Arc<Context>) -> Result<Action> {
    let ns = namespace(b.as_ref())?;
    let now = Timestamp::now();
    let status = b.status.clone().unwrap_or_default();
    let schedule = match settings::runnable(&b.spec) {
        Ok(s) => s,
        Err((reason, msg)) => return invalid_spec(&ctx, &b, &status, reason, msg, now).await,
    };
    let created = b.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let clock = BackupClock {
        now,
        created,
        suspend: b.spec.suspend,
        manual_request: b
            .annotations()
            .get(decide::BACKUP_NOW_ANNOTATION)
            .map(String::as_str),
        status: &status,
    };
    let Some((st, ran)) = run_if_due(&ctx, &b, &ns, &schedule, &clock).await else {
        // Done a moment ago; its status is not in our cache yet.
        return Ok(Action::requeue(STALE_RETRY));
    };
    // After a run, decide again from the new status: when next.
    let now = Timestamp::now();
    let clock = BackupClock {
        now,
        status: &st,
        ..clock
    };
    let (mut st, action) = next_run(&schedule, &clock);
    set_scheduled_condition(&b, &mut st, now);
    // A run's result is written whatever changed meanwhile; anything else
    // only onto the status it was computed from.
    let fresh = if ran { Fresh::Result } else { Fresh::Checked };
    if st != status && !write_backup_status(&ctx, &b, st, fresh).await? {
        return Ok(Action::requeue(STALE_RETRY));
    }
    Ok(action)
}

/// The spec cannot run (a schedule that does not parse, a bad rate limit
/// or bound): say so once (condition `Scheduled` False, Warning Event).
async fn invalid_spec(
    ctx: &Context,
    b: &ShardhouseBackup,
    status: &ShardhouseBackupStatus,
    reason: &str,
    msg: String,
    now: Timestamp,
) -> Result<Action> {
    let mut st = status.clone();
    st.next_schedule_time = None;
    decide::set_condition(
        &mut st.conditions,
        "Scheduled",
        false,
        reason,
        msg.clone(),
        &now.to_string(),
        b.metadata.generation,
    );
    if st != *status {
        ctx.event(b, EventType::Warning, reason, msg).await;
        if !write_backup_status(ctx, b, st, Fresh::Checked).await? {
            return Ok(Action::requeue(STALE_RETRY));
        }
    }
    // Nothing until the spec changes (a change triggers a reconcile).
    Ok(Action::await_change())
}

/// Runs the backup when it is due: the status to write and whether it ran;
/// None when this run was done a moment ago (the watch lags its status).
async fn run_if_due(
    ctx: &Context,
    b: &ShardhouseBackup,
    ns: &str,
    schedule: &Schedule,
    clock: &BackupClock<'_>,
) -> Option<(ShardhouseBackupStatus, bool)> {
    let key = format!("{ns}/{}", b.name_any());
    match decide::due(schedule, clock) {
        run @ Due::Run { .. } if ctx.last_run().get(&key) == Some(&run) => None,
        Due::Run { slot, manual } => {
            let st = run_backup(ctx, b, ns, clock.status, slot, manual.clone()).await;
            ctx.last_run().insert(key, Due::Run { slot, manual });
            Some((st, true))
        }
        Due::WaitUntil(_) | Due::Suspended => Some((clock.status.clone(), false)),
    }
}

/// When to look again, and `nextScheduleTime` to match.
fn next_run(schedule: &Schedule, clock: &BackupClock<'_>) -> (ShardhouseBackupStatus, Action) {
    let st = clock.status;
    match decide::due(schedule, clock) {
        Due::WaitUntil(t) => {
            let mut st = st.clone();
            st.next_schedule_time = Some(t.to_string());
            (st, Action::requeue(decide::requeue_after(clock.now, t)))
        }
        Due::Suspended => {
            let mut st = st.clone();
            st.next_schedule_time = None;
            (st, Action::await_change())
        }
        // Still due (a manual request arrived meanwhile): at once.
        Due::Run { .. } => (st.clone(), Action::requeue(Duration::from_secs(1))),
    }
}

/// The `Scheduled` condition: suspended, or the schedule and next run.
fn set_scheduled_condition(b: &ShardhouseBackup, st: &mut ShardhouseBackupStatus, now: Timestamp) {
    let (ok, reason, msg) = if b.spec.suspend {
        (
            false,
            "Suspended",
            "spec.suspend is true: no scheduled runs".to_string(),
        )
    } else {
        (
            true,
            "Scheduled",
            format!(
                "{:?} (UTC); next run {}",
                b.spec.schedule,
                st.next_schedule_time.as_deref().unwrap_or("now")
            ),
        )
    };
    decide::set_condition(
        &mut st.conditions,
        "Scheduled",
        ok,
        reason,
        msg,
        &now.to_string(),
        b.metadata.generation,
    );
}

/// One run: back up, apply retention, and return the status it leaves.
/// Its failure is reported (status, Warning Event), not returned.
async fn run_backup(
    ctx: &Context,
    b: &ShardhouseBackup,
    ns: &str,
    status: &ShardhouseBackupStatus,
    slot: Option<Timestamp>,
    manual: Option<String>,
) -> ShardhouseBackupStatus {
    let what = match (&slot, &manual) {
        (Some(s), _) => format!("scheduled for {s}"),
        (None, Some(m)) => format!("requested by {}={m}", decide::BACKUP_NOW_ANNOTATION),
        (None, None) => "run".into(),
    };
    tracing::info!(backup = %b.name_any(), cluster = %b.spec.cluster_ref, %what, "backup starting");
    let mut retention_failed = Vec::new();
    match backup_and_prune(ctx, b, ns).await {
        Ok((m, kept, log)) => {
            tracing::info!(backup = %b.name_any(), id = %m.id, "{}", log.trim_end());
            let kept = kept.unwrap_or_else(|e| {
                let msg = format!(
                    "backup {} is complete; retention (keep {}) failed: {e}",
                    m.id,
                    b.spec.retention.as_ref().map_or(0, |r| r.keep)
                );
                tracing::warn!(backup = %b.name_any(), "{msg}");
                retention_failed.push(msg);
                status.kept_backups.clone()
            });
            let st = decide::after_success(status, &m, slot, manual, kept, Timestamp::now());
            let note = format!(
                "backup {} ({what}) of cluster {}: {} shards, {} bytes ({} uploaded) in {:.1} s, Raft index {}",
                m.id,
                b.spec.cluster_ref,
                m.shards.len(),
                m.stats.bytes,
                m.stats.bytes_uploaded,
                st.last_duration_seconds.unwrap_or_default(),
                st.index_range.as_deref().unwrap_or("-"),
            );
            ctx.event(b, EventType::Normal, "BackupSucceeded", note)
                .await;
            for msg in retention_failed {
                ctx.event(b, EventType::Warning, "RetentionFailed", msg)
                    .await;
            }
            st
        }
        Err(e) => {
            let msg = format!(
                "backup ({what}) of cluster {} to {} failed: {e}",
                b.spec.cluster_ref, b.spec.destination
            );
            tracing::warn!(backup = %b.name_any(), "{msg}");
            ctx.event(b, EventType::Warning, "BackupFailed", msg.clone())
                .await;
            decide::after_failure(status, manual, &msg, Timestamp::now())
        }
    }
}

/// What one run produced: the manifest, the backups the retention kept
/// (or why it failed) and the library's output lines.
type RunOutcome = (
    shardhouse_backup::Manifest,
    Result<Vec<String>, String>,
    String,
);

/// `backup create`, then `backup delete --keep N`.
async fn backup_and_prune(
    ctx: &Context,
    b: &ShardhouseBackup,
    ns: &str,
) -> Result<RunOutcome, String> {
    let cluster = get_cluster(&ctx.client, ns, &b.spec.cluster_ref)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "ShardhouseCluster {ns}/{} does not exist",
                b.spec.cluster_ref
            )
        })?;
    check_credentials(&ctx.client, ns, b.spec.credentials_secret.as_deref()).await?;
    let mut meta = cluster_meta(&ctx.client, &cluster, ns).await?;
    // Checked before the run was decided; again here, since it is cheap.
    let (knobs, opts) = settings::backup_settings(&b.spec)?;
    let url = &b.spec.destination;
    let mut out = Vec::new();
    let m = backup::create_with(&mut meta, url, None, &knobs, &opts, &mut out)
        .await
        .map_err(|e| format!("{e:#}"))?;
    // The backup is complete either way: a failed retention pass is
    // reported, not a reason to take the backup again.
    let kept = match b.spec.retention.as_ref() {
        Some(r) => backup::delete(url, &[], Some(r.keep as usize), &mut out)
            .await
            .map(|plan| plan.keep_backups)
            .map_err(|e| format!("{e:#}")),
        None => Ok(Vec::new()),
    };
    Ok((m, kept, String::from_utf8_lossy(&out).into_owned()))
}
