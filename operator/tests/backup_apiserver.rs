//! ShardhouseBackup and ShardhouseRestore against a real kube-apiserver +
//! etcd, with real Shardhouse clusters (node and router processes) behind
//! the ShardhouseCluster resources: the operator's backup controller backs
//! a cluster up to a directory (status, Events, retention), reports a
//! failed run and a bad schedule, and its restore controller restores the
//! newest backup into a new cluster once that cluster runs, and refuses a
//! cluster that is not empty. (The kubelet suite, scripts/k8s/, runs pods;
//! here the node processes run on this machine and the ShardhouseClusters
//! name their etcd as external endpoints.)

mod support;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::json;
use shardhouse_operator::backup_schedule::BACKUP_NOW_ANNOTATION;
use shardhouse_operator::crd::{
    RestorePhase, ShardhouseBackup, ShardhouseBackupStatus, ShardhouseCluster, ShardhouseRestore,
    ShardhouseRestoreStatus,
};
use shardhouse_test_support::{eventually, LocalCluster};
use std::time::Duration;
use support::ControlPlane;

const NS: &str = "backups";
const SHARDS: u32 = 4;

async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        ShardhouseCluster::crd(),
        ShardhouseBackup::crd(),
        ShardhouseRestore::crd(),
    ] {
        let name = crd.metadata.name.clone().unwrap();
        crds.patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("apply CRD");
        eventually(
            &format!("{name} Established"),
            Duration::from_secs(30),
            || {
                let (crds, name) = (crds.clone(), name.clone());
                async move {
                    let c = crds.get(&name).await?;
                    let est = c.status.and_then(|s| s.conditions).is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                    anyhow::Ok(est.then_some(()))
                }
            },
        )
        .await
        .unwrap();
    }
}

/// A ShardhouseCluster resource for a local cluster: its etcd as external
/// endpoints, no cluster credential (the local nodes run without one).
fn cluster_resource(c: &LocalCluster) -> ShardhouseCluster {
    serde_json::from_value(json!({
        "apiVersion": "shardhouse.dev/v1alpha1",
        "kind": "ShardhouseCluster",
        "metadata": {"name": c.name},
        "spec": {
            "shardCount": c.shards,
            "replicationFactor": 1,
            "nodes": {"replicas": c.nodes.len(), "cores": 1, "memory": "1Gi"},
            "etcd": {"endpoints": [c.etcd.endpoint]},
            "security": {"clusterToken": {"enabled": false}},
        }
    }))
    .unwrap()
}

/// Writes `n` points of measurement `m`, one series per point.
async fn write_points(c: &LocalCluster, m: &str, from: usize, n: usize) {
    let body: String = (from..from + n)
        .map(|i| {
            format!(
                "{m},host=h{i} v={i} {}\n",
                1_700_000_000_000_000_000u64 + i as u64
            )
        })
        .collect();
    let r = reqwest::Client::new()
        .post(format!("{}/write?db=shardhouse", c.router_url()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "write: {}", r.status());
}

/// `SELECT count(v) FROM m` through the router (0 when there is none).
async fn count(c: &LocalCluster, m: &str) -> anyhow::Result<u64> {
    let v: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/query", c.router_url()))
        .query(&[
            ("db", "shardhouse"),
            ("q", &format!("SELECT count(v) FROM {m}")),
        ])
        .send()
        .await?
        .json()
        .await?;
    Ok(v["results"][0]["series"][0]["values"][0][1]
        .as_u64()
        .unwrap_or(0))
}

async fn annotate(api: &Api<ShardhouseBackup>, name: &str, value: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {BACKUP_NOW_ANNOTATION: value}}})),
    )
    .await
    .expect("annotate");
}

async fn backup_status(
    api: &Api<ShardhouseBackup>,
    name: &str,
    what: &str,
    ok: impl Fn(&ShardhouseBackupStatus) -> bool,
) -> ShardhouseBackupStatus {
    eventually(what, Duration::from_secs(120), || {
        let api = api.clone();
        let ok = &ok;
        async move {
            // Not yet: the status seen is the error a timeout reports.
            match api.get(name).await?.status {
                Some(s) if ok(&s) => Ok(Some(s)),
                other => Err(anyhow::anyhow!("status now: {other:?}")),
            }
        }
    })
    .await
    .unwrap()
}

async fn restore_status(
    api: &Api<ShardhouseRestore>,
    name: &str,
    what: &str,
    ok: impl Fn(&ShardhouseRestoreStatus) -> bool,
) -> ShardhouseRestoreStatus {
    eventually(what, Duration::from_secs(120), || {
        let api = api.clone();
        let ok = &ok;
        async move {
            // Not yet: the status seen is the error a timeout reports.
            match api.get(name).await?.status {
                Some(s) if ok(&s) => Ok(Some(s)),
                other => Err(anyhow::anyhow!("status now: {other:?}")),
            }
        }
    })
    .await
    .unwrap()
}

/// Events about `name` with `reason`, newest last.
async fn events(client: &Client, name: &str, reason: &str) -> Vec<String> {
    let list = Api::<K8sEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

fn ready(conds: &[shardhouse_operator::crd::ClusterCondition]) -> Option<(&str, &str)> {
    conds
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_and_restores_through_the_custom_resources() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("shardhouse_operator=debug,backup_apiserver=info")
        .with_test_writer()
        .try_init();
    let cp = ControlPlane::start(false).await.expect("control plane");
    let client = cp.client().await.unwrap();
    install_crds(&client).await;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();

    // The source cluster: 2 nodes, 4 shards, a router; 300 points.
    let src = LocalCluster::builder("src")
        .nodes(2)
        .shards(SHARDS)
        .rf(1)
        .routers(1)
        .start()
        .expect("source cluster");
    src.wait_leaders(Duration::from_secs(60)).await.unwrap();
    write_points(&src, "before", 0, 300).await;
    let shc: Api<ShardhouseCluster> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    shc.create(&pp, &cluster_resource(&src)).await.unwrap();

    let controller = tokio::spawn(shardhouse_operator::backup_controller::run(client.clone()));

    // --- a backup on a daily schedule, run now through the annotation
    let dest = tempfile::tempdir().unwrap();
    let url = dest.path().display().to_string();
    let shb: Api<ShardhouseBackup> = Api::namespaced(client.clone(), NS);
    let backup: ShardhouseBackup = serde_json::from_value(json!({
        "apiVersion": "shardhouse.dev/v1alpha1",
        "kind": "ShardhouseBackup",
        "metadata": {"name": "nightly", "annotations": {BACKUP_NOW_ANNOTATION: "1"}},
        "spec": {
            "clusterRef": "src",
            "schedule": "30 3 * * *",
            "destination": url,
            "retention": {"keep": 1},
        }
    }))
    .unwrap();
    shb.create(&pp, &backup).await.unwrap();
    let first = backup_status(&shb, "nightly", "first backup recorded", |s| {
        s.last_backup.is_some()
    })
    .await;
    let id1 = first.last_backup.clone().unwrap();
    tracing::info!("first backup: {}", serde_json::to_string(&first).unwrap());
    assert!(first.last_size_bytes.unwrap() > 0, "{first:?}");
    assert!(first.last_duration_seconds.is_some());
    assert_eq!(first.shards.len(), SHARDS as usize);
    assert!(
        first.shards.iter().all(|s| s.commit_index > 0),
        "every shard took writes: {:?}",
        first.shards
    );
    let lo = first.shards.iter().map(|s| s.commit_index).min().unwrap();
    let hi = first.shards.iter().map(|s| s.commit_index).max().unwrap();
    assert_eq!(first.index_range, Some(format!("{lo}..{hi}")));
    assert_eq!(first.kept_backups, vec![id1.clone()]);
    assert_eq!(ready(&first.conditions), Some(("True", "BackupSucceeded")));
    assert_eq!(first.last_manual_request.as_deref(), Some("1"));
    // A manual run is not a schedule slot; the next slot is 03:30 UTC.
    assert_eq!(first.last_schedule_time, None);
    let next = first.next_schedule_time.clone().expect("next run");
    assert!(next.contains("T03:30:00"), "{next}");
    let scheduled = first
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .unwrap();
    assert_eq!(scheduled.status, "True");
    let notes = events(&client, "nightly", "BackupSucceeded").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&id1) && n.contains("4 shards")),
        "{notes:?}"
    );
    // The manifest is at the destination, as `shardhouse-ctl backup list` sees it.
    let mut listing = Vec::new();
    let at = shardhouse_operator::backup::list(&url, &mut listing)
        .await
        .unwrap();
    assert_eq!(at.len(), 1);
    assert_eq!(at[0].id, id1);
    assert_eq!(at[0].stats.bytes, first.last_size_bytes.unwrap());

    // --- more data, a second run: retention keeps only the newest
    write_points(&src, "after", 0, 200).await;
    // Backup ids have a one-second resolution.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    annotate(&shb, "nightly", "2").await;
    let second = backup_status(&shb, "nightly", "second backup recorded", |s| {
        s.last_manual_request.as_deref() == Some("2")
    })
    .await;
    let id2 = second.last_backup.clone().unwrap();
    assert_ne!(id1, id2, "{second:?}");
    assert_eq!(second.kept_backups, vec![id2.clone()]);
    // Each run has its own Event (not folded into the first one's).
    let notes = events(&client, "nightly", "BackupSucceeded").await;
    assert!(notes.iter().any(|n| n.contains(&id2)), "{notes:?}");
    let at = shardhouse_operator::backup::list(&url, &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(
        at.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        vec![id2.clone()],
        "keep 1: the first backup was deleted"
    );
    for (a, b) in first.shards.iter().zip(&second.shards) {
        assert!(b.commit_index >= a.commit_index, "{a:?} -> {b:?}");
    }
    assert!(
        second.last_uploaded_bytes.unwrap() < second.last_size_bytes.unwrap(),
        "incremental: parts of the first backup are not uploaded again: {second:?}"
    );

    // --- failures: a missing cluster, a schedule that is not cron
    let broken: ShardhouseBackup = serde_json::from_value(json!({
        "apiVersion": "shardhouse.dev/v1alpha1",
        "kind": "ShardhouseBackup",
        "metadata": {"name": "orphan", "annotations": {BACKUP_NOW_ANNOTATION: "x"}},
        "spec": {"clusterRef": "nosuch", "schedule": "@hourly", "destination": url}
    }))
    .unwrap();
    shb.create(&pp, &broken).await.unwrap();
    let failed = backup_status(&shb, "orphan", "failed run reported", |s| {
        ready(&s.conditions).is_some_and(|r| r.0 == "False")
    })
    .await;
    let msg = &failed.conditions[0].message;
    assert!(
        msg.contains("ShardhouseCluster backups/nosuch does not exist"),
        "{msg}"
    );
    assert_eq!(failed.last_backup, None);
    let warnings = events(&client, "orphan", "BackupFailed").await;
    assert!(
        warnings.iter().any(|n| n.contains("nosuch")),
        "{warnings:?}"
    );

    let mut bad = broken.clone();
    bad.metadata.name = Some("badcron".into());
    bad.metadata.annotations = None;
    bad.spec.schedule = "every night".into();
    shb.create(&pp, &bad).await.unwrap();
    let st = backup_status(&shb, "badcron", "invalid schedule reported", |s| {
        s.conditions.iter().any(|c| c.reason == "InvalidSchedule")
    })
    .await;
    assert_eq!(st.next_schedule_time, None);

    // --- restore into a new cluster of 1 node, once it runs
    let dst = LocalCluster::builder("dst")
        .nodes(1)
        .shards(SHARDS)
        .rf(1)
        .routers(1)
        .start()
        .expect("target cluster");
    dst.wait_leaders(Duration::from_secs(60)).await.unwrap();
    shc.create(&pp, &cluster_resource(&dst)).await.unwrap();
    let shr: Api<ShardhouseRestore> = Api::namespaced(client.clone(), NS);
    let restore = |name: &str| -> ShardhouseRestore {
        serde_json::from_value(json!({
            "apiVersion": "shardhouse.dev/v1alpha1",
            "kind": "ShardhouseRestore",
            "metadata": {"name": name},
            "spec": {"clusterRef": "dst", "source": url}
        }))
        .unwrap()
    };
    shr.create(&pp, &restore("from-nightly")).await.unwrap();
    // Nothing runs the cluster controller here: the cluster has no status
    // yet, so the restore waits for it.
    let waiting = restore_status(&shr, "from-nightly", "restore waiting", |s| {
        s.phase == RestorePhase::WaitingForCluster
    })
    .await;
    assert!(waiting.message.contains("dst"), "{waiting:?}");
    // The spec of a restore cannot change.
    let e = shr
        .patch(
            "from-nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"backupId": "other"}})),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("one-off"), "{e}");
    // As the cluster controller reports a cluster whose shards are all up.
    shc.patch_status(
        "dst",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"phase": "Running", "shardsHealthy": format!("{SHARDS}/{SHARDS}")}}),
        ),
    )
    .await
    .unwrap();
    let done = restore_status(&shr, "from-nightly", "restore finished", |s| {
        matches!(s.phase, RestorePhase::Succeeded | RestorePhase::Failed)
    })
    .await;
    tracing::info!("restore: {}", serde_json::to_string(&done).unwrap());
    assert_eq!(done.phase, RestorePhase::Succeeded, "{}", done.message);
    assert_eq!(done.backup_id.as_deref(), Some(id2.as_str()));
    assert_eq!(done.shards_restored, SHARDS);
    assert_eq!(done.shards, second.shards);
    assert!(done.completion_time.is_some() && done.start_time.is_some());
    assert!(!events(&client, "from-nightly", "RestoreSucceeded")
        .await
        .is_empty());
    for (m, n) in [("before", 300), ("after", 200)] {
        let got = eventually(
            &format!("{n} points of {m} in the restored cluster"),
            Duration::from_secs(60),
            || async {
                let c = count(&dst, m).await?;
                anyhow::Ok((c == n).then_some(c))
            },
        )
        .await
        .unwrap();
        assert_eq!(got, n);
    }

    // --- a second restore into the same, now non-empty, cluster is refused
    shr.create(&pp, &restore("again")).await.unwrap();
    let refused = restore_status(&shr, "again", "second restore refused", |s| {
        s.phase == RestorePhase::Failed
    })
    .await;
    assert!(refused.message.contains("not empty"), "{}", refused.message);
    assert!(!events(&client, "again", "RestoreFailed").await.is_empty());
    assert_eq!(count(&dst, "before").await.unwrap(), 300, "nothing changed");

    controller.abort();
}
