//! Kubernetes Events about a cluster (best effort).

use super::Context;
use crate::crd::ShardhouseCluster;
use crate::resources;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

pub(super) async fn publish(
    ctx: &Context,
    c: &ShardhouseCluster,
    type_: EventType,
    reason: &str,
    note: String,
) {
    publish_about(ctx, c, type_, reason, note, None).await
}

/// The node pod an upgrade step concerns, as an event's `related` object.
pub(super) fn node_pod_ref(c: &ShardhouseCluster, node_id: u64) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: c.namespace(),
        name: Some(format!(
            "{}-{}",
            resources::node_name(c),
            node_id.saturating_sub(1)
        )),
        ..Default::default()
    }
}

/// An event with a `related` object. The recorder folds events with the same
/// reason, action and objects into one series that keeps the first note, so
/// per-pod steps name their pod here or every pod after the first would be
/// reported as the first one (seen on a real cluster's rolling upgrade).
pub(super) async fn publish_about(
    ctx: &Context,
    c: &ShardhouseCluster,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: related,
    };
    // Events are best effort: a failure to record one must not fail the
    // reconcile that did the work.
    if let Err(e) = ctx.recorder.publish(&ev, &c.object_ref(&())).await {
        tracing::warn!(%e, reason, "could not publish event");
    }
}
