use std::sync::Arc;
use adbc_core::{Driver, options::{OptionDatabase, OptionValue}};
use arrow_array::*;
use arrow_schema::*;
use shardhouse_engine::{loader, pool::Pool};

fn show(c: &mut shardhouse_engine::pool::Conn, sql: &str) {
    match c.query(sql) {
        Ok(b) => println!("{sql}\n{}", arrow_cast::pretty::pretty_format_batches(&b).map(|t| t.to_string()).unwrap_or_else(|e| format!("{e:?} {:?}", b.first().map(|b| b.schema())))),
        Err(e) => println!("{sql}\nERR {e}"),
    }
}
fn exec(c: &mut shardhouse_engine::pool::Conn, sql: &str) {
    match c.execute(sql) { Ok(()) => println!("OK {sql}"), Err(e) => println!("ERR {sql}: {e}") }
}

fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let mut drv = loader::load_driver(&loader::resolve_chdb_dir(None)).unwrap();
    let db = drv.new_database_with_opts([(OptionDatabase::Uri, OptionValue::String(dir.clone()))]).unwrap();
    let pool = Pool::new(&db, 2).unwrap();
    let mut c = pool.get();
    exec(&mut c, "CREATE DATABASE IF NOT EXISTS s1");
    exec(&mut c, "CREATE TABLE IF NOT EXISTS s1.t (time DateTime64(9), series_id UInt64, a Nullable(Float64), b Nullable(String)) ENGINE=ReplacingMergeTree ORDER BY (series_id, time)");
    // ingest subset + reordered columns
    let schema = Arc::new(Schema::new(vec![
        Field::new("series_id", DataType::UInt64, false),
        Field::new("time", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("a", DataType::Float64, true),
        Field::new("b", DataType::Utf8, true),
    ]));
    let n = 100000;
    let sid: Vec<u64> = (0..n).map(|i| (i % 3) as u64).collect();
    let ts: Vec<i64> = (0..n).map(|_| 1_000_000_000i64).collect();
    let a: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let b = RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(sid)), Arc::new(TimestampNanosecondArray::from(ts)), Arc::new(Float64Array::from(a)), Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("s{i}"))))]).unwrap();
    match c.ingest("s1", "t", schema.clone(), vec![b.clone()]) { Ok(()) => println!("ingest qualified ok"), Err(e) => println!("ingest qualified ERR {e}") }
    show(&mut c, "SELECT series_id, toUnixTimestamp64Nano(time), a, b FROM s1.t FINAL ORDER BY series_id");
    show(&mut c, "SELECT count() FROM s1.t");
    show(&mut c, "SELECT toTypeName(time), time, b, true::Bool AS x, toDateTime64(1, 9) AS y, 1::UInt8 AS z FROM s1.t LIMIT 1");
    { let r = c.query("SELECT time, b, true::Bool AS x, a FROM s1.t LIMIT 1").unwrap(); println!("{:?}", r[0].schema()); }
    show(&mut c, "SELECT count(), count(DISTINCT (series_id, time)) FROM s1.t");
    exec(&mut c, "USE s1");
    show(&mut c, "SELECT currentDatabase()");
    show(&mut c, "SELECT count() FROM t");
    let mut c2 = pool.get();
    show(&mut c2, "SELECT currentDatabase()");
    exec(&mut c2, "ALTER TABLE s1.t ADD COLUMN IF NOT EXISTS c Nullable(Int64)");
    show(&mut c2, "SELECT name, type FROM system.columns WHERE database='s1' AND table='t'");
    show(&mut c2, "SELECT version()");
    show(&mut c2, "SELECT name, value FROM system.merge_tree_settings WHERE name LIKE 'fsync%'");
    show(&mut c2, "SHOW CREATE TABLE s1.t");
    drop(c); drop(c2);
    // second data dir
    let r = drv.new_database_with_opts([(OptionDatabase::Uri, OptionValue::String(format!("{dir}-other")))]);
    match r { Ok(db2) => { println!("second db opened"); match Pool::new(&db2, 1) { Ok(p2) => { let mut c = p2.get(); show(&mut c, "SELECT count() FROM s1.t");
    show(&mut c, "SELECT toTypeName(time), time, b, true::Bool AS x, toDateTime64(1, 9) AS y, 1::UInt8 AS z FROM s1.t LIMIT 1");
    { let r = c.query("SELECT time, b, true::Bool AS x, a FROM s1.t LIMIT 1").unwrap(); println!("{:?}", r[0].schema()); }
    show(&mut c, "SELECT count(), count(DISTINCT (series_id, time)) FROM s1.t"); exec(&mut c, "CREATE DATABASE zz"); } Err(e) => println!("second pool ERR {e}") } }, Err(e) => println!("second db ERR {}", e.message) }
}
