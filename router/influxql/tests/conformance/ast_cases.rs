//! Trees built by hand for the forms whose shape matters most (Grafana's
//! queries, precedence, subqueries, SHOW TAG VALUES), and bind parameters.

use shardhouse_influxql::*;

fn only(text: &str) -> Statement {
    parse_statement(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn select(text: &str) -> SelectStatement {
    match only(text) {
        Statement::Select(s) => *s,
        other => panic!("not a SELECT: {other}"),
    }
}

const SECOND: i64 = 1_000_000_000;
const MS: i64 = 1_000_000;

#[test]
fn grafana_time_series_query() {
    let got = select(
        r#"SELECT mean("value") FROM "cpu" WHERE ("host" =~ /^a$/) AND time >= 1795385275890ms and time <= 1795388870598ms GROUP BY time(10s), "host" fill(null)"#,
    );
    let host = Expr::binary(BinaryOp::EqRegex, Expr::var("host"), Expr::regex("^a$"));
    let from = Expr::binary(
        BinaryOp::GtEq,
        Expr::var("time"),
        Expr::duration(1_795_385_275_890 * MS),
    );
    let to = Expr::binary(
        BinaryOp::LtEq,
        Expr::var("time"),
        Expr::duration(1_795_388_870_598 * MS),
    );
    let want = SelectStatement {
        fields: vec![Field::new(Expr::call("mean", vec![Expr::var("value")]))],
        from: vec![Source::Measurement(MeasurementName::named("cpu"))],
        condition: Some(Expr::binary(
            BinaryOp::And,
            Expr::binary(BinaryOp::And, host, from),
            to,
        )),
        group_by: vec![
            Dimension::Time {
                interval: 10 * SECOND,
                offset: None,
            },
            Dimension::Tag("host".into()),
        ],
        fill: Some(Fill::Null),
        ..SelectStatement::default()
    };
    assert_eq!(got, want);
}

#[test]
fn grafana_subquery() {
    let got =
        select(r#"SELECT max("x") FROM (SELECT mean("x") AS "x" FROM "m" GROUP BY time(1m))"#);
    let inner = SelectStatement {
        fields: vec![Field {
            expr: Expr::call("mean", vec![Expr::var("x")]),
            alias: Some("x".into()),
        }],
        from: vec![Source::Measurement(MeasurementName::named("m"))],
        group_by: vec![Dimension::Time {
            interval: 60 * SECOND,
            offset: None,
        }],
        ..SelectStatement::default()
    };
    let want = SelectStatement {
        fields: vec![Field::new(Expr::call("max", vec![Expr::var("x")]))],
        from: vec![Source::Subquery(Box::new(inner))],
        ..SelectStatement::default()
    };
    assert_eq!(got, want);
}

#[test]
fn precedence_and_associativity() {
    let field = |text: &str| {
        select(&format!("SELECT {text} FROM m")).fields[0]
            .expr
            .clone()
    };
    let (a, b, c) = (Expr::var("a"), Expr::var("b"), Expr::var("c"));
    assert_eq!(
        field("a + b * c"),
        Expr::binary(
            BinaryOp::Add,
            a.clone(),
            Expr::binary(BinaryOp::Mul, b.clone(), c.clone())
        )
    );
    assert_eq!(
        field("a - b - c"),
        Expr::binary(
            BinaryOp::Sub,
            Expr::binary(BinaryOp::Sub, a.clone(), b.clone()),
            c.clone()
        )
    );
    assert_eq!(
        field("a = 1 OR b = 2 AND c = 3"),
        Expr::binary(
            BinaryOp::Or,
            Expr::binary(BinaryOp::Eq, a.clone(), Expr::int(1)),
            Expr::binary(
                BinaryOp::And,
                Expr::binary(BinaryOp::Eq, b.clone(), Expr::int(2)),
                Expr::binary(BinaryOp::Eq, c.clone(), Expr::int(3)),
            ),
        )
    );
    assert_eq!(field("-a"), Expr::binary(BinaryOp::Mul, Expr::int(-1), a));
    assert_eq!(field("-2.5"), Expr::float(-2.5));
    assert_eq!(field("-1h"), Expr::duration(-3_600 * SECOND));
}

#[test]
fn measurement_qualifiers() {
    let from = |text: &str| match &select(&format!("SELECT a FROM {text}")).from[0] {
        Source::Measurement(m) => m.clone(),
        Source::Subquery(_) => panic!("subquery"),
    };
    let m = from("db..m");
    assert_eq!(
        (m.database.as_deref(), m.retention_policy.as_deref()),
        (Some("db"), None)
    );
    let m = from(r#""db"."rp"./^cpu/"#);
    assert_eq!(
        (m.database.as_deref(), m.retention_policy.as_deref()),
        (Some("db"), Some("rp"))
    );
    assert_eq!(m.name, MeasurementMatch::Regex(Regex("^cpu".into())));
    let m = from("rp.m");
    assert_eq!(
        (m.database, m.retention_policy.as_deref()),
        (None, Some("rp"))
    );
}

#[test]
fn show_tag_values_tree() {
    let got = only(
        r#"SHOW TAG VALUES ON "db" FROM "cpu" WITH KEY IN ("region", "host") WHERE "service" = 'redis' LIMIT 5"#,
    );
    let want = Statement::ShowTagValues(ShowTagValues {
        database: Some("db".into()),
        from: vec![MeasurementName::named("cpu")],
        key: TagKeyMatch::In(vec!["region".into(), "host".into()]),
        condition: Some(Expr::binary(
            BinaryOp::Eq,
            Expr::var("service"),
            Expr::string("redis"),
        )),
        limit: Some(5),
        offset: None,
    });
    assert_eq!(got, want);
}

#[test]
fn create_database_tree() {
    let got = only(
        r#"CREATE DATABASE "bar" WITH DURATION 1d REPLICATION 1 SHARD DURATION 30m NAME "myrp""#,
    );
    let want = Statement::CreateDatabase(CreateDatabase {
        name: "bar".into(),
        retention_policy: Some(RetentionPolicyOptions {
            duration: Some(RetentionDuration::Nanos(86_400 * SECOND)),
            replication: Some(1),
            shard_duration: Some(1_800 * SECOND),
            name: Some("myrp".into()),
        }),
    });
    assert_eq!(got, want);
}

#[test]
fn several_statements_keep_their_order() {
    let query = parse("SHOW DATABASES; SELECT a FROM m; DROP MEASUREMENT m").unwrap();
    assert_eq!(query.statements.len(), 3);
    assert_eq!(query.statements[0], Statement::ShowDatabases);
    assert!(matches!(query.statements[1], Statement::Select(_)));
    assert_eq!(
        query.statements[2],
        Statement::DropMeasurement { name: "m".into() }
    );
    let err = parse_statement("SHOW DATABASES; SHOW DATABASES").unwrap_err();
    assert_eq!(err.position.column, 15);
}

#[test]
fn bind_parameters_are_substituted() {
    let params: Params = [
        ("m", ParamValue::Identifier("cpu".into())),
        ("host", ParamValue::String("a".into())),
        ("d", ParamValue::Duration(3_600 * SECOND)),
        ("i", ParamValue::Duration(60 * SECOND)),
        ("n", ParamValue::Integer(10)),
        ("re", ParamValue::Regex("^web".into())),
        ("f", ParamValue::Float(2.5)),
        ("up", ParamValue::Boolean(true)),
        ("field", ParamValue::Identifier("usage".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let query = parse_with_params(
        "SELECT mean($field) * $f FROM $m WHERE host = $host AND dc =~ $re AND up = $up \
         AND time > now() - $d GROUP BY time($i) LIMIT $n",
        &params,
    )
    .unwrap();
    assert_eq!(
        query.to_string(),
        "SELECT mean(usage) * 2.5 FROM cpu WHERE host = 'a' AND dc =~ /^web/ AND up = true \
         AND time > now() - 1h GROUP BY time(1m) LIMIT 10"
    );
    let err = parse_with_params("SELECT a FROM m LIMIT $host", &params).unwrap_err();
    assert!(
        err.to_string()
            .contains("parameter $host cannot be used here"),
        "{err}"
    );
    let err = parse_with_params("SELECT a FROM m WHERE a = $nope", &params).unwrap_err();
    assert_eq!(err.kind, ErrorKind::MissingParameter("nope".into()));
    let bad: Params = [("re".to_string(), ParamValue::Regex("(".into()))].into();
    let err = parse_with_params("SELECT a FROM m WHERE a =~ $re", &bad).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::Regex { .. }), "{err}");
}

#[test]
fn errors_carry_offsets_lines_and_columns() {
    let err = parse("SELECT a\nFROM m\nWHERE µ = 1").unwrap_err();
    // `µ` is two bytes: the column counts characters, the offset bytes.
    assert_eq!(err.position.line, 3);
    assert_eq!(err.position.column, 7);
    assert_eq!(err.position.offset, 22);
    assert_eq!(
        err.kind,
        ErrorKind::Unexpected {
            found: "µ".into(),
            expected: vec![
                "identifier".into(),
                "string".into(),
                "number".into(),
                "bool".into()
            ],
        }
    );
    assert_eq!(
        err.to_string(),
        "found µ, expected identifier, string, number, bool at line 3, char 7"
    );
}

#[test]
fn deep_nesting_is_refused_not_overflowing() {
    let text = format!("SELECT {}a{} FROM m", "(".repeat(500), ")".repeat(500));
    let err = parse(&text).unwrap_err();
    assert!(err.to_string().contains("nested deeper than"), "{err}");
    let text = format!("SELECT a FROM m WHERE a = {}b", "- ".repeat(500));
    assert!(parse(&text)
        .unwrap_err()
        .to_string()
        .contains("nested deeper than"));
    let mut sub = "SELECT a FROM m".to_string();
    for _ in 0..200 {
        sub = format!("SELECT a FROM ({sub})");
    }
    assert!(parse(&sub)
        .unwrap_err()
        .to_string()
        .contains("nested deeper than"));
    let ok = format!("SELECT {}a{} FROM m", "(".repeat(20), ")".repeat(20));
    assert!(parse(&ok).is_ok());
}
