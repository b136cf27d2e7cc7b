//! The layouts compared and their ingest: rows/s, CPU per row, merges.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use arrow_array::RecordBatch;
use shardhouse_engine::pool::Pool;
use shardhouse_engine::Engine;
use shardhouse_test_support::measure::{loadavg, process_cpu_s, CpuSplit};

use crate::data::{fact_schema, Data};
use crate::{exec, scalar_u64, ANY_LAST, FIELDS, SERIES_DDL};

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    /// (a): tags as `LowCardinality(String)` columns, anyLast fields.
    Columns,
    /// (b): narrow fact table with anyLast fields, tags in `_series`.
    Index,
    /// (b) with today's fact table: ReplacingMergeTree, plain Nullable fields.
    IndexReplacing,
}

pub(crate) struct Layout {
    pub(crate) kind: Kind,
    /// Machine-readable name.
    pub(crate) key: &'static str,
    pub(crate) name: &'static str,
    pub(crate) db: &'static str,
}

pub(crate) const LAYOUTS: [Layout; 3] = [
    Layout {
        kind: Kind::Columns,
        key: "tags_as_columns",
        name: "(a) tags as columns (AggregatingMergeTree, anyLast)",
        db: "tl_columns",
    },
    Layout {
        kind: Kind::Index,
        key: "tag_index",
        name: "(b) tag index (AggregatingMergeTree, anyLast) + _series",
        db: "tl_index",
    },
    Layout {
        kind: Kind::IndexReplacing,
        key: "tag_index_replacing",
        name: "(b) tag index, fact as today (ReplacingMergeTree, Nullable) + _series",
        db: "tl_index_rmt",
    },
];

impl Layout {
    pub(crate) fn tag_index(&self) -> bool {
        self.kind != Kind::Columns
    }

    pub(crate) fn ddl(&self) -> Vec<String> {
        let (engine, field_type) = match self.kind {
            Kind::IndexReplacing => ("ReplacingMergeTree", "Nullable(Float64)"),
            _ => ("AggregatingMergeTree", ANY_LAST),
        };
        let tags = if self.tag_index() {
            ""
        } else {
            "host LowCardinality(String), region LowCardinality(String), rack LowCardinality(String), "
        };
        let fields: Vec<String> = FIELDS.iter().map(|f| format!("{f} {field_type}")).collect();
        // chDB 26.9 refuses AggregatingMergeTree columns that are neither in
        // the sorting key nor aggregates unless allowed: tags are, as the
        // series key, a function of series_id, so any row's value is right.
        let settings = if self.kind == Kind::Columns {
            " SETTINGS allow_dimensions_outside_sorting_key = 1"
        } else {
            ""
        };
        let mut out = vec![
            format!("DROP DATABASE IF EXISTS {} SYNC", self.db),
            format!("CREATE DATABASE {}", self.db),
            format!(
                "CREATE TABLE {}.cpu (time DateTime64(9), series_id UInt64, {tags}{}) ENGINE = {engine} ORDER BY (series_id, time){settings}",
                self.db,
                fields.join(", ")
            ),
        ];
        if self.tag_index() {
            out.push(format!("CREATE TABLE {}._series {SERIES_DDL}", self.db));
        }
        out
    }
}

pub(crate) struct IngestFigures {
    pub(crate) wall_s: f64,
    pub(crate) cpu_ns_row: f64,
    /// Of `cpu_ns_row`: chDB's background merge threads during the inserts.
    pub(crate) bg_merge_ns_row: f64,
    pub(crate) parts_after: u64,
    pub(crate) optimize_s: f64,
    pub(crate) merge_cpu_ns_row: f64,
    pub(crate) bytes: u64,
    /// Of `bytes`: the `_series` table.
    pub(crate) series_bytes: u64,
    /// The machine's 1-minute load average before the inserts (noise).
    pub(crate) load_before: String,
}

pub(crate) fn wait_for_merges(engine: &Engine) -> Result<()> {
    let t0 = Instant::now();
    while scalar_u64(engine, "SELECT toUInt64(count()) FROM system.merges")? > 0 {
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("background merges still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

pub(crate) fn active_parts(engine: &Engine, db: &str, table: &str) -> Result<u64> {
    scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM system.parts WHERE active AND database = '{db}' AND table = '{table}'"),
    )
}

/// Inserts every batch on one connection (series rows right after the fact
/// rows that first carry them, as a flush does), then `OPTIMIZE ... FINAL`
/// until one part is left (timed separately: the merge cost).
pub(crate) fn ingest(engine: &Engine, layout: &Layout, data: &Data) -> Result<IngestFigures> {
    let pool: &Pool = engine.pool();
    for sql in layout.ddl() {
        exec(pool, &sql)?;
    }
    wait_for_merges(engine)?;
    let schema = fact_schema(!layout.tag_index());
    let db = layout.db;
    let load_before = loadavg().split(' ').next().unwrap_or_default().to_string();
    let (cpu0, split0, t0) = (process_cpu_s(), CpuSplit::now(), Instant::now());
    {
        let mut conn = pool.get();
        let mut series_done = vec![false; data.chunks.len()];
        for f in &data.facts {
            let c = &data.chunks[f.chunk];
            let mut cols = vec![f.time.clone(), c.series_id.clone()];
            if !layout.tag_index() {
                cols.extend([c.host.clone(), c.region.clone(), c.rack.clone()]);
            }
            cols.extend(f.fields.iter().cloned());
            let batch = RecordBatch::try_new(schema.clone(), cols)?;
            conn.ingest(db, "cpu", schema.clone(), vec![batch])?;
            if layout.tag_index() && !series_done[f.chunk] {
                series_done[f.chunk] = true;
                conn.ingest(
                    db,
                    "_series",
                    data.series_schema.clone(),
                    vec![c.series_rows.clone()],
                )?;
            }
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu0;
    let split = CpuSplit::now().since(split0);
    let parts_after = active_parts(engine, db, "cpu")?;

    let mut tables = vec!["cpu"];
    if layout.tag_index() {
        tables.push("_series");
    }
    let (cpu0, t0) = (process_cpu_s(), Instant::now());
    for table in tables {
        for attempt in 0.. {
            exec(pool, &format!("OPTIMIZE TABLE {db}.{table} FINAL"))?;
            if active_parts(engine, db, table)? <= 1 {
                break;
            }
            if attempt == 20 {
                bail!("{db}.{table}: OPTIMIZE FINAL left several parts");
            }
            wait_for_merges(engine)?;
        }
    }
    let optimize_s = t0.elapsed().as_secs_f64();
    let merge_cpu_s = process_cpu_s() - cpu0;
    let bytes_of = |filter: &str| {
        scalar_u64(
            engine,
            &format!("SELECT toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE active AND database = '{db}'{filter}"),
        )
    };
    let (bytes, series_bytes) = (bytes_of("")?, bytes_of(" AND table = '_series'")?);
    let rows = data.rows() as f64;
    Ok(IngestFigures {
        wall_s,
        cpu_ns_row: cpu_s * 1e9 / rows,
        bg_merge_ns_row: split.merges_s * 1e9 / rows,
        parts_after,
        optimize_s,
        merge_cpu_ns_row: merge_cpu_s * 1e9 / rows,
        bytes,
        series_bytes,
        load_before,
    })
}
