//! shardhouse-operator: the `ShardhouseCluster` custom resource, the
//! reconciler that turns it into Kubernetes objects, and the pure decision
//! functions it relies on (desired objects, shard move planning, rolling
//! upgrades, autoscaling, status), which `shardhouse-ctl` reuses against a
//! local cluster.

pub mod autoscale;
pub mod backoff;
pub mod backup;
pub mod backup_controller;
pub mod backup_schedule;
pub mod catch_up;
pub mod controller;
pub mod crd;
pub mod dashboards;
pub mod map_race;
pub mod metrics;
pub mod node_client;
pub mod planner;
pub mod rebalance;
pub mod resources;
pub mod status;
pub mod upgrade;

/// Everything that can go wrong in the operator and `shardhouse-ctl`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API call failed: {0} (the operator retries with backoff; check RBAC and the API server)")]
    Kube(#[from] kube::Error),

    #[error(
        "etcd at {endpoints} failed: {source} (check --etcd / spec.etcd and that etcd is running)"
    )]
    Etcd {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },

    #[error("shard map in etcd is not valid JSON: {0} (was it written by a different Shardhouse version?)")]
    ShardMapFormat(#[from] serde_json::Error),

    #[error("no shard map under {key}: start the nodes with --init-cluster first")]
    NoShardMap { key: String },

    #[error("shard map changed while applying a move (epoch {epoch}); re-run to plan against the new map")]
    ShardMapConflict { epoch: u64 },

    #[error("node {node_id} is not registered in etcd; wait until it is up, then retry")]
    UnknownNode { node_id: u64 },

    #[error("node {node_id} at {addr} refused {call} for shard {shard}: {message}")]
    Admin {
        node_id: u64,
        addr: String,
        call: &'static str,
        shard: u32,
        message: String,
    },

    #[error("cannot reach node {node_id} at {addr}: {message} (is the pod ready?)")]
    NodeUnreachable {
        node_id: u64,
        addr: String,
        message: String,
    },

    #[error("timed out after {secs}s waiting for {what}; the move is resumable, retry")]
    Timeout { what: String, secs: u64 },

    #[error(transparent)]
    Plan(#[from] planner::PlanError),

    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    #[error("object has no {0}; it must come from the API server")]
    MissingField(&'static str),

    #[error("cluster credential: {0}")]
    Credential(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl shardhouse_common::status::ErrorExt for Error {
    fn status_code(&self) -> shardhouse_common::status::StatusCode {
        use shardhouse_common::status::StatusCode as S;
        match self {
            // The API server, etcd or a node may answer on the next try;
            // a changed map or an unregistered node settles by itself.
            Error::Kube(_)
            | Error::Etcd { .. }
            | Error::ShardMapConflict { .. }
            | Error::UnknownNode { .. }
            | Error::Admin { .. }
            | Error::NodeUnreachable { .. }
            // A Secret named in the spec may be created later.
            | Error::Credential(_) => S::Unavailable,
            Error::Timeout { .. } => S::Timeout,
            Error::NoShardMap { .. } => S::NotFound,
            Error::Plan(_) | Error::MissingField(_) => S::InvalidArgument,
            Error::ShardMapFormat(_) | Error::Finalizer(_) => S::Internal,
        }
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;
    use shardhouse_common::status::{ErrorExt as _, StatusCode as S};

    #[test]
    fn each_error_has_one_status() {
        let table = [
            (Error::NoShardMap { key: "k".into() }, S::NotFound, false),
            (Error::ShardMapConflict { epoch: 3 }, S::Unavailable, true),
            (Error::UnknownNode { node_id: 2 }, S::Unavailable, true),
            (
                Error::Timeout {
                    what: "x".into(),
                    secs: 5,
                },
                S::Timeout,
                true,
            ),
            (
                Error::MissingField("metadata.name"),
                S::InvalidArgument,
                false,
            ),
        ];
        for (e, code, retry) in table {
            assert_eq!(e.status_code(), code, "{e}");
            assert_eq!(e.status_code().is_retryable(), retry, "{e}");
        }
    }
}

#[cfg(test)]
mod mock_api_tests;
