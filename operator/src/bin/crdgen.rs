//! Prints the ShardhouseCluster CRD as YAML (`manifests/crds/` is this output;
//! a test fails when they differ).
use kube::CustomResourceExt;

fn main() -> anyhow::Result<()> {
    let yaml = serde_yaml::to_string(&shardhouse_operator::crd::ShardhouseCluster::crd())?;
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, yaml.as_bytes())?;
    Ok(())
}
