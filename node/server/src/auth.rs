//! The node's side of the cluster credential (see
//! `shardhouse_common::credential`): every gRPC service (Node, Raft, Admin)
//! sits behind [`RequireCredential`], and the node's own calls to peers
//! present the same token.

use shardhouse_common::credential::{
    with_credential, ClusterToken, CredentialChannel, METADATA_KEY,
};
use shardhouse_common::proto::admin_client::AdminClient;
use std::time::Duration;
use tonic::service::Interceptor;
use tonic::transport::Endpoint;
use tonic::{Request, Status};

/// Refuses calls that do not present the cluster token; lets everything
/// through when the node has none configured.
#[derive(Clone, Debug, Default)]
pub struct RequireCredential {
    token: Option<ClusterToken>,
}

impl RequireCredential {
    pub fn new(token: Option<ClusterToken>) -> RequireCredential {
        RequireCredential { token }
    }
}

impl Interceptor for RequireCredential {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let presented = req.metadata().get(METADATA_KEY).map(|v| v.as_bytes());
        check(self.token.as_ref(), presented)?;
        Ok(req)
    }
}

/// The decision: `UNAUTHENTICATED` naming the credential that is missing or
/// wrong, so whoever reads the caller's log knows what to configure.
pub fn check(expected: Option<&ClusterToken>, presented: Option<&[u8]>) -> Result<(), Status> {
    let Some(expected) = expected else {
        return Ok(());
    };
    match presented {
        None => Err(Status::unauthenticated(format!(
            "this node requires the cluster credential: send the `{METADATA_KEY}` metadata \
             (routers, nodes, the operator and shardhouse-ctl read it from \
             --cluster-token-file or {})",
            shardhouse_common::credential::ENV_VAR
        ))),
        Some(p) if expected.matches(p) => Ok(()),
        Some(_) => Err(Status::unauthenticated(format!(
            "the cluster credential in `{METADATA_KEY}` does not match this node's: give every \
             router, node, operator and shardhouse-ctl the same cluster token"
        ))),
    }
}

/// An Admin client for a peer node, presenting the credential.
pub async fn peer_admin_client(
    token: Option<&ClusterToken>,
    addr: &str,
) -> Result<AdminClient<CredentialChannel>, tonic::transport::Error> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await?;
    Ok(AdminClient::new(with_credential(channel, token)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_without_a_token_and_names_what_is_missing_with_one() {
        assert!(check(None, None).is_ok());
        assert!(check(None, Some(b"anything")).is_ok());
        let t = ClusterToken::new("0123456789abcdef", "test").unwrap();
        let missing = check(Some(&t), None).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::Unauthenticated);
        assert!(missing.message().contains(METADATA_KEY), "{missing:?}");
        assert!(missing.message().contains("--cluster-token-file"));
        let wrong = check(Some(&t), Some(b"0123456789abcdeX")).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(wrong.message().contains("does not match"), "{wrong:?}");
        assert!(check(Some(&t), Some(b"0123456789abcdef")).is_ok());
    }

    #[test]
    fn the_interceptor_reads_the_metadata() {
        let t = ClusterToken::new("0123456789abcdef", "test").unwrap();
        let mut gate = RequireCredential::new(Some(t));
        assert!(gate.call(Request::new(())).is_err());
        let mut req = Request::new(());
        req.metadata_mut()
            .insert(METADATA_KEY, "0123456789abcdef".parse().unwrap());
        assert!(gate.call(req).is_ok());
    }
}
