//! Status writes for both resources. Apart from the reconcilers because
//! both share them and because the rule about a lagging watch (`Fresh`)
//! is easier to check in one place than at each call.

use super::{namespace, Context};
use crate::crd::{
    ShardhouseBackup, ShardhouseBackupStatus, ShardhouseRestore, ShardhouseRestoreStatus, GROUP,
    VERSION,
};
use crate::resources::MANAGER;
use crate::Result;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::time::Duration;

/// How a status write relates to the object it was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fresh {
    /// Computed from the object as the watch showed it, which may lag our
    /// own last write: applied only if the object is still that version.
    Checked,
    /// The outcome of a backup or restore: applied whatever changed.
    Result,
}

/// Pause before looking again when the watch had not caught up.
pub(super) const STALE_RETRY: Duration = Duration::from_secs(2);

/// Writes `status` with server-side apply; false when `Fresh::Checked`
/// found a newer object (then nothing was written).
async fn write_status<K>(
    ctx: &Context,
    obj: &K,
    kind: &str,
    status: serde_json::Value,
    fresh: Fresh,
) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let ns = namespace(obj)?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let mut patch = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": kind,
        "status": status,
    });
    if fresh == Fresh::Checked {
        patch["metadata"] = json!({"resourceVersion": obj.resource_version()});
    }
    match api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn write_backup_status(
    ctx: &Context,
    b: &ShardhouseBackup,
    mut st: ShardhouseBackupStatus,
    fresh: Fresh,
) -> Result<bool> {
    st.observed_generation = b.metadata.generation;
    write_status(
        ctx,
        b,
        "ShardhouseBackup",
        serde_json::to_value(&st)?,
        fresh,
    )
    .await
}

pub(super) async fn write_restore_status(
    ctx: &Context,
    r: &ShardhouseRestore,
    st: &ShardhouseRestoreStatus,
    fresh: Fresh,
) -> Result<bool> {
    write_status(
        ctx,
        r,
        "ShardhouseRestore",
        serde_json::to_value(st)?,
        fresh,
    )
    .await
}
