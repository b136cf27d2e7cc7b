//! A real control plane for tests: etcd + kube-apiserver (+ optionally
//! kube-controller-manager for garbage collection and StatefulSet pods),
//! started per test on free loopback ports and killed on drop.
//!
//! The binaries come from scripts/deps.d/kube.sh; a missing one fails the
//! test with the command that installs it.

#![allow(dead_code)]

use anyhow::{bail, Context as _};
use shardhouse_test_support::process::{log_tail, Proc};
use shardhouse_test_support::{free_port, Etcd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn cache_bin(name: &str) -> PathBuf {
    let cache = std::env::var("SHARDHOUSE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/shardhouse")
        });
    cache.join("bin").join(name)
}

pub fn require(path: &Path) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-deps.sh (scripts/deps.d/kube.sh builds it)",
        path.display()
    );
    path.to_path_buf()
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

pub struct ControlPlane {
    /// kube-apiserver and kube-controller-manager, killed on drop before
    /// the etcd they use.
    procs: Vec<Proc>,
    _etcd: Etcd,
    pub dir: tempfile::TempDir,
    pub etcd_url: String,
    pub api_url: String,
    pub kubeconfig: PathBuf,
    pub has_controller_manager: bool,
}

impl ControlPlane {
    /// The end of a process's log (`kube-apiserver`...).
    pub fn log_tail(&self, name: &str) -> String {
        log_tail(&self.dir.path().join(format!("{name}.log")), 30)
    }

    fn spawn(&mut self, name: &'static str, mut cmd: Command) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log")))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {name}"))?;
        self.procs.push(Proc { name, child });
        Ok(())
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for p in &mut self.procs {
            if let Some(status) = p.child.try_wait()? {
                bail!("{} exited with {status}", p.name);
            }
        }
        Ok(())
    }

    /// Starts etcd and kube-apiserver; with `controller_manager`, also
    /// kube-controller-manager (garbage collector, StatefulSet controller).
    pub async fn start(controller_manager: bool) -> anyhow::Result<ControlPlane> {
        let apiserver = require(&cache_bin("kube-apiserver"));
        let etcd = Etcd::start()?;
        let etcd_url = etcd.endpoint.clone();
        let dir = tempfile::tempdir()?;
        let d = dir.path().to_path_buf();
        let api_port = free_port();
        let mut cp = ControlPlane {
            procs: vec![],
            _etcd: etcd,
            dir,
            etcd_url: etcd_url.clone(),
            api_url: format!("https://127.0.0.1:{api_port}"),
            kubeconfig: d.join("kubeconfig"),
            has_controller_manager: false,
        };

        let key = d.join("sa.key");
        let pubkey = d.join("sa.pub");
        let ok = Command::new("openssl")
            .args(["genrsa", "-out", key.to_str().unwrap(), "2048"])
            .stderr(Stdio::null())
            .status()?
            .success()
            && Command::new("openssl")
                .args([
                    "rsa",
                    "-in",
                    key.to_str().unwrap(),
                    "-pubout",
                    "-out",
                    pubkey.to_str().unwrap(),
                ])
                .stderr(Stdio::null())
                .status()?
                .success();
        if !ok {
            bail!("openssl could not create the service account key");
        }
        let token = "shardhouse-test-token";
        std::fs::write(
            d.join("tokens.csv"),
            format!("{token},admin,admin,system:masters\n"),
        )?;

        let mut cmd = Command::new(apiserver);
        cmd.args([
            &format!("--etcd-servers={etcd_url}"),
            &format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--cert-dir={}", d.join("certs").display()),
            "--service-account-issuer=https://kubernetes.default.svc",
            &format!("--service-account-key-file={}", pubkey.display()),
            &format!("--service-account-signing-key-file={}", key.display()),
            &format!("--token-auth-file={}", d.join("tokens.csv").display()),
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--enable-priority-and-fairness=false",
        ]);
        cp.spawn("kube-apiserver", cmd)?;

        std::fs::write(
            &cp.kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\n\
                 users:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n    namespace: default\n\
                 current-context: test\n",
                cp.api_url
            ),
        )?;

        // Ready when /readyz answers 200 (etcd reachable, bootstrap done).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            cp.check_alive().with_context(|| {
                format!("control plane died:\n{}", cp.log_tail("kube-apiserver"))
            })?;
            let client = cp.client().await?;
            let req = http::Request::get("/readyz").body(Vec::new())?;
            if let Ok(text) = client.request_text(req).await {
                if text.trim() == "ok" {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready after 120s:\n{}",
                    cp.log_tail("kube-apiserver")
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        if controller_manager {
            let kcm = cache_bin("kube-controller-manager");
            if kcm.exists() {
                let mut cmd = Command::new(kcm);
                cmd.args([
                    &format!("--kubeconfig={}", cp.kubeconfig.display()),
                    "--controllers=garbagecollector,statefulset,deployment,replicaset,serviceaccount-token",
                    "--leader-elect=false",
                    "--secure-port=0",
                    &format!("--service-account-private-key-file={}", key.display()),
                ]);
                cp.spawn("kube-controller-manager", cmd)?;
                cp.has_controller_manager = true;
            }
        }
        Ok(cp)
    }

    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }
}
