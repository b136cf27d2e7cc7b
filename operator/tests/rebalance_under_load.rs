//! Shards move while writes keep coming (issue 16, the short variant of
//! `make chaos`'s rebalance-under-load scenario): a real 4-node RF=3
//! cluster with a router; node 4 is drained with the planner and the
//! executor `shardhouse-ctl rebalance` uses, then filled again, while an
//! open-model load writes through the router and records every
//! acknowledged request. Every write must be acknowledged (429/503 resent,
//! as any client does) and every acknowledged point found afterwards.

use shardhouse_loadtest::ack::{self, AckLoadOptions};
use shardhouse_loadtest::target::{Target, TargetOptions};
use shardhouse_operator::planner::{self, Move};
use shardhouse_operator::rebalance::{ClusterMeta, Executor};
use shardhouse_test_support::LocalCluster;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Plans the moves onto `nodes` and runs them all; returns how many.
async fn rebalance(exec: &mut Executor, nodes: &[u64]) -> anyhow::Result<usize> {
    let (map, _) = exec
        .meta
        .shard_map()
        .await?
        .ok_or_else(|| anyhow::anyhow!("no shard map"))?;
    let moves: Vec<Move> = planner::plan(&map, nodes)?;
    for (i, mv) in moves.iter().enumerate() {
        exec.execute(mv)
            .await
            .map_err(|e| anyhow::anyhow!("move {} of {} ({mv:?}): {e}", i + 1, moves.len()))?;
    }
    Ok(moves.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_move_while_every_write_is_acknowledged_and_kept() -> anyhow::Result<()> {
    let t_start = Instant::now();
    let c = LocalCluster::builder("rebalance-load")
        .nodes(4)
        .shards(4)
        .rf(3)
        .routers(1)
        .start()?;
    c.wait_leaders(Duration::from_secs(60)).await?;
    let target = Target::connect(&TargetOptions {
        url: c.router_url(),
        grpc_url: None,
        timeout: Duration::from_secs(10),
        auth_token: None,
        max_connections: 32,
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let ack_log = dir.path().join("acks.log");
    let opts = AckLoadOptions {
        measurement: "rebalance_load".into(),
        series: 32,
        rate: 20.0,
        batch: 500,
        duration: Duration::from_secs(600),
        stop_file: None,
        max_inflight: 32,
        ack_log: ack_log.clone(),
        write_path: "/write?db=shardhouse".into(),
        retries: 8,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (target, opts, stop) = (target.clone(), opts.clone(), stop.clone());
        tokio::spawn(async move { ack::ack_load(&target, &opts, stop).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    let meta = ClusterMeta::connect(std::slice::from_ref(&c.etcd.endpoint), &c.name).await?;
    let mut exec = Executor::new(meta);
    exec.catch_up_timeout = Duration::from_secs(60);
    let t_moves = Instant::now();
    let drained = rebalance(&mut exec, &[1, 2, 3]).await?;
    let (map, _) = exec.meta.shard_map().await?.expect("map");
    assert!(
        drained > 0,
        "node 4 held replicas, so draining it moves some"
    );
    assert_eq!(planner::replicas_on(&map, 4), 0, "node 4 drained: {map:?}");
    let filled = rebalance(&mut exec, &[1, 2, 3, 4]).await?;
    let (map, _) = exec.meta.shard_map().await?.expect("map");
    assert!(planner::replicas_on(&map, 4) > 0, "node 4 filled: {map:?}");
    let moves_secs = t_moves.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let s = load.await??;

    let p95 = s.percentile_ms(95.0).unwrap_or(f64::NAN);
    eprintln!(
        "moves={} secs={moves_secs:.1} retries={} acked_points={} failed={} retried={:?} p95_ms={p95:.1}",
        drained + filled,
        exec.retries,
        s.acked_points,
        s.failed(),
        s.retried
    );
    assert!(s.acked_points > 0, "nothing acknowledged: {s:?}");
    assert_eq!(
        s.failed(),
        0,
        "writes failed during the moves: {:?}",
        s.errors
    );
    assert_eq!(s.dropped, 0, "the load fell behind: {s:?}");
    let v = ack::verify(&target, "shardhouse", &ack_log, Duration::from_secs(30)).await?;
    assert_eq!(v.acked, s.acked_points);
    assert!(v.ok(), "acknowledged points missing or doubled: {v:?}");
    eprintln!("total {:.1} s", t_start.elapsed().as_secs_f64());
    Ok(())
}
