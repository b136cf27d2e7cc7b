//! The connection to a node's Backup service. A shard's backup or restore
//! is one long call, so this client gets a timeout and message limits of
//! its own rather than the short ones of `node_client`.

use std::time::Duration;

use anyhow::Context as _;
use shardhouse_common::credential::{with_credential, ClusterToken, CredentialChannel};
use shardhouse_common::proto::backup_client::BackupClient;
use tonic::transport::Endpoint;

use crate::node_client::CONNECT_TIMEOUT;

/// A shard's backup or restore may take long: bounded by this per call.
const SHARD_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
const MAX_MESSAGE: usize = 256 << 20;

pub(super) async fn backup_client(
    addr: &str,
    token: Option<&ClusterToken>,
) -> anyhow::Result<BackupClient<CredentialChannel>> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(SHARD_CALL_TIMEOUT)
        .connect()
        .await
        .with_context(|| format!("cannot reach node at {addr}"))?;
    Ok(BackupClient::new(with_credential(channel, token))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}
