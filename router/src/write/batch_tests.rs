//! Request batches against a plain model: every accepted line becomes one
//! row of its (shard, measurement) batch, absent fields are null, a field
//! keeps one type per measurement within a request, and bad lines are
//! counted with the first one reported by line number.

use super::*;
use crate::write::cardinality::Cardinality;
use crate::write::series_cache::SeriesCache;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use shardhouse_common::lineproto::{parse_body, FieldType, OwnedFieldValue, OwnedPoint};
use shardhouse_common::series;
use shardhouse_common::shard::jump_hash;
use shardhouse_common::wire;
use std::collections::BTreeMap;

const SHARDS: u32 = 4;
const DEFAULT_TIME: i64 = 42;

/// One expected (shard, measurement) batch.
#[derive(Debug, PartialEq)]
struct Table {
    shard: u32,
    measurement: String,
    time: Vec<i64>,
    series_id: Vec<u64>,
    /// Columns in order of first appearance in the table.
    columns: Vec<(String, Vec<Option<OwnedFieldValue>>)>,
    /// series_id -> canonical key.
    series: BTreeMap<u64, String>,
}

#[derive(Debug, PartialEq)]
struct Outcome {
    tables: Vec<Table>,
    points: usize,
    rejected: usize,
    first_rejection: Option<(usize, String)>,
}

fn type_of(v: &OwnedFieldValue) -> FieldType {
    match v {
        OwnedFieldValue::Float(_) => FieldType::Float,
        OwnedFieldValue::Integer(_) => FieldType::Integer,
        OwnedFieldValue::Unsigned(_) => FieldType::Unsigned,
        OwnedFieldValue::String(_) => FieldType::String,
        OwnedFieldValue::Boolean(_) => FieldType::Boolean,
    }
}

/// What a request batch should produce for `body`, computed line by line
/// from the owned parser.
fn model(body: &[u8]) -> Outcome {
    let mut tables: Vec<Table> = Vec::new();
    let mut types: BTreeMap<String, Vec<(String, FieldType)>> = BTreeMap::new();
    let (mut points, mut rejected, mut first_rejection) = (0, 0, None);
    let mut reject = |line: usize, message: String| {
        rejected += 1;
        if first_rejection.is_none() {
            first_rejection = Some((line, message));
        }
    };
    for (line, parsed) in parse_body(body) {
        let p: OwnedPoint = match parsed {
            Ok(p) => p,
            Err(e) => {
                reject(line, e.to_string());
                continue;
            }
        };
        let tags: Vec<(&str, &str)> = p
            .tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let key = String::from_utf8(series::canonical_key(&p.measurement, &tags)).unwrap();
        let id = series::series_id_of_key(key.as_bytes());
        let shard = jump_hash(id, SHARDS);
        // The table exists from the first parsed line of its series on,
        // even when that line is then rejected.
        let t = match tables
            .iter()
            .position(|t| t.shard == shard && t.measurement == p.measurement)
        {
            Some(t) => t,
            None => {
                tables.push(Table {
                    shard,
                    measurement: p.measurement.clone(),
                    time: Vec::new(),
                    series_id: Vec::new(),
                    columns: Vec::new(),
                    series: BTreeMap::new(),
                });
                tables.len() - 1
            }
        };
        let known = types.entry(p.measurement.clone()).or_default();
        let conflict = p.fields.iter().find_map(|(k, v)| {
            let (_, want) = known.iter().find(|(name, _)| name == k)?;
            (*want != type_of(v)).then(|| {
                format!(
                    "field type conflict: field {k:?} of measurement {:?} is {want} in an \
                     earlier point of this request, got {}",
                    p.measurement,
                    type_of(v)
                )
            })
        });
        if let Some(message) = conflict {
            reject(line, message);
            continue;
        }
        for (k, v) in &p.fields {
            if !known.iter().any(|(name, _)| name == k) {
                known.push((k.clone(), type_of(v)));
            }
        }
        let t = &mut tables[t];
        let row = t.time.len();
        for (k, _) in &p.fields {
            if !t.columns.iter().any(|(name, _)| name == k) {
                t.columns.push((k.clone(), vec![None; row]));
            }
        }
        for (name, values) in &mut t.columns {
            values.push(
                p.fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone()),
            );
        }
        t.time.push(p.timestamp.unwrap_or(DEFAULT_TIME));
        t.series_id.push(id);
        t.series.insert(id, key);
        points += 1;
    }
    tables.retain(|t| !t.time.is_empty());
    Outcome {
        tables,
        points,
        rejected,
        first_rejection,
    }
}

fn decode(ipc: &[u8]) -> RecordBatch {
    let (schema, mut batches) = wire::decode_stream(ipc).expect("a valid IPC stream");
    assert_eq!(batches.len(), 1, "exactly one batch per stream");
    let batch = batches.remove(0);
    assert_eq!(schema.as_ref(), Some(&batch.schema()));
    batch
}

fn column_values(array: &ArrayRef) -> Vec<Option<OwnedFieldValue>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
    (0..array.len())
        .map(|i| {
            array.is_valid(i).then(|| match array.data_type() {
                DataType::Float64 => {
                    OwnedFieldValue::Float(array.as_primitive::<Float64Type>().value(i))
                }
                DataType::Int64 => {
                    OwnedFieldValue::Integer(array.as_primitive::<Int64Type>().value(i))
                }
                DataType::UInt64 => {
                    OwnedFieldValue::Unsigned(array.as_primitive::<UInt64Type>().value(i))
                }
                DataType::Utf8 => {
                    OwnedFieldValue::String(array.as_string::<i32>().value(i).to_owned())
                }
                DataType::Boolean => OwnedFieldValue::Boolean(array.as_boolean().value(i)),
                other => panic!("unexpected column type {other}"),
            })
        })
        .collect()
}

/// What the request batch actually produced for `body`, in model form.
fn actual(body: &[u8]) -> Outcome {
    actual_cached(body, None).0
}

/// [`actual`] with a series cache, and its (hits, misses).
fn actual_cached(body: &[u8], cache: Option<DbCache<'_>>) -> (Outcome, (usize, usize)) {
    let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, DEFAULT_TIME, None);
    if let Some(c) = cache {
        b.use_series_cache(c);
    }
    b.add_line_protocol(body);
    let lookups = b.series_cache_lookups();
    let (batches, summary) = b.finish().expect("finish");
    let tables = batches
        .iter()
        .map(|sb| {
            use arrow_array::cast::AsArray;
            use arrow_array::types::{TimestampNanosecondType, UInt64Type};
            // Through the wire, as a node receives it.
            let wire = wire_tables(&[sb]).expect("encodes");
            let points = decode(&wire[0].points_ipc);
            assert_eq!(points.num_rows(), sb.rows);
            let schema = points.schema();
            // The wire's points schema for this table's fields, exactly.
            let fields = schema.fields().iter().skip(2);
            assert_eq!(
                schema,
                wire::points_schema(fields.map(|f| (f.name().as_str(), f.data_type().clone())))
            );
            let series = decode(&wire[0].series_ipc);
            assert_eq!(series.schema(), wire::series_schema());
            let ids = series.column(0).as_primitive::<UInt64Type>();
            let names = series.column(1).as_string::<i32>();
            let keys = series.column(2).as_string::<i32>();
            let mut distinct = ids.values().to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), series.num_rows(), "each series listed once");
            Table {
                shard: sb.shard,
                measurement: sb.measurement.clone(),
                time: points
                    .column(0)
                    .as_primitive::<TimestampNanosecondType>()
                    .values()
                    .to_vec(),
                series_id: points
                    .column(1)
                    .as_primitive::<UInt64Type>()
                    .values()
                    .to_vec(),
                columns: (2..points.num_columns())
                    .map(|c| {
                        (
                            schema.field(c).name().clone(),
                            column_values(points.column(c)),
                        )
                    })
                    .collect(),
                series: (0..series.num_rows())
                    .map(|i| {
                        assert_eq!(names.value(i), sb.measurement);
                        (ids.value(i), keys.value(i).to_owned())
                    })
                    .collect(),
            }
        })
        .collect();
    let outcome = Outcome {
        tables,
        points: summary.points,
        rejected: summary.rejected,
        first_rejection: summary.first_rejection.map(|r| (r.position, r.message)),
    };
    (outcome, lookups)
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// A body of mostly good lines whose field sets, orders and types vary
/// between lines of the same series and measurement, with some bad lines.
fn random_body(rng: &mut Rng) -> Vec<u8> {
    const SERIES: &[&str] = &[
        "cpu,host=a,region=eu",
        "cpu,region=eu,host=a",
        "cpu,host=b",
        "cpu,host=c,region=us",
        "mem,host=a",
        "mem,host=b",
        "disk\\ io,path=/var\\,log",
    ];
    const FIELDS: &[&str] = &["usage", "idle", "user", "s", "ü"];
    const VALUES: &[&str] = &[
        "1.5", "-2", "0.25", "7", "3i", "-4i", "5u", "t", "false", "\"x, y\"", "\"\"",
    ];
    const BAD: &[&[u8]] = &[
        b"cpu,host=a",
        b"cpu,host=a usage=",
        b"cpu,host=a usage=1 x",
        b"cpu,host=a usage=1,usage=2",
        b"cpu,host=\xff usage=1",
        b"mem,host=a time=1",
        b"# comment",
        b"",
    ];
    let mut body = Vec::new();
    for _ in 0..rng.below(60) {
        if rng.below(10) == 0 {
            body.extend_from_slice(BAD[rng.below(BAD.len())]);
        } else {
            body.extend_from_slice(SERIES[rng.below(SERIES.len())].as_bytes());
            body.push(b' ');
            let mut fields: Vec<&str> = FIELDS.to_vec();
            for i in (1..fields.len()).rev() {
                fields.swap(i, rng.below(i + 1));
            }
            // The same order most of the time, as real writers do.
            if rng.below(4) > 0 {
                fields.sort();
            }
            fields.truncate(1 + rng.below(FIELDS.len()));
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(f.as_bytes());
                body.push(b'=');
                // Mostly floats, so that type conflicts stay the exception.
                let v = if rng.below(5) > 0 {
                    VALUES[rng.below(3)]
                } else {
                    VALUES[rng.below(VALUES.len())]
                };
                body.extend_from_slice(v.as_bytes());
            }
            if rng.below(3) > 0 {
                body.extend_from_slice(format!(" {}", 1000 + rng.below(1000)).as_bytes());
            }
        }
        body.extend_from_slice(if rng.below(5) == 0 { b"\r\n" } else { b"\n" });
    }
    body
}

#[test]
fn batches_match_the_model_for_random_bodies() {
    let mut rng = Rng(17);
    let (mut with_conflicts, mut with_nulls) = (0, 0);
    for round in 0..3_000 {
        let body = random_body(&mut rng);
        let want = model(&body);
        let got = actual(&body);
        assert_eq!(
            got,
            want,
            "round {round}, body:\n{}",
            String::from_utf8_lossy(&body)
        );
        if want
            .first_rejection
            .as_ref()
            .is_some_and(|(_, m)| m.contains("type conflict"))
        {
            with_conflicts += 1;
        }
        if want
            .tables
            .iter()
            .any(|t| t.columns.iter().any(|(_, v)| v.contains(&None)))
        {
            with_nulls += 1;
        }
    }
    // The generator must reach the interesting cases, or this proves little.
    assert!(
        with_conflicts > 100,
        "{with_conflicts} bodies with conflicts"
    );
    assert!(with_nulls > 1_000, "{with_nulls} bodies with nulls");
}

#[test]
fn a_line_with_other_fields_than_the_previous_one_gets_nulls() {
    let body = b"cpu,host=a a=1,b=2 10\ncpu,host=a b=3,c=4 11\ncpu,host=a a=5,b=6 12\ncpu,host=a c=7i 13\n";
    let got = actual(body);
    assert_eq!(got.rejected, 1);
    assert_eq!(
        got.first_rejection,
        Some((
            4,
            "field type conflict: field \"c\" of measurement \"cpu\" is float in an earlier \
             point of this request, got integer"
                .to_owned()
        ))
    );
    let [t] = &got.tables[..] else {
        panic!("one table: {:?}", got.tables)
    };
    use OwnedFieldValue::Float;
    assert_eq!(t.time, vec![10, 11, 12]);
    assert_eq!(
        t.columns,
        vec![
            (
                "a".to_owned(),
                vec![Some(Float(1.0)), None, Some(Float(5.0))]
            ),
            (
                "b".to_owned(),
                vec![Some(Float(2.0)), Some(Float(3.0)), Some(Float(6.0))]
            ),
            ("c".to_owned(), vec![None, Some(Float(4.0)), None]),
        ]
    );
}

#[test]
fn type_conflicts_are_checked_across_shards_of_a_measurement() {
    // Many hosts spread over the shards: a field typed by a point in one
    // shard's table binds the points of every other table too.
    let mut body = String::new();
    for h in 0..20 {
        body.push_str(&format!("cpu,host=h{h} v=1\n"));
    }
    body.push_str("cpu,host=new v=\"text\"\n");
    let got = actual(body.as_bytes());
    assert!(got.tables.len() > 1, "spread over several shards");
    assert_eq!((got.points, got.rejected), (20, 1));
    let (line, message) = got.first_rejection.unwrap();
    assert_eq!(line, 21);
    assert!(
        message.contains("is float in an earlier point"),
        "{message}"
    );
}

#[test]
fn invalid_utf8_rejects_only_its_line_with_its_number() {
    let body = b"cpu v=1\ncpu v=2\ncpu v=\"\xff\"\n\ncpu v=4\n";
    let got = actual(body);
    assert_eq!((got.points, got.rejected), (3, 1));
    assert_eq!(
        got.first_rejection,
        Some((3, "line is not valid UTF-8; send UTF-8 text".to_owned()))
    );
    // Non-ASCII UTF-8 is fine anywhere.
    let got = actual("cpu,hôst=ü v=\"✓\",ñ=1 5\n".as_bytes());
    assert_eq!((got.points, got.rejected), (1, 0));
    assert_eq!(got.tables[0].columns[0].0, "v");
    assert_eq!(got.tables[0].columns[1].0, "ñ");
}

#[test]
fn a_long_measurement_is_stored_in_full_and_matches_the_model() {
    // Longer than an error message's excerpt (64 characters): a Prometheus
    // metric such as prometheus_remote_storage_string_interner_zero_reference_releases_total.
    let name = format!("m{}", "x".repeat(99));
    let body = format!("{name},host=a v=1 5\n");
    let got = actual(body.as_bytes());
    assert_eq!(got.tables[0].measurement, name);
    assert_eq!(got, model(body.as_bytes()));
}

#[test]
fn cardinality_limit_rejects_new_series_only() {
    let limits = Cardinality::new(2);
    let db = limits.db("db").unwrap();
    let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(&db));
    b.add_line_protocol(b"cpu,host=a v=1\ncpu,host=b v=2\ncpu,host=c v=3\ncpu,host=a v=4\n");
    let summary = b.summary();
    assert_eq!((summary.points, summary.rejected), (3, 1));
    assert_eq!(summary.rejected_for_cardinality, 1);
    let r = summary.first_rejection.unwrap();
    assert_eq!((r.position, r.reason), (3, RejectReason::Cardinality));
}

#[test]
fn reserved_admission_keeps_the_limit_and_counts_each_series_once() {
    // 400 series against a limit of 300: a first block of places is
    // reserved, the next does not fit, the rest are admitted one by one.
    let limits = Cardinality::new(300);
    let db = limits.db("db").unwrap();
    let body: String = (0..400).map(|i| format!("cpu,host=h{i} v=1\n")).collect();
    let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(&db));
    b.add_line_protocol(body.as_bytes());
    let summary = b.summary();
    assert_eq!((summary.points, summary.rejected), (300, 100));
    assert_eq!(summary.rejected_for_cardinality, 100);
    assert_eq!(summary.first_rejection.unwrap().position, 301);
    assert_eq!(db.len(), 300, "unused places were given back");
    // The same body again: the 300 known series pass, the others do not.
    let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(&db));
    b.add_line_protocol(body.as_bytes());
    assert_eq!((b.summary().points, b.summary().rejected), (300, 100));
    assert_eq!(db.len(), 300);

    // Far from the limit: series repeated within and across bodies count once.
    let limits = Cardinality::new(1_000);
    let db = limits.db("db").unwrap();
    for _ in 0..3 {
        let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(&db));
        b.add_line_protocol(b"cpu,host=a v=1\ncpu,host=b v=2\ncpu,host=a v=3\n");
        b.add_line_protocol(b"cpu,host=b v=4\nmem,host=a v=5\n");
        assert_eq!(b.summary().points, 5);
    }
    assert_eq!(db.len(), 3);
}

/// The batches of one request body on one shard, for the database `db`.
fn one_shard_batches(body: &[u8]) -> Vec<ShardBatch> {
    let mut b = RequestBatch::new(1, Precision::Nanosecond, DEFAULT_TIME, None);
    b.add_line_protocol(body);
    let (mut batches, summary) = b.finish().expect("finish");
    assert_eq!(summary.rejected, 0);
    for sb in &mut batches {
        sb.database = "db".into();
    }
    batches
}

#[test]
fn a_coalesced_write_carries_one_table_per_table_and_field_set() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::TimestampNanosecondType;
    let first = one_shard_batches(b"cpu,host=a v=1 1\ncpu,host=b v=2 2\n");
    let other_fields = one_shard_batches(b"cpu,host=d w=4i 4\n");
    let second = one_shard_batches(b"cpu,host=c v=3 3\n");
    let mem = one_shard_batches(b"mem,host=a v=5 5\n");
    let members: Vec<&ShardBatch> = first
        .iter()
        .chain(&other_fields)
        .chain(&second)
        .chain(&mem)
        .collect();
    let tables = wire_tables(&members).expect("encodes");
    let names: Vec<&str> = tables.iter().map(|t| t.measurement.as_str()).collect();
    assert_eq!(names, ["cpu", "cpu", "mem"]);
    assert!(tables.iter().all(|t| t.database == "db"));
    // The two requests with the same field set share one points batch, in
    // the order they queued, and one series batch.
    let points = decode(&tables[0].points_ipc);
    let times = points.column(0).as_primitive::<TimestampNanosecondType>();
    assert_eq!(times.values().to_vec(), [1, 2, 3]);
    assert_eq!(decode(&tables[0].series_ipc).num_rows(), 3);
    let other = decode(&tables[1].points_ipc);
    assert_eq!(other.num_rows(), 1);
    assert_eq!(other.schema().field(2).name(), "w");
    assert_eq!(decode(&tables[2].points_ipc).num_rows(), 1);
    // A request alone is sent as the stream it always was.
    let alone = wire_tables(&[&second[0]]).expect("encodes");
    assert_eq!(decode(&alone[0].points_ipc), second[0].points);
}

#[test]
fn series_found_in_the_cache_give_what_a_full_resolution_gives() {
    // One cache over many bodies: later bodies find the series earlier
    // ones resolved (sorted, unsorted and escaped spellings, bad lines).
    let cache = SeriesCache::new(10_000);
    let db = cache.db("db");
    let mut rng = Rng(23);
    let (mut hits, mut misses) = (0, 0);
    for round in 0..500 {
        let body = random_body(&mut rng);
        let (got, (h, m)) = actual_cached(&body, db);
        assert_eq!(
            got,
            model(&body),
            "round {round}, body:\n{}",
            String::from_utf8_lossy(&body)
        );
        hits += h;
        misses += m;
    }
    // Only spellings that are their own key are cached: the unsorted and
    // escaped ones miss every time, the others hit after their first body.
    assert!(hits > 1_000, "{hits} hits");
    assert!(misses > 500, "{misses} misses");
    assert_eq!(cache.len(), 5, "the five sorted spellings");
}

/// series_id -> shard of every point in `batches`.
fn shards_of(batches: &[ShardBatch]) -> BTreeMap<u64, u32> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    let mut out = BTreeMap::new();
    for b in batches {
        for id in b.points.column(1).as_primitive::<UInt64Type>().values() {
            assert_eq!(*out.entry(*id).or_insert(b.shard), b.shard);
        }
    }
    out
}

#[test]
fn cached_series_keep_their_shard_when_the_shard_count_changes() {
    let body: String = (0..200).map(|i| format!("cpu,host=h{i} v=1\n")).collect();
    let cache = SeriesCache::new(10_000);
    let shards = |count: u32, cached: bool| {
        let mut b = RequestBatch::new(count, Precision::Nanosecond, 0, None);
        if cached {
            b.use_series_cache(cache.db("db").unwrap());
        }
        b.add_line_protocol(body.as_bytes());
        let lookups = b.series_cache_lookups();
        (shards_of(&b.finish().unwrap().0), lookups)
    };
    let (at4, _) = shards(4, false);
    assert_eq!(
        shards(4, true),
        (at4.clone(), (0, 200)),
        "first pass: misses"
    );
    assert_eq!(shards(4, true), (at4, (200, 0)), "second pass: hits");
    let (at8, _) = shards(8, false);
    assert_eq!(shards(8, true), (at8, (200, 0)), "placed for 8 shards");
}

#[test]
fn the_series_limit_holds_with_the_cache_and_databases_stay_apart() {
    let limits = Cardinality::new(300);
    let cache = SeriesCache::new(10_000);
    let body: String = (0..400).map(|i| format!("cpu,host=h{i} v=1\n")).collect();
    let write = |db: &str| {
        let set = limits.db(db).unwrap();
        let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(&set));
        b.use_series_cache(cache.db(db).unwrap());
        b.add_line_protocol(body.as_bytes());
        let s = b.summary();
        (
            s.points,
            s.rejected_for_cardinality,
            b.series_cache_lookups(),
            set.len(),
        )
    };
    // Only admitted series are cached; the 100 refused ones are decided
    // again (and refused again) on every request.
    assert_eq!(write("a"), (300, 100, (0, 400), 300));
    assert_eq!(write("a"), (300, 100, (300, 100), 300));
    assert_eq!(cache.len(), 300);
    // Another database meets the same series as new: its own limit.
    assert_eq!(write("b"), (300, 100, (0, 400), 300));
    assert_eq!(write("b"), (300, 100, (300, 100), 300));
    assert_eq!(cache.len(), 600);
}
