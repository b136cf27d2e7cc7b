use super::*;
use arrow_schema::Field;

fn schema(fields: &[(&str, DataType)]) -> Schema {
    Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone(), true))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn data_db_names_carry_the_shard_and_a_fixed_length_key() {
    let db = data_db(7, "telegraf");
    assert!(db.starts_with("shard_0007_") && db.len() == 11 + 16, "{db}");
    assert_eq!(parse_data_db(&db), Some(7));
    assert_ne!(data_db(7, "a"), data_db(7, "b"));
    assert_eq!(parse_data_db("shard_0007"), None);
    assert_eq!(parse_shard_db(&db), None);
    // The longest database name leaves the table name its full budget.
    let long = "é".repeat(32);
    assert_eq!(data_db(1, &long).len(), 27);
    let t = TableId::new("db", "a/b");
    assert_eq!(TableId::from_path(&t.path()), Some(t));
}

#[test]
fn old_layouts_are_refused_and_new_directories_marked() {
    assert_eq!(layout_decision(None, false), Ok(true));
    assert_eq!(layout_decision(None, true), Err("1".into()));
    assert_eq!(
        layout_decision(Some(parse_layout_file(&layout_file_text())), true),
        Ok(false)
    );
    assert_eq!(
        layout_decision(Some(parse_layout_file("shardhouse storage layout 3")), true),
        Err("3".into())
    );
}

#[test]
fn shard_db_names_round_trip() {
    assert_eq!(shard_db(7), "shard_0007");
    assert_eq!(shard_db(12345), "shard_12345");
    assert_eq!(parse_shard_db("shard_0007"), Some(7));
    assert_eq!(parse_shard_db("shard_12345"), Some(12345));
    assert_eq!(parse_shard_db("shard_7"), None);
    assert_eq!(parse_shard_db("system"), None);
}

#[test]
fn identifiers_and_literals_are_escaped() {
    assert_eq!(ident("a`b"), "`a\\`b`");
    assert_eq!(ident("x\\"), "`x\\\\`");
    assert_eq!(literal("it's"), "'it\\'s'");
}

#[test]
fn batch_schema_is_checked() {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let ok = schema(&[
        ("time", ts.clone()),
        ("series_id", DataType::UInt64),
        ("usage", DataType::Float64),
        ("host_up", DataType::Boolean),
    ]);
    let f = batch_fields("cpu", &ok).unwrap();
    assert_eq!(
        f,
        vec![
            ("usage".to_string(), FieldType::Float64),
            ("host_up".to_string(), FieldType::Bool)
        ]
    );
    let no_sid = schema(&[("time", ts.clone()), ("v", DataType::Float64)]);
    assert!(matches!(
        batch_fields("cpu", &no_sid),
        Err(EngineError::InvalidBatch { .. })
    ));
    let bad_time = schema(&[("time", DataType::Int64), ("series_id", DataType::UInt64)]);
    assert!(batch_fields("cpu", &bad_time).is_err());
    let bad_field = schema(&[
        ("time", ts),
        ("series_id", DataType::UInt64),
        ("v", DataType::Float32),
    ]);
    let err = batch_fields("cpu", &bad_field).unwrap_err().to_string();
    assert!(err.contains("`v`") && err.contains("Float32"), "{err}");
}

#[test]
fn conflicts_name_field_and_both_types() {
    let offered = vec![
        ("a".to_string(), FieldType::Float64),
        ("b".to_string(), FieldType::String),
    ];
    let stored = |n: &str| match n {
        "a" => Some(FieldType::Float64),
        "b" => Some(FieldType::Int64),
        _ => None,
    };
    let err = check_conflicts("cpu", &offered, stored)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`b`") && err.contains("Int64") && err.contains("String"),
        "{err}"
    );
    assert!(check_conflicts("cpu", &offered[..1], stored).is_ok());
}

#[test]
fn clickhouse_types_round_trip() {
    for t in [
        FieldType::Float64,
        FieldType::Int64,
        FieldType::UInt64,
        FieldType::String,
        FieldType::Bool,
    ] {
        assert_eq!(FieldType::from_clickhouse(t.clickhouse()), Some(t));
        assert_eq!(FieldType::from_arrow(&t.arrow()), Some(t));
    }
    assert_eq!(FieldType::from_clickhouse("Array(UInt8)"), None);
}

#[test]
fn measurement_names() {
    assert!(validate_measurement("cpu").is_ok());
    assert!(validate_measurement("_series").is_err());
    assert!(validate_measurement("_database").is_err());
    assert!(validate_measurement("").is_err());
    // InfluxDB allows a leading `_`; only the engine's own names are kept.
    assert!(validate_measurement("_cpu").is_ok());
    assert!(validate_measurement("_").is_ok());
    assert!(!is_engine_table("_cpu"));
    assert!(is_engine_table("_series"));
}

#[test]
fn ddl_quotes_names() {
    let sql = create_fact_table(
        "shard_0001",
        "cpu load",
        &[("v".into(), FieldType::Float64)],
        FactOrder::SeriesTime,
    );
    assert!(sql.contains("`shard_0001`.`cpu load`"), "{sql}");
    assert!(
        sql.contains("`v` SimpleAggregateFunction(anyLast, Nullable(Float64))"),
        "{sql}"
    );
    assert!(sql.contains("ORDER BY (series_id, time)"), "{sql}");
}

#[test]
fn no_table_syncs_file_by_file() {
    // Durability comes from one syncfs per flush (engine.rs); per-file
    // fsyncs would be ~10 device flushes per part on the WAL's disk.
    let mut ddl = create_shard("shard_0001");
    ddl.extend(create_database("shard_0001_00", "db", FactOrder::default()));
    ddl.push(create_fact_table(
        "shard_0001",
        "cpu",
        &[("v".into(), FieldType::Float64)],
        FactOrder::default(),
    ));
    for q in &ddl {
        assert!(!q.contains("fsync"), "{q}");
    }
    assert!(ddl.iter().any(|q| q.contains(FLUSHED_ENGINE)));
}

#[test]
fn fact_orders_round_trip_through_names_and_sorting_keys() {
    for o in [FactOrder::SeriesTime, FactOrder::HourSeriesTime] {
        assert_eq!(FactOrder::parse(o.name()), Some(o));
        let sql = create_fact_table("d", "cpu", &[], o);
        assert!(
            sql.ends_with(&format!("ORDER BY {}", o.order_by())),
            "{sql}"
        );
    }
    // As system.tables lists them.
    assert_eq!(
        FactOrder::from_sorting_key("series_id, time"),
        Some(FactOrder::SeriesTime)
    );
    assert_eq!(
        FactOrder::from_sorting_key("toStartOfHour(time), series_id, time"),
        Some(FactOrder::HourSeriesTime)
    );
    assert_eq!(FactOrder::from_sorting_key("time, series_id"), None);
    assert_eq!(FactOrder::parse("time-first"), None);
    assert_eq!(FactOrder::default(), FactOrder::SeriesTime);
}
