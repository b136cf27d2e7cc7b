//! Child processes that announce themselves with a `READY k=v ...` line on
//! stdout (node and router binaries) and die with kill -9 on drop: tests
//! must not depend on a graceful shutdown.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

/// How long a process may take to print its READY line (chDB loads first).
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// A child killed with SIGKILL (and reaped) on drop.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, SIGTERM...) to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on a pid this process spawned and has not reaped.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(mut self) -> Result<std::process::ExitStatus> {
        self.signal(libc::SIGTERM);
        Ok(self.child.wait()?)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A stopped process must run again to die promptly.
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `n` lines of a log, for error messages.
pub fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Spawns `cmd` with stderr appended to `log` and waits for its READY line,
/// which it returns. A process that exits or stays silent fails with the
/// end of its log.
pub fn spawn_ready(mut cmd: Command, name: &'static str, log: PathBuf) -> Result<(Proc, String)> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("open {}", log.display()))?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .with_context(|| format!("spawning {name}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("READY ") {
                let _ = tx.send(line);
            }
        }
    });
    let proc = Proc { child, name };
    let line = rx.recv_timeout(READY_TIMEOUT).map_err(|_| {
        anyhow!(
            "{name} exited or printed no READY line within {READY_TIMEOUT:?}; {} ends:\n{}",
            log.display(),
            log_tail(&log, 15)
        )
    })?;
    Ok((proc, line))
}

/// The value of `key=` in a READY line.
pub fn ready_field(line: &str, key: &str) -> Result<String> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=').map(str::to_owned))
        .ok_or_else(|| anyhow!("READY line without {key}: {line}"))
}

/// A workspace binary (`shardhouse-node`, `shardhouse-router`): in `dir`
/// when given, else next to the running executable or one level up (tests
/// and benches run from `target/release/deps`), else in `$SHARDHOUSE_BIN`.
pub fn workspace_binary(name: &str, dir: Option<&Path>) -> Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(d) = dir {
        candidates.push(d.join(name));
    } else {
        if let Ok(exe) = std::env::current_exe() {
            if let Some(parent) = exe.parent() {
                candidates.push(parent.join(name));
                if let Some(up) = parent.parent() {
                    candidates.push(up.join(name));
                }
            }
        }
        if let Some(bin) = std::env::var_os("SHARDHOUSE_BIN") {
            candidates.push(PathBuf::from(bin).join(name));
        }
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "{name} not found (looked at {candidates:?}): build it first with `cargo build --release -p {name} --bins`"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_fields_are_found_by_exact_key() {
        let line = "READY grpc=127.0.0.1:1 grpc_x=no http=127.0.0.1:2";
        assert_eq!(ready_field(line, "grpc").unwrap(), "127.0.0.1:1");
        assert_eq!(ready_field(line, "http").unwrap(), "127.0.0.1:2");
        assert!(ready_field(line, "pid").is_err());
    }

    #[test]
    fn a_silent_process_fails_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo boom >&2; exit 3"]);
        let e = spawn_ready(cmd, "sh", dir.path().join("sh.log")).unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
    }
}
