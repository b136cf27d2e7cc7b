//! The cluster credential of one cluster: the operator creates its Secret
//! when the spec names none, and reads the token to present it on its own
//! node calls (rebalance, leader transfers, rolls).

use crate::crd::ShardhouseCluster;
use crate::{resources, Error, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use shardhouse_common::credential::ClusterToken;
use std::io::Read;

/// The cluster's token, creating the operator-managed Secret first when it
/// is missing; None when the credential is off.
pub(super) async fn cluster_token(
    c: &ShardhouseCluster,
    client: &Client,
    ns: &str,
) -> Result<Option<ClusterToken>> {
    let Some((name, key)) = c.cluster_token_secret() else {
        return Ok(None);
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = match api.get_opt(&name).await? {
        Some(s) => s,
        None => {
            let Some(fresh) = resources::cluster_token_secret(c, &random_token()?) else {
                return Err(Error::Credential(format!(
                    "Secret {ns}/{name} named by spec.security.clusterToken.secretName of {} \
                     does not exist: create it with the key `{key}` (e.g. `kubectl create secret \
                     generic {name} --from-literal={key}=$(openssl rand -hex 32)`)",
                    c.name_any()
                )));
            };
            // Create, never apply: a Secret someone else wrote in between
            // wins, so every pod keeps seeing one token.
            match api.create(&PostParams::default(), &fresh).await {
                Ok(s) => s,
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    token_of(&secret, &name, &key).map(Some)
}

/// The token under `key`, from `data` (or `stringData` of an object that
/// did not pass through the API server).
fn token_of(secret: &Secret, name: &str, key: &str) -> Result<ClusterToken> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
        .ok_or_else(|| Error::Credential(format!("Secret {name} has no key `{key}`")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::Credential(format!("Secret {name} key `{key}` is not text")))?;
    ClusterToken::new(&text, &format!("Secret {name} key `{key}`"))
        .map_err(|e| Error::Credential(e.to_string()))
}

/// 32 random bytes as hex, from the kernel.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::Credential(format!("reading /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    #[test]
    fn tokens_are_random_hex_and_usable() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(ClusterToken::new(&a, "t").is_ok());
    }

    #[test]
    fn the_token_is_read_from_its_key_and_errors_name_the_secret() {
        let mut s = Secret::default();
        let e = token_of(&s, "ts-cluster-token", "token").unwrap_err();
        assert!(e.to_string().contains("ts-cluster-token"), "{e}");
        s.data = Some(BTreeMap::from([(
            "token".to_string(),
            ByteString(b"0123456789abcdef\n".to_vec()),
        )]));
        assert!(token_of(&s, "n", "token")
            .unwrap()
            .matches(b"0123456789abcdef"));
        s.data = Some(BTreeMap::from([(
            "token".to_string(),
            ByteString(b"short".to_vec()),
        )]));
        assert!(token_of(&s, "n", "token").is_err());
    }
}
