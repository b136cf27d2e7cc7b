//! The one way the operator and `shardhouse-ctl` reach a node's Admin gRPC:
//! every call presents the cluster credential (`x-shardhouse-cluster-token`)
//! when the cluster has one, so no caller can forget it.

use shardhouse_common::credential::{with_credential, ClusterToken, CredentialChannel};
use shardhouse_common::proto::admin_client::AdminClient;
use std::time::Duration;
use tonic::transport::Endpoint;

/// How long a connection attempt to a node may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// An Admin client for the node at `addr` (`host:port`) whose calls carry
/// `token`; `rpc_timeout` bounds each call.
pub async fn admin_client(
    addr: &str,
    token: Option<&ClusterToken>,
    rpc_timeout: Duration,
) -> Result<AdminClient<CredentialChannel>, tonic::transport::Error> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(rpc_timeout)
        .connect()
        .await?;
    Ok(AdminClient::new(with_credential(channel, token)))
}
