//! `shardhouse-ctl backup create|list|delete` and `shardhouse-ctl restore`:
//! one node call per shard (the nodes move the data), the manifest
//! assembled and written here, last. docs/operations.md, "Backups".
//!
//! The ShardhouseBackup and ShardhouseRestore controllers run the same
//! code, so it is a library with one module per job: `create` (a backup
//! run), `restore`, `progress` (the lines both print), `knobs` (what a
//! caller may ask for) and `node` (the node call both make); listing and
//! deleting backups only read and delete at the destination and stay here.

mod create;
mod knobs;
mod node;
mod progress;
mod restore;

use std::io::Write;

use shardhouse_backup::{retention, Destination, Manifest};

pub use create::{backup_sources, create, create_with};
pub use knobs::{max_bytes_per_sec, Knobs, Options, MIN_MB_PER_SEC};
pub use restore::{restore, restore_with};

use progress::mb;

/// One line per backup at `url`.
pub async fn list(url: &str, out: &mut (dyn Write + Send)) -> anyhow::Result<Vec<Manifest>> {
    let dest = Destination::open(url)?;
    let ms = dest.manifests().await?;
    writeln!(
        out,
        "{:<22} {:>6} {:>10} {:>12} {:>8}  cluster  index range",
        "id", "shards", "MB", "uploaded MB", "secs"
    )?;
    for m in &ms {
        let lo = m.shards.iter().map(|s| s.commit_index).min().unwrap_or(0);
        let hi = m.shards.iter().map(|s| s.commit_index).max().unwrap_or(0);
        writeln!(
            out,
            "{:<22} {:>6} {:>10.1} {:>12.1} {:>8.1}  {}  {lo}..{hi}",
            m.id,
            m.shards.len(),
            mb(m.stats.bytes),
            mb(m.stats.bytes_uploaded),
            m.finished_ms.saturating_sub(m.started_ms) as f64 / 1000.0,
            m.cluster
        )?;
    }
    Ok(ms)
}

/// Deletes backups by id, or all but the newest `keep`; an object a kept
/// backup names stays.
pub async fn delete(
    url: &str,
    ids: &[String],
    keep: Option<usize>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<retention::Plan> {
    let dest = Destination::open(url)?;
    let ms = dest.manifests().await?;
    let plan = match keep {
        Some(n) => retention::keep_newest(&ms, n),
        None => {
            for id in ids {
                anyhow::ensure!(ms.iter().any(|m| &m.id == id), "no backup {id} at {url}");
            }
            retention::delete_ids(&ms, ids)
        }
    };
    for id in &plan.delete_backups {
        dest.delete(&shardhouse_backup::manifest::manifest_key(id))
            .await?;
        writeln!(out, "deleted backup {id}")?;
    }
    for o in &plan.delete_objects {
        dest.delete(&o.key()).await?;
    }
    writeln!(
        out,
        "deleted {} backups and {} objects; kept {:?}",
        plan.delete_backups.len(),
        plan.delete_objects.len(),
        plan.keep_backups
    )?;
    Ok(plan)
}
