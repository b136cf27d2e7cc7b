//! Locked doors in the pods: the cluster-credential Secret the operator
//! generates, and the Secret volumes, files and flags that turn on the
//! credential (nodes and routers), the routers' TLS and their tokens file.
//!
//! Everything is mounted as a directory of files, not as env vars or
//! `subPath`s, so a rotated Secret reaches the running process (the router
//! reloads its certificate and tokens file when they change).

use super::{from_json, meta};
use crate::crd::ShardhouseCluster;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{json, Value};

/// Where the Secrets are mounted in the pods.
pub const CLUSTER_TOKEN_DIR: &str = "/etc/shardhouse/cluster-token";
pub const ROUTER_TLS_DIR: &str = "/etc/shardhouse/tls";
pub const TOKENS_DIR: &str = "/etc/shardhouse/tokens";
/// The key of `spec.security.tokensSecret` holding the `[[tokens]]` tables.
pub const TOKENS_KEY: &str = "tokens.toml";

/// The Secret the operator creates when the credential is on and the spec
/// names none: created once with `token` (random, from the caller) and
/// never rewritten, so a restart of the operator keeps the cluster's token.
pub fn cluster_token_secret(c: &ShardhouseCluster, token: &str) -> Option<Secret> {
    let t = &c.spec.security.cluster_token;
    if t.secret_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return None;
    }
    let (name, key) = c.cluster_token_secret()?;
    Some(from_json(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": meta(c, name, "cluster-token"),
        "type": "Opaque",
        "stringData": { key: token },
    })))
}

/// What a pod template gains: volumes, the container's mounts, and env.
#[derive(Debug, Default)]
pub(super) struct Mounts {
    pub volumes: Vec<Value>,
    pub mounts: Vec<Value>,
    pub env: Vec<Value>,
}

impl Mounts {
    fn secret(&mut self, volume: &str, secret: &str, dir: &str) {
        self.volumes.push(json!({
            "name": volume,
            // Readable by the pod's group (its fsGroup) only.
            "secret": {"secretName": secret, "defaultMode": 0o440},
        }));
        self.mounts
            .push(json!({"name": volume, "mountPath": dir, "readOnly": true}));
    }

    fn env(&mut self, name: &str, value: String) {
        self.env.push(json!({"name": name, "value": value}));
    }
}

/// The credential a node requires and presents to its peers.
pub(super) fn node_mounts(c: &ShardhouseCluster) -> Mounts {
    let mut m = Mounts::default();
    if let Some((secret, key)) = c.cluster_token_secret() {
        m.secret("cluster-token", &secret, CLUSTER_TOKEN_DIR);
        m.env(
            "SHARDHOUSE_NODE_CLUSTER_TOKEN_FILE",
            format!("{CLUSTER_TOKEN_DIR}/{key}"),
        );
    }
    m
}

/// The credential a router presents to nodes, its TLS pair and its tokens.
pub(super) fn router_mounts(c: &ShardhouseCluster) -> Mounts {
    let mut m = Mounts::default();
    let s = &c.spec.security;
    if let Some((secret, key)) = c.cluster_token_secret() {
        m.secret("cluster-token", &secret, CLUSTER_TOKEN_DIR);
        m.env(
            "SHARDHOUSE_ROUTER_CLUSTER_TOKEN_FILE",
            format!("{CLUSTER_TOKEN_DIR}/{key}"),
        );
    }
    if let Some(secret) = named(&s.router_tls_secret) {
        m.secret("tls", secret, ROUTER_TLS_DIR);
        m.env(
            "SHARDHOUSE_ROUTER_TLS_CERT_FILE",
            format!("{ROUTER_TLS_DIR}/tls.crt"),
        );
        m.env(
            "SHARDHOUSE_ROUTER_TLS_KEY_FILE",
            format!("{ROUTER_TLS_DIR}/tls.key"),
        );
    }
    if let Some(secret) = named(&s.tokens_secret) {
        m.secret("tokens", secret, TOKENS_DIR);
        m.env(
            "SHARDHOUSE_ROUTER_TOKENS_FILE",
            format!("{TOKENS_DIR}/{TOKENS_KEY}"),
        );
    }
    m
}

/// A Secret name from the spec; an empty one (a blank chart value) is none.
fn named(name: &Option<String>) -> Option<&str> {
    name.as_deref().filter(|n| !n.is_empty())
}

/// The probes' scheme: the kubelet speaks TLS (without verifying) to a
/// router that serves it.
pub(super) fn router_probe_scheme(c: &ShardhouseCluster) -> &'static str {
    if named(&c.spec.security.router_tls_secret).is_some() {
        "HTTPS"
    } else {
        "HTTP"
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::cluster;
    use super::super::{desired, Decisions};
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn pods(c: &ShardhouseCluster) -> (PodSpec, PodSpec) {
        let d = desired(
            c,
            &Decisions {
                node_replicas: 3,
                service_monitor: false,
            },
        );
        let pod = |t: Option<PodSpec>| t.unwrap();
        (
            pod(d.nodes.spec.unwrap().template.spec),
            pod(d.routers.spec.unwrap().template.spec),
        )
    }

    fn env<'a>(ctr: &'a Container, name: &str) -> Option<&'a str> {
        ctr.env
            .as_ref()?
            .iter()
            .find(|e| e.name == name)?
            .value
            .as_deref()
    }

    fn secret_volume(pod: &PodSpec, volume: &str) -> Option<String> {
        pod.volumes
            .as_ref()?
            .iter()
            .find(|v| v.name == volume)?
            .secret
            .as_ref()?
            .secret_name
            .clone()
    }

    fn mounted_at(ctr: &Container, volume: &str) -> Option<String> {
        ctr.volume_mounts
            .as_ref()?
            .iter()
            .find(|m| m.name == volume)
            .map(|m| m.mount_path.clone())
    }

    #[test]
    fn the_credential_is_on_by_default_in_a_generated_secret_mounted_as_a_file() {
        let c = cluster("ts");
        let s = cluster_token_secret(&c, "0123456789abcdef0123").unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("ts-cluster-token"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1",
            "deleted with the cluster"
        );
        assert_eq!(
            s.string_data.as_ref().unwrap()["token"],
            "0123456789abcdef0123"
        );
        let (node, router) = pods(&c);
        for (pod, var) in [
            (&node, "SHARDHOUSE_NODE_CLUSTER_TOKEN_FILE"),
            (&router, "SHARDHOUSE_ROUTER_CLUSTER_TOKEN_FILE"),
        ] {
            let ctr = &pod.containers[0];
            assert_eq!(
                secret_volume(pod, "cluster-token").as_deref(),
                Some("ts-cluster-token")
            );
            assert_eq!(
                mounted_at(ctr, "cluster-token").as_deref(),
                Some(CLUSTER_TOKEN_DIR)
            );
            assert_eq!(
                env(ctr, var),
                Some("/etc/shardhouse/cluster-token/token"),
                "{var}"
            );
            let as_env = ctr.env.as_ref().unwrap().iter().any(|e| {
                e.value_from
                    .as_ref()
                    .is_some_and(|v| v.secret_key_ref.is_some())
                    && e.name.contains("CLUSTER_TOKEN")
            });
            assert!(!as_env, "the token is a file, not an env var");
        }
        assert_eq!(
            router.security_context.as_ref().unwrap().fs_group,
            Some(65532),
            "the router's user can read the 0440 Secret files"
        );
    }

    #[test]
    fn a_named_secret_is_used_as_is_and_off_means_nothing_mounted() {
        let mut c = cluster("ts");
        c.spec.security.cluster_token.secret_name = Some(String::new());
        assert!(
            cluster_token_secret(&c, "0123456789abcdef").is_some(),
            "a blank name (chart default) means generate"
        );
        c.spec.security.cluster_token.secret_name = Some("mine".into());
        c.spec.security.cluster_token.key = "k".into();
        assert!(cluster_token_secret(&c, "0123456789abcdef").is_none());
        let (node, _) = pods(&c);
        assert_eq!(
            secret_volume(&node, "cluster-token").as_deref(),
            Some("mine")
        );
        assert_eq!(
            env(&node.containers[0], "SHARDHOUSE_NODE_CLUSTER_TOKEN_FILE"),
            Some("/etc/shardhouse/cluster-token/k")
        );

        c.spec.security.cluster_token.enabled = false;
        assert!(cluster_token_secret(&c, "0123456789abcdef").is_none());
        let (node, router) = pods(&c);
        assert!(secret_volume(&node, "cluster-token").is_none());
        assert!(env(
            &router.containers[0],
            "SHARDHOUSE_ROUTER_CLUSTER_TOKEN_FILE"
        )
        .is_none());
        let mounts: Vec<_> = node.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(mounts, ["data"]);
    }

    #[test]
    fn router_tls_and_tokens_come_from_their_secrets() {
        let mut c = cluster("ts");
        let (_, plain) = pods(&c);
        let probe = |p: &PodSpec| {
            p.containers[0]
                .readiness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .scheme
                .clone()
        };
        assert_eq!(probe(&plain).as_deref(), Some("HTTP"));
        c.spec.security.router_tls_secret = Some("ts-tls".into());
        c.spec.security.tokens_secret = Some("ts-tokens".into());
        let (node, router) = pods(&c);
        let ctr = &router.containers[0];
        assert_eq!(secret_volume(&router, "tls").as_deref(), Some("ts-tls"));
        assert_eq!(mounted_at(ctr, "tls").as_deref(), Some(ROUTER_TLS_DIR));
        assert_eq!(
            env(ctr, "SHARDHOUSE_ROUTER_TLS_CERT_FILE"),
            Some("/etc/shardhouse/tls/tls.crt")
        );
        assert_eq!(
            env(ctr, "SHARDHOUSE_ROUTER_TLS_KEY_FILE"),
            Some("/etc/shardhouse/tls/tls.key")
        );
        assert_eq!(
            secret_volume(&router, "tokens").as_deref(),
            Some("ts-tokens")
        );
        assert_eq!(
            env(ctr, "SHARDHOUSE_ROUTER_TOKENS_FILE"),
            Some("/etc/shardhouse/tokens/tokens.toml")
        );
        assert_eq!(probe(&router).as_deref(), Some("HTTPS"));
        assert!(
            secret_volume(&node, "tls").is_none(),
            "the router's certificate stays with the routers"
        );
    }
}
