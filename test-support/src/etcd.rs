//! A real single-member etcd on free loopback ports with its own data dir,
//! killed on drop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::ports::free_port;
use crate::process::{log_tail, Proc};

pub struct Etcd {
    // Killed on drop.
    _proc: Proc,
    /// `http://127.0.0.1:<port>`, the client URL.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd in its own temp dir; see [`spawn_etcd`].
    pub fn start() -> Result<Etcd> {
        let dir = crate::dirs::temp_dir("shardhouse-etcd")?;
        let (proc, endpoint) = spawn_etcd(dir.path())?;
        Ok(Etcd {
            _proc: proc,
            endpoint,
            dir,
        })
    }

    /// The end of etcd's log.
    pub fn log(&self) -> String {
        log_tail(&self.dir.path().join("etcd.log"), 20)
    }
}

/// Starts etcd with its data and `etcd.log` under `dir` and waits (up to
/// 20 s) until its client port accepts; returns it and its client URL.
/// A port taken between picking and binding it is picked again (up to
/// [`BIND_ATTEMPTS`] times): tests start many processes at once.
pub fn spawn_etcd(dir: &Path) -> Result<(Proc, String)> {
    let mut attempt = 1;
    loop {
        match spawn_etcd_once(dir) {
            Err(e) if attempt < BIND_ATTEMPTS && is_port_taken(&e) => attempt += 1,
            other => return other,
        }
    }
}

/// How many times [`spawn_etcd`] picks new ports when one was taken.
pub const BIND_ATTEMPTS: u32 = 5;

/// etcd's own words when a listen port is in use.
fn is_port_taken(e: &anyhow::Error) -> bool {
    format!("{e:#}").contains("address already in use")
}

fn spawn_etcd_once(dir: &Path) -> Result<(Proc, String)> {
    let client = free_port();
    let peer = std::iter::repeat_with(free_port)
        .find(|&p| p != client)
        .expect("a second free port");
    let endpoint = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let log_path = dir.join("etcd.log");
    let log = std::fs::File::create(&log_path)?;
    // A retry starts on a clean data dir: the failed member may have
    // written its first files.
    let _ = std::fs::remove_dir_all(dir.join("etcd-data"));
    let child = Command::new("etcd")
        .arg("--name")
        .arg("test")
        .arg("--data-dir")
        .arg(dir.join("etcd-data"))
        .args(["--listen-client-urls", &endpoint])
        .args(["--advertise-client-urls", &endpoint])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("test={peer_url}")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("etcd is not installed (apt-get install etcd-server, or `make deps`)")?;
    let mut proc = Proc {
        child,
        name: "etcd",
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
            return Ok((proc, endpoint));
        }
        if let Some(status) = proc.child.try_wait()? {
            bail!("etcd exited with {status}:\n{}", log_tail(&log_path, 20));
        }
        if Instant::now() > deadline {
            bail!(
                "etcd did not listen on {endpoint} within 20s:\n{}",
                log_tail(&log_path, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
