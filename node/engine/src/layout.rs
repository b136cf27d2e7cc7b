//! Storage layout: names, column types and DDL. Plain functions, no I/O.
//!
//! Layout 2 (see docs/storage.md). Per shard:
//! - `shard_0007`: the shard's own `_flushed (k, index)` table (the highest
//!   Raft index whose rows are in the shard's tables);
//! - one chDB database per (shard, Shardhouse database), named
//!   `shard_0007_<16 hex digits of database_key(name)>`, whose comment is
//!   the database's name, holding:
//!   - one fact table per measurement: `(time DateTime64(9), series_id
//!     UInt64, <field> SimpleAggregateFunction(anyLast, Nullable(T)) ...)`,
//!     `AggregatingMergeTree PARTITION BY toYYYYMMDD(time) ORDER BY
//!     (series_id, time)` (or `(toStartOfHour(time), series_id, time)`,
//!     [`FactOrder`]): a point rewritten with some of its fields keeps
//!     the others (InfluxDB's field merge);
//!   - `_samples`: the same shape with one field `value`, for every
//!     Prometheus metric of the database (the metric is the series'
//!     measurement);
//!   - `_series (series_id, measurement, tags Map)`: the tag index;
//!   - `_database (name, retention_ns, index)`: the database's settings.
use arrow_schema::{DataType, Schema, TimeUnit};

use crate::error::{EngineError, Result};

/// Name of the time column in every fact table.
pub const TIME: &str = "time";
/// Name of the series column in every fact table.
pub const SERIES_ID: &str = "series_id";
/// Series dictionary (tag index) of a database in a shard.
pub const SERIES_TABLE: &str = "_series";
/// Flushed Raft index of a shard.
pub const FLUSHED_TABLE: &str = "_flushed";
/// Prometheus samples of a database in a shard, every metric in one table.
pub const SAMPLES_TABLE: &str = shardhouse_common::names::SAMPLES_TABLE;
/// Settings of a database in a shard (its name and retention).
pub const DATABASE_TABLE: &str = "_database";
/// The layout this release stores (docs/storage.md, "Layout versions").
pub const LAYOUT_VERSION: u32 = 2;
/// File in the data directory that names the layout of its data.
pub const LAYOUT_FILE: &str = "SHARDHOUSE_LAYOUT";

/// The chDB database holding one shard's own tables (`_flushed`).
pub fn shard_db(shard: u32) -> String {
    format!("shard_{shard:04}")
}

/// The chDB database holding one shard's data of Shardhouse database
/// `database`. Named by the database's key, not its name: any name of up
/// to 64 bytes fits the engine's file name limits, and table names keep
/// their full budget.
pub fn data_db(shard: u32, database: &str) -> String {
    format!(
        "shard_{shard:04}_{:016x}",
        shardhouse_common::names::database_key(database)
    )
}

/// Parses `shard_0007_<16 hex>` back to 7.
pub fn parse_data_db(db: &str) -> Option<u32> {
    let (shard, key) = db.strip_prefix("shard_")?.split_once('_')?;
    if key.len() != 16 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    parse_shard_db(&format!("shard_{shard}"))
}

/// A table of a shard: a database and a table name in it (a measurement,
/// or one of the engine's `_` tables).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId {
    pub database: String,
    pub table: String,
}

impl TableId {
    pub fn new(database: &str, table: &str) -> TableId {
        TableId {
            database: database.to_string(),
            table: table.to_string(),
        }
    }

    /// `database/table`: how snapshots and messages name it (a database
    /// name never contains `/`).
    pub fn path(&self) -> String {
        format!("{}/{}", self.database, self.table)
    }

    pub fn from_path(path: &str) -> Option<TableId> {
        let (d, t) = path.split_once('/')?;
        Some(TableId::new(d, t))
    }
}

impl std::fmt::Display for TableId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.database, self.table)
    }
}

/// Parses `shard_0007` back to 7.
pub fn parse_shard_db(db: &str) -> Option<u32> {
    let digits = db.strip_prefix("shard_")?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Quotes an identifier for ClickHouse SQL.
pub fn ident(name: &str) -> String {
    shardhouse_common::names::sql_ident(name)
}

/// `db`.`table`, both quoted.
pub fn qualified(db: &str, table: &str) -> String {
    format!("{}.{}", ident(db), ident(table))
}

/// Quotes a string literal for ClickHouse SQL.
pub fn literal(s: &str) -> String {
    shardhouse_common::names::sql_literal(s)
}

/// Measurement names become table names; the engine's own tables have
/// reserved names (`shardhouse_common::names::is_engine_table`). The rules (and why: ClickHouse's escaped file name
/// limits) are `shardhouse_common::names`, shared with the router, which
/// refuses such names before a write is proposed.
pub fn validate_measurement(measurement: &str) -> Result<()> {
    use shardhouse_common::names;
    names::validate_measurement(measurement).map_err(|e| EngineError::InvalidMeasurement {
        measurement: names::excerpt(measurement.as_bytes()),
        reason: e.to_string(),
    })
}

/// Tables a write may carry: a measurement, or `_samples` (Prometheus).
pub fn validate_table(table: &str) -> Result<()> {
    if table == SAMPLES_TABLE {
        return Ok(());
    }
    validate_measurement(table)
}

/// Whether `name` is one of the engine's own tables (`_series`, ...), not
/// a measurement (`_cpu` is a measurement).
pub fn is_engine_table(name: &str) -> bool {
    shardhouse_common::names::is_engine_table(name)
}

/// Storage names (a database, or `db/rp` for a retention policy): the
/// router's rule (`shardhouse_common::names`).
pub fn validate_database(database: &str) -> Result<()> {
    shardhouse_common::names::validate_storage(database)
        .map_err(|e| EngineError::InvalidDatabase(e.to_string()))
}

/// What the layout file says: `shardhouse storage layout N`.
pub fn layout_file_text() -> String {
    format!("shardhouse storage layout {LAYOUT_VERSION}\n")
}

/// The layout named by a layout file's text (the raw text if it names none).
pub fn parse_layout_file(text: &str) -> String {
    text.trim()
        .strip_prefix("shardhouse storage layout ")
        .unwrap_or(text.trim())
        .to_string()
}

/// Whether a data directory can be opened: `found` is its layout file's
/// version (None: no file), `has_shards` whether chDB holds shard data.
/// Ok(true): new directory, write the layout file; Ok(false): this
/// layout; Err(version found) otherwise. Shard data without a file was
/// written by layout 1 (before databases: one table per measurement for
/// all databases, whole-row replacement), which cannot be split by
/// database after the fact.
pub fn layout_decision(
    found: Option<String>,
    has_shards: bool,
) -> std::result::Result<bool, String> {
    match found {
        Some(v) if v == LAYOUT_VERSION.to_string() => Ok(false),
        Some(v) => Err(v),
        None if has_shards => Err("1".into()),
        None => Ok(true),
    }
}

/// The types a field can have (InfluxDB's float, integer, unsigned, string, boolean).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    Float64,
    Int64,
    UInt64,
    String,
    Bool,
}

impl FieldType {
    /// The field type carried by an Arrow column, if it is one we store.
    pub fn from_arrow(dt: &DataType) -> Option<FieldType> {
        Some(match dt {
            DataType::Float64 => FieldType::Float64,
            DataType::Int64 => FieldType::Int64,
            DataType::UInt64 => FieldType::UInt64,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => FieldType::String,
            DataType::Boolean => FieldType::Bool,
            _ => return None,
        })
    }

    /// The Arrow type the engine buffers and ingests this field as.
    pub fn arrow(self) -> DataType {
        match self {
            FieldType::Float64 => DataType::Float64,
            FieldType::Int64 => DataType::Int64,
            FieldType::UInt64 => DataType::UInt64,
            FieldType::String => DataType::Utf8,
            FieldType::Bool => DataType::Boolean,
        }
    }

    /// Column type in chDB. Fields are nullable (a point need not carry
    /// every field) and keep the last non-NULL value per point when parts
    /// merge: rewriting some fields of a point keeps the others.
    pub fn clickhouse(self) -> &'static str {
        match self {
            FieldType::Float64 => "SimpleAggregateFunction(anyLast, Nullable(Float64))",
            FieldType::Int64 => "SimpleAggregateFunction(anyLast, Nullable(Int64))",
            FieldType::UInt64 => "SimpleAggregateFunction(anyLast, Nullable(UInt64))",
            FieldType::String => "SimpleAggregateFunction(anyLast, Nullable(String))",
            FieldType::Bool => "SimpleAggregateFunction(anyLast, Nullable(Bool))",
        }
    }

    /// Reads a chDB column type back (as listed in `system.columns`).
    pub fn from_clickhouse(t: &str) -> Option<FieldType> {
        let t = t
            .strip_prefix("SimpleAggregateFunction(anyLast, ")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(t);
        let inner = t
            .strip_prefix("Nullable(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(t);
        Some(match inner {
            "Float64" => FieldType::Float64,
            "Int64" => FieldType::Int64,
            "UInt64" => FieldType::UInt64,
            "String" => FieldType::String,
            "Bool" => FieldType::Bool,
            _ => return None,
        })
    }

    /// Name used in error messages (the type as stored in chDB).
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Float64 => "Float64",
            FieldType::Int64 => "Int64",
            FieldType::UInt64 => "UInt64",
            FieldType::String => "String",
            FieldType::Bool => "Bool",
        }
    }
}

impl std::fmt::Display for FieldType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks a points batch's schema: `time` Timestamp(ns), `series_id` UInt64,
/// then fields of supported types. Returns the fields in schema order.
pub fn batch_fields(measurement: &str, schema: &Schema) -> Result<Vec<(String, FieldType)>> {
    let invalid = |reason: String| EngineError::InvalidBatch {
        measurement: measurement.to_string(),
        reason,
    };
    let mut seen_time = false;
    let mut seen_sid = false;
    let mut fields = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        match f.name().as_str() {
            TIME => {
                if !matches!(f.data_type(), DataType::Timestamp(TimeUnit::Nanosecond, _)) {
                    return Err(invalid(format!(
                        "column `time` must be Timestamp(Nanosecond), got {}",
                        f.data_type()
                    )));
                }
                seen_time = true;
            }
            SERIES_ID => {
                if f.data_type() != &DataType::UInt64 {
                    return Err(invalid(format!(
                        "column `series_id` must be UInt64, got {}",
                        f.data_type()
                    )));
                }
                seen_sid = true;
            }
            name => {
                let Some(t) = FieldType::from_arrow(f.data_type()) else {
                    return Err(invalid(format!(
                        "field `{name}` has unsupported type {} (use Float64, Int64, UInt64, Utf8 or Boolean)",
                        f.data_type()
                    )));
                };
                if name.is_empty() {
                    return Err(invalid("a field has an empty name".into()));
                }
                if fields.iter().any(|(n, _)| n == name) {
                    return Err(invalid(format!("field `{name}` appears twice")));
                }
                fields.push((name.to_string(), t));
            }
        }
    }
    if !seen_time || !seen_sid {
        return Err(invalid(
            "the batch needs a `time` Timestamp(Nanosecond) and a `series_id` UInt64 column".into(),
        ));
    }
    Ok(fields)
}

/// Fails with the first field whose offered type differs from the stored one.
pub fn check_conflicts<'a>(
    measurement: &str,
    offered: &[(String, FieldType)],
    stored: impl Fn(&str) -> Option<FieldType> + 'a,
) -> Result<()> {
    for (name, t) in offered {
        if let Some(s) = stored(name) {
            if s != *t {
                return Err(EngineError::FieldTypeConflict {
                    measurement: measurement.to_string(),
                    field: name.clone(),
                    stored: s.name().to_string(),
                    offered: t.name().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The fact table's engine clause. An AggregatingMergeTree whose field
/// columns are `anyLast` of a nullable value keeps, per (series_id, time),
/// the last non-NULL value of each field in insertion order (also inside
/// one insert): a point rewritten with some fields keeps the others, and a
/// flush retried after a crash collapses with its first copy. Reads that
/// must see one row per point use `FINAL`. Partitions are days (UTC), so
/// retention drops whole partitions; one insert may touch any number of
/// them (`throw_on_max_partitions_per_insert_block = 0` on the writers).
///
/// No per-file fsyncs (`fsync_after_insert` / `fsync_part_directory` stay
/// off): a part is ~10 files, and syncing each one is a device cache flush
/// that the WAL's own fsyncs queue behind. Instead the flusher makes a whole
/// flush durable with one `syncfs` of the data directory's filesystem
/// (`Engine` `sync_parts`) before the flushed index moves, so the WAL never
/// compacts entries whose rows a power loss could take.
pub const FACT_ENGINE: &str = "AggregatingMergeTree PARTITION BY toYYYYMMDD(time)";

/// How a fact table's rows are sorted, chosen when the table is created
/// and kept for its life (a sort key cannot change). Replicas may differ:
/// snapshots carry rows, not parts; backups carry parts and name the
/// order, so a restore creates the table the parts were sorted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FactOrder {
    /// `(series_id, time)`, the default: one series' points are one run,
    /// which one-series panels (most of a dashboard) read fastest. A
    /// granule holds one series' whole day, so a condition on time alone
    /// prunes day partitions, not granules.
    #[default]
    SeriesTime,
    /// `(toStartOfHour(time), series_id, time)`: within a day, hour by
    /// hour. A time condition prunes to the hours it names (a dashboard's
    /// partial first bucket, a refresh's newest minutes, a rollup's range
    /// ends); one series over many hours reads a granule per hour. Measured
    /// against series-time in docs/storage.md ("Sort order").
    HourSeriesTime,
}

impl FactOrder {
    const ALL: [FactOrder; 2] = [FactOrder::SeriesTime, FactOrder::HourSeriesTime];

    /// The `ORDER BY` clause's tuple.
    pub fn order_by(self) -> &'static str {
        match self {
            FactOrder::SeriesTime => "(series_id, time)",
            FactOrder::HourSeriesTime => "(toStartOfHour(time), series_id, time)",
        }
    }

    /// How flags, manifests and messages name it.
    pub fn name(self) -> &'static str {
        match self {
            FactOrder::SeriesTime => "series-time",
            FactOrder::HourSeriesTime => "hour-series-time",
        }
    }

    pub fn parse(name: &str) -> Option<FactOrder> {
        FactOrder::ALL.into_iter().find(|o| o.name() == name)
    }

    /// The order of a table from its `system.tables` `sorting_key`
    /// (`series_id, time`, spaces aside).
    pub fn from_sorting_key(key: &str) -> Option<FactOrder> {
        let key: String = key.chars().filter(|c| !c.is_whitespace()).collect();
        [FactOrder::SeriesTime, FactOrder::HourSeriesTime]
            .into_iter()
            .find(|o| {
                let want: String = o
                    .order_by()
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                want.trim_start_matches('(').trim_end_matches(')') == key
            })
    }
}

/// Settings of the engine's writer connections.
pub const WRITER_SETTINGS: &[&str] = &["SET throw_on_max_partitions_per_insert_block = 0"];

/// The flushed index is written after the flush's `syncfs` and not synced
/// itself. It is only where replay starts after a restart: the WAL compacts
/// its log up to the in-memory flushed index, which advances only after the
/// rows' parts were synced. If a crash loses the last index row, replay
/// starts at the older index (or at the log's first entry, whichever is
/// later) and re-applies entries whose rows are already stored; they
/// collapse with their first copy in the ReplacingMergeTree.
pub const FLUSHED_ENGINE: &str = "ReplacingMergeTree(`index`) ORDER BY k";

/// `CREATE TABLE IF NOT EXISTS` for a fact table with the given fields.
pub fn create_fact_table(
    db: &str,
    measurement: &str,
    fields: &[(String, FieldType)],
    order: FactOrder,
) -> String {
    let mut sql = format!(
        "CREATE TABLE IF NOT EXISTS {} ({} DateTime64(9), {} UInt64",
        qualified(db, measurement),
        ident(TIME),
        ident(SERIES_ID)
    );
    for (name, t) in fields {
        sql.push_str(&format!(", {} {}", ident(name), t.clickhouse()));
    }
    sql.push_str(&format!(
        ") ENGINE = {FACT_ENGINE} ORDER BY {}",
        order.order_by()
    ));
    sql
}

/// `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` for new fields.
pub fn add_columns(db: &str, measurement: &str, fields: &[(String, FieldType)]) -> String {
    let cols: Vec<String> = fields
        .iter()
        .map(|(n, t)| format!("ADD COLUMN IF NOT EXISTS {} {}", ident(n), t.clickhouse()))
        .collect();
    format!(
        "ALTER TABLE {} {}",
        qualified(db, measurement),
        cols.join(", ")
    )
}

/// DDL of a shard's own tables, run when the shard is first used.
pub fn create_shard(db: &str) -> Vec<String> {
    vec![
        format!("CREATE DATABASE IF NOT EXISTS {}", ident(db)),
        // One logical row; ReplacingMergeTree(index) keeps the highest and
        // max(index) reads it correctly before merges.
        format!(
            "CREATE TABLE IF NOT EXISTS {} (k UInt8, `index` UInt64) ENGINE = {FLUSHED_ENGINE}",
            qualified(db, FLUSHED_TABLE)
        ),
    ]
}

/// Columns of the tag index: the series' measurement and its tags.
pub const SERIES_COLUMNS: &str =
    "series_id UInt64, measurement LowCardinality(String), tags Map(LowCardinality(String), String)";

/// DDL of a database's storage in a shard: its chDB database (commented
/// with the name, so a restart finds the name again), the tag index, the
/// settings table and the Prometheus samples table.
pub fn create_database(db: &str, name: &str, order: FactOrder) -> Vec<String> {
    vec![
        format!(
            "CREATE DATABASE IF NOT EXISTS {} COMMENT {}",
            ident(db),
            literal(name)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({SERIES_COLUMNS}) ENGINE = ReplacingMergeTree ORDER BY (measurement, series_id)",
            qualified(db, SERIES_TABLE)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (name String, retention_ns Int64, `index` UInt64) ENGINE = ReplacingMergeTree(`index`) ORDER BY tuple()",
            qualified(db, DATABASE_TABLE)
        ),
        create_fact_table(
            db,
            SAMPLES_TABLE,
            &[("value".to_string(), FieldType::Float64)],
            order,
        ),
    ]
}

#[cfg(test)]
mod tests;

/// The partition id (`YYYYMMDD`, UTC) of a day counted from the Unix
/// epoch: the fact tables' `toYYYYMMDD(time)`.
pub fn partition_id_of_day(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}{m:02}{d:02}")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}
