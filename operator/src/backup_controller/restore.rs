//! The ShardhouseRestore reconciler: waits for its new cluster to run,
//! restores into it once, and records the outcome. Apart from the backup
//! reconciler because the two share only the context and the status
//! writes; a restore has no schedule and runs at most once.

use super::settings::{restore_settings, INVALID_SPEC};
use super::status::{write_restore_status, Fresh, STALE_RETRY};
use super::{check_credentials, cluster_meta, get_cluster, namespace, Context};
use crate::backup;
use crate::backup_schedule::{self as decide, RestoreStep};
use crate::crd::{RestorePhase, ShardhouseCluster, ShardhouseRestore, ShardhouseRestoreStatus};
use crate::Result;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::sync::Arc;
use std::time::Duration;

pub async fn reconcile_restore(r: Arc<ShardhouseRestore>, ctx: Arc<Context>) -> Result<Action> {
    let ns = namespace(r.as_ref())?;
    let key = format!("{ns}/{}", r.name_any());
    let status = r.status.clone().unwrap_or_default();
    let waiting = matches!(
        status.phase,
        RestorePhase::Pending | RestorePhase::WaitingForCluster
    );
    if let (true, Err(msg)) = (waiting, restore_settings(&r.spec)) {
        return invalid_spec(&ctx, &r, status, msg).await;
    }
    let cluster = get_cluster(&ctx.client, &ns, &r.spec.cluster_ref).await?;
    let started_here = ctx.restores_started().contains(&key);
    let step = decide::restore_step(
        status.phase,
        started_here,
        cluster.as_ref().and_then(|c| c.status.as_ref()),
        &r.spec.cluster_ref,
    );
    let now = Timestamp::now().to_string();
    match step {
        RestoreStep::Finished => Ok(Action::await_change()),
        // Started by this process: its outcome is written by the run, and
        // the watch has not shown it yet.
        RestoreStep::Wait(_) if started_here => Ok(Action::requeue(STALE_RETRY)),
        RestoreStep::Wait(why) => {
            let mut st = status.clone();
            st.phase = RestorePhase::WaitingForCluster;
            st.message = why;
            if st != status && !write_restore_status(&ctx, &r, &st, Fresh::Checked).await? {
                return Ok(Action::requeue(STALE_RETRY));
            }
            Ok(Action::requeue(Duration::from_secs(10)))
        }
        RestoreStep::Interrupted => {
            let mut st = status;
            let msg = "the operator restarted during the restore: the cluster may hold part of the backup; delete the cluster and restore into a new one".to_string();
            finish_restore(&mut st, false, msg.clone(), &now);
            if !write_restore_status(&ctx, &r, &st, Fresh::Checked).await? {
                return Ok(Action::requeue(STALE_RETRY));
            }
            ctx.event(r.as_ref(), EventType::Warning, "RestoreFailed", msg)
                .await;
            Ok(Action::await_change())
        }
        RestoreStep::Start => {
            let Some(cluster) = cluster else {
                return Ok(Action::requeue(Duration::from_secs(10)));
            };
            start(&ctx, &r, status, &cluster, &key, now).await
        }
    }
}

/// Marks the restore `Restoring` (only on the newest version of the
/// object), runs it, and records its outcome.
async fn start(
    ctx: &Context,
    r: &ShardhouseRestore,
    mut st: ShardhouseRestoreStatus,
    cluster: &ShardhouseCluster,
    key: &str,
    now: String,
) -> Result<Action> {
    st.phase = RestorePhase::Restoring;
    st.start_time = Some(now);
    st.message = format!(
        "restoring {} from {}",
        r.spec.backup_id.as_deref().unwrap_or("the newest backup"),
        r.spec.source
    );
    // Only from the newest version: a lagging watch never starts a
    // restore twice.
    if !write_restore_status(ctx, r, &st, Fresh::Checked).await? {
        return Ok(Action::requeue(STALE_RETRY));
    }
    ctx.event(r, EventType::Normal, "RestoreStarted", st.message.clone())
        .await;
    ctx.restores_started().insert(key.to_string());
    let ns = namespace(r)?;
    let result = restore(ctx, r, cluster, &ns).await;
    let now = Timestamp::now().to_string();
    match result {
        Ok((m, log)) => {
            tracing::info!(restore = %key, "{}", log.trim_end());
            let (shards, range) = decide::shard_indexes(&m);
            st.backup_id = Some(m.id.clone());
            st.shards_restored = m.shards.len() as u32;
            st.size_bytes = Some(m.stats.bytes);
            st.shards = shards;
            let msg = format!(
                "restored backup {} ({} shards, {} bytes, Raft index {}) into cluster {}",
                m.id,
                m.shards.len(),
                m.stats.bytes,
                range.as_deref().unwrap_or("-"),
                r.spec.cluster_ref
            );
            finish_restore(&mut st, true, msg.clone(), &now);
            ctx.event(r, EventType::Normal, "RestoreSucceeded", msg)
                .await;
        }
        Err(e) => {
            let msg = format!("restore into cluster {} failed: {e}", r.spec.cluster_ref);
            finish_restore(&mut st, false, msg.clone(), &now);
            ctx.event(r, EventType::Warning, "RestoreFailed", msg).await;
        }
    }
    write_restore_status(ctx, r, &st, Fresh::Result).await?;
    Ok(Action::await_change())
}

/// A spec that cannot run fails the restore before it waits for its
/// cluster: the spec cannot be changed, so the user creates a new one.
async fn invalid_spec(
    ctx: &Context,
    r: &ShardhouseRestore,
    mut st: ShardhouseRestoreStatus,
    msg: String,
) -> Result<Action> {
    let now = Timestamp::now().to_string();
    finish_restore(&mut st, false, msg.clone(), &now);
    decide::set_condition(
        &mut st.conditions,
        "Ready",
        false,
        INVALID_SPEC,
        msg.clone(),
        &now,
        None,
    );
    if !write_restore_status(ctx, r, &st, Fresh::Checked).await? {
        return Ok(Action::requeue(STALE_RETRY));
    }
    ctx.event(r, EventType::Warning, INVALID_SPEC, msg).await;
    Ok(Action::await_change())
}

fn finish_restore(st: &mut ShardhouseRestoreStatus, ok: bool, msg: String, now: &str) {
    st.phase = if ok {
        RestorePhase::Succeeded
    } else {
        RestorePhase::Failed
    };
    st.completion_time = Some(now.to_string());
    st.message = msg.clone();
    let reason = if ok {
        "RestoreSucceeded"
    } else {
        "RestoreFailed"
    };
    decide::set_condition(&mut st.conditions, "Ready", ok, reason, msg, now, None);
}

async fn restore(
    ctx: &Context,
    r: &ShardhouseRestore,
    cluster: &ShardhouseCluster,
    ns: &str,
) -> Result<(shardhouse_backup::Manifest, String), String> {
    check_credentials(&ctx.client, ns, r.spec.credentials_secret.as_deref()).await?;
    let mut meta = cluster_meta(&ctx.client, cluster, ns).await?;
    // Checked before the restore started; again here, since it is cheap.
    let (knobs, opts) = restore_settings(&r.spec)?;
    let mut out = Vec::new();
    // The library refuses a cluster that holds any database.
    let m = backup::restore_with(
        &mut meta,
        &r.spec.source,
        r.spec.backup_id.clone(),
        &knobs,
        &opts,
        &mut out,
    )
    .await
    .map_err(|e| format!("{e:#}"))?;
    Ok((m, String::from_utf8_lossy(&out).into_owned()))
}
