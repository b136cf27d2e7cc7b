//! A real single-member etcd on free loopback ports with its own data dir,
//! killed on drop.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::ports::free_port;
use crate::process::{log_tail, Proc};

pub struct Etcd {
    proc: Proc,
    /// `http://127.0.0.1:<port>`, the client URL.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd and waits (up to 20 s) until its client port accepts.
    pub fn start() -> Result<Etcd> {
        let dir = crate::dirs::temp_dir("shardhouse-etcd")?;
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg("test")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("test={peer_url}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("etcd is not installed (apt-get install etcd-server, or `make deps`)")?;
        let mut etcd = Etcd {
            proc: Proc {
                child,
                name: "etcd",
            },
            endpoint,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                return Ok(etcd);
            }
            if let Some(status) = etcd.proc.child.try_wait()? {
                bail!("etcd exited with {status}:\n{}", etcd.log());
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd did not listen on {} within 20s:\n{}",
                    etcd.endpoint,
                    etcd.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The end of etcd's log.
    pub fn log(&self) -> String {
        log_tail(&self.dir.path().join("etcd.log"), 20)
    }
}
