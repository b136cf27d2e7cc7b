//! The generated CRDs are committed as generated, and the chart, Dockerfiles,
//! operator and binaries agree on image names, binary paths and ports.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use shardhouse_operator::crd::{self, ShardhouseCluster, DEFAULT_REGISTRY, DEFAULT_TAG};
use shardhouse_operator::resources::*;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The committed CRD of `plural` is crdgen's output, in both places.
fn assert_committed(plural: &str, crd: &CustomResourceDefinition) -> String {
    let generated = serde_yaml::to_string(crd).unwrap();
    for f in [
        format!("manifests/crds/{plural}.shardhouse.dev.yaml"),
        format!("charts/shardhouse/crds/{plural}.shardhouse.dev.yaml"),
    ] {
        assert!(
            read(&f) == generated,
            "{f} is stale: run operator/gen.sh and commit the result"
        );
    }
    generated
}

#[test]
fn committed_backup_and_restore_crds_match_the_rust_types() {
    let backup = assert_committed(crd::BACKUP_PLURAL, &crd::ShardhouseBackup::crd());
    assert!(backup.contains("- shb"));
    for col in ["Cluster", "Schedule", "Last Backup", "Last Success", "Next"] {
        assert!(
            backup.contains(&format!("name: {col}")),
            "printer column {col}"
        );
    }
    let restore = assert_committed(crd::RESTORE_PLURAL, &crd::ShardhouseRestore::crd());
    assert!(restore.contains("- shr"));
    assert!(restore.contains("a ShardhouseRestore is one-off"));
    // The chart's ClusterRole lets the operator watch both and write their
    // status and Events.
    let rbac = read("charts/shardhouse/templates/rbac.yaml");
    for r in [
        crd::BACKUP_PLURAL.to_string(),
        format!("{}/status", crd::BACKUP_PLURAL),
        crd::RESTORE_PLURAL.to_string(),
        format!("{}/status", crd::RESTORE_PLURAL),
    ] {
        assert!(rbac.contains(&format!("\"{r}\"")), "rbac.yaml lacks {r}");
    }
    let bundle = read("manifests/install.yaml");
    for plural in [crd::BACKUP_PLURAL, crd::RESTORE_PLURAL] {
        assert!(
            bundle.contains(&format!("name: {plural}.shardhouse.dev")),
            "manifests/install.yaml lacks the {plural} CRD: run operator/gen.sh"
        );
    }
}

#[test]
fn committed_crd_matches_the_rust_types() {
    let generated = assert_committed(crd::PLURAL, &ShardhouseCluster::crd());
    // The schema carries the rules the API server must enforce.
    for rule in [
        "self.replicationFactor % 2 == 1",
        "self.replicationFactor <= self.nodes.replicas",
        "self == oldSelf",
    ] {
        assert!(generated.contains(rule), "CRD lacks CEL rule {rule}");
    }
    for col in ["Phase", "Nodes", "Shards", "Age"] {
        assert!(
            generated.contains(&format!("name: {col}")),
            "printer column {col}"
        );
    }
    assert!(generated.contains("- shc"));
}

/// `(ENTRYPOINT binary, EXPOSE ports, cargo package, cargo bin)` of a Dockerfile.
fn dockerfile(name: &str) -> (String, Vec<i32>, String, Vec<String>) {
    let text = read(&format!("docker/{name}.Dockerfile"));
    let entry = text
        .lines()
        .find_map(|l| l.strip_prefix("ENTRYPOINT [\""))
        .and_then(|l| l.split('"').next())
        .unwrap_or_else(|| panic!("{name}: no ENTRYPOINT"))
        .to_string();
    let ports = text
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| l.split_whitespace().map(|p| p.parse::<i32>().unwrap()))
        .collect();
    let build = text
        .lines()
        .find(|l| l.contains("cargo build --release -p"))
        .unwrap_or_else(|| panic!("{name}: no cargo build"));
    let words: Vec<&str> = build.split_whitespace().collect();
    let pkg = words[words.iter().position(|w| *w == "-p").unwrap() + 1].to_string();
    let bins = words
        .windows(2)
        .filter(|w| w[0] == "--bin")
        .map(|w| w[1].to_string())
        .collect();
    assert!(
        text.contains("AS build") && text.contains("COPY --from=build"),
        "{name}: multi-stage"
    );
    (entry, ports, pkg, bins)
}

/// Binaries a workspace package declares (`[[bin]]` names, or the package
/// name for `src/main.rs`).
fn package_bins(manifest: &str) -> (String, Vec<String>) {
    let text = read(manifest);
    let doc: toml_like::Doc = toml_like::parse(&text);
    let dir = root().join(manifest).parent().unwrap().to_path_buf();
    let mut bins = doc.bins;
    if dir.join("src/main.rs").exists() && !bins.contains(&doc.package) {
        bins.push(doc.package.clone());
    }
    (doc.package, bins)
}

/// Just enough TOML reading for package and bin names.
mod toml_like {
    pub struct Doc {
        pub package: String,
        pub bins: Vec<String>,
    }
    pub fn parse(text: &str) -> Doc {
        let mut section = String::new();
        let mut package = String::new();
        let mut bins = vec![];
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
                continue;
            }
            if let Some(v) = line.strip_prefix("name = \"") {
                let v = v.trim_end_matches('"').to_string();
                match section.as_str() {
                    "[package]" => package = v,
                    "[[bin]]" => bins.push(v),
                    _ => {}
                }
            }
        }
        Doc { package, bins }
    }
}

#[test]
fn chart_dockerfiles_and_binaries_agree() {
    let values: serde_yaml::Value =
        serde_yaml::from_str(&read("charts/shardhouse/values.yaml")).unwrap();
    assert_eq!(values["image"]["registry"].as_str(), Some(DEFAULT_REGISTRY));
    assert_eq!(values["image"]["tag"].as_str(), Some(DEFAULT_TAG));
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&read("charts/shardhouse/Chart.yaml")).unwrap();
    assert_eq!(chart["appVersion"].as_str(), Some(DEFAULT_TAG));

    // operator image
    let (entry, ports, pkg, bins) = dockerfile("operator");
    assert_eq!(entry, "/usr/local/bin/shardhouse-operator");
    let deployment = read("charts/shardhouse/templates/deployment.yaml");
    assert!(deployment.contains(&format!("command: [\"{entry}\"]")));
    assert!(deployment.contains("/shardhouse-operator:{{ .Values.image.tag }}"));
    assert_eq!(
        ports,
        vec![values["operator"]["httpPort"].as_i64().unwrap() as i32]
    );
    let (opkg, obins) = package_bins("operator/Cargo.toml");
    assert_eq!(pkg, opkg);
    assert!(
        bins.iter().all(|b| obins.contains(b)),
        "{bins:?} vs {obins:?}"
    );

    // router image: what the operator's Deployment runs
    let (entry, ports, pkg, bins) = dockerfile("router");
    assert_eq!(entry, ROUTER_BINARY);
    assert_eq!(ports, vec![ROUTER_HTTP_PORT, ROUTER_GRPC_PORT]);
    let (rpkg, rbins) = package_bins("router/Cargo.toml");
    assert_eq!(pkg, rpkg);
    assert!(bins.iter().all(|b| rbins.contains(b)) && entry.ends_with(&format!("/{}", bins[0])));

    // node image
    let (entry, ports, pkg, bins) = dockerfile("node");
    assert_eq!(entry, NODE_BINARY);
    assert_eq!(ports, vec![NODE_GRPC_PORT, NODE_HTTP_PORT]);
    let (npkg, nbins) = package_bins("node/server/Cargo.toml");
    assert_eq!(pkg, npkg);
    assert!(bins.iter().all(|b| nbins.contains(b)) && entry.ends_with(&format!("/{}", bins[0])));
    let node_df = read("docker/node.Dockerfile");
    assert!(node_df.contains(&format!("ENV SHARDHOUSE_CHDB_DIR={NODE_CHDB_DIR}")));
    let deps = read("scripts/install-deps.sh");
    let chdb = deps
        .lines()
        .find_map(|l| l.strip_prefix("CHDB_VERSION="))
        .unwrap();
    assert!(
        node_df.contains(&format!("ARG CHDB_VERSION={chdb}")),
        "node image chdb-core version"
    );

    // image names the operator puts into pods
    let spec = shardhouse_operator::crd::ImageSpec::default();
    assert_eq!(
        spec.node(),
        format!("{DEFAULT_REGISTRY}/shardhouse-node:{DEFAULT_TAG}")
    );
    assert_eq!(
        spec.router(),
        format!("{DEFAULT_REGISTRY}/shardhouse-router:{DEFAULT_TAG}")
    );

    // ports recorded in docs/contracts.md
    let contracts = read("docs/contracts.md");
    for p in [
        ROUTER_HTTP_PORT,
        ROUTER_GRPC_PORT,
        NODE_GRPC_PORT,
        NODE_HTTP_PORT,
    ] {
        assert!(
            contracts.contains(&p.to_string()),
            "port {p} not in docs/contracts.md"
        );
    }
}

#[test]
fn example_clusters_parse_as_the_custom_resource() {
    for f in [
        "manifests/examples/small.yaml",
        "manifests/examples/large.yaml",
    ] {
        let c: ShardhouseCluster =
            serde_yaml::from_str(&read(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(
            c.spec.replication_factor % 2 == 1
                && c.spec.replication_factor as i32 <= c.spec.nodes.replicas
        );
    }
}

#[test]
fn example_backup_and_restore_parse_as_their_custom_resources() {
    let b: crd::ShardhouseBackup = serde_yaml::from_str(&read("manifests/examples/backup.yaml"))
        .unwrap_or_else(|e| panic!("backup.yaml: {e}"));
    shardhouse_operator::backup_schedule::Schedule::parse(&b.spec.schedule).unwrap();
    assert_eq!(b.spec.retention.map(|r| r.keep), Some(7));
    let r: crd::ShardhouseRestore = serde_yaml::from_str(&read("manifests/examples/restore.yaml"))
        .unwrap_or_else(|e| panic!("restore.yaml: {e}"));
    assert_eq!(r.spec.backup_id, None, "the newest backup");
}
