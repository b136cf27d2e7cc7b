//! Polling with deadlines: a test waits for a state, never for a fixed
//! time, and a timeout names what was awaited and the last error seen.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// Blocks until `ok()` holds, checking every 20 ms; an error names `what`
/// after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ok() {
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Polls `f` every 100 ms until it returns `Ok(Some(v))`. `Ok(None)` means
/// "not yet"; an error is kept as the last one seen and polling goes on.
/// After `timeout` the error names `what` and that last error.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if start.elapsed() > timeout {
            bail!("{what} not reached within {timeout:?}; last error: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_for_returns_once_the_condition_holds() {
        let mut n = 0;
        wait_for("three calls", Duration::from_secs(5), || {
            n += 1;
            n == 3
        })
        .unwrap();
        assert_eq!(n, 3);
    }

    #[test]
    fn wait_for_names_what_timed_out() {
        let e = wait_for("the impossible", Duration::from_millis(50), || false).unwrap_err();
        assert!(e.to_string().contains("the impossible"), "{e}");
    }

    #[tokio::test]
    async fn eventually_keeps_the_last_error() {
        let e = eventually::<(), _, _>("a value", Duration::from_millis(150), || async {
            bail!("refused")
        })
        .await
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("a value") && msg.contains("refused"), "{msg}");
    }

    #[tokio::test]
    async fn eventually_returns_the_value() {
        let mut calls = 0;
        let v = eventually("the second call", Duration::from_secs(5), || {
            calls += 1;
            let c = calls;
            async move { Ok((c >= 2).then_some(c)) }
        })
        .await
        .unwrap();
        assert_eq!(v, 2);
    }
}
