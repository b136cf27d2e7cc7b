//! The one test on the wall clock: a WAL opened with the production tick
//! source elects and commits on its own. Every other test steps manual
//! clocks; this keeps the path production runs (poll threads ticking on
//! `tick_interval`) covered in this crate. Single node, 10 ms ticks: it
//! takes about 0.2 s.

use super::*;

#[test]
fn wall_clock_ticks_elect_and_commit_on_their_own() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut cfg = test_config(1, tmp.path().join("node1"));
    cfg.ticks = TickSource::WallClock;
    cfg.tick_interval = Duration::from_millis(10);
    let net = Arc::new(Net::new(vec![1], 1));
    let sm = Arc::new(MemSm::default());
    let wal = Wal::open(cfg, net.port(1), sm.clone())?;
    assert!(
        matches!(wal.tick(), Err(WalError::InvalidArgument(_))),
        "a wall-clock WAL accepted a manual tick"
    );
    wal.create_replica(1, &[1])?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let committed = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match wal.propose(1, b"tick-tock".to_vec()).await {
                    Err(WalError::NotLeader { .. }) => {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    }
                    other => return other,
                }
            }
        })
        .await
    })??;
    assert!(committed.index > 1);
    assert_eq!(sm.payloads(1), vec![b"tick-tock".to_vec()]);
    wal.shutdown();
    Ok(())
}
