//! Prints a CRD as YAML (`manifests/crds/` is this output; a test fails
//! when they differ): `crdgen` the ShardhouseCluster CRD, `crdgen PLURAL`
//! the one named (`shardhouseclusters`, `shardhousebackups`,
//! `shardhouserestores`).
use kube::CustomResourceExt;
use shardhouse_operator::crd;

fn main() -> anyhow::Result<()> {
    let plural = std::env::args().nth(1);
    let crd = match plural.as_deref().unwrap_or(crd::PLURAL) {
        p if p == crd::PLURAL => crd::ShardhouseCluster::crd(),
        p if p == crd::BACKUP_PLURAL => crd::ShardhouseBackup::crd(),
        p if p == crd::RESTORE_PLURAL => crd::ShardhouseRestore::crd(),
        other => anyhow::bail!(
            "unknown CRD {other:?}: {}, {} or {}",
            crd::PLURAL,
            crd::BACKUP_PLURAL,
            crd::RESTORE_PLURAL
        ),
    };
    let yaml = serde_yaml::to_string(&crd)?;
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, yaml.as_bytes())?;
    Ok(())
}
