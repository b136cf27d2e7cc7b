//! Property tests of what the router and nodes decode from clients: any
//! bytes or text give a value or a named error, never a panic. Bounded
//! case counts keep the file to a few seconds in `make test`; the
//! `fuzz/` targets run the same entry points without a bound.

use proptest::prelude::*;
use shardhouse_common::{prom_proto, proto, sql_check};

/// Fragments InfluxQL and SQL are made of, so generated text reaches past
/// the first token more often than uniform random strings do.
const WORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "time(1m)",
    "fill(null)",
    "ORDER",
    "LIMIT",
    "SLIMIT",
    "OFFSET",
    "SHOW",
    "MEASUREMENTS",
    "TAG",
    "KEYS",
    "VALUES",
    "WITH",
    "KEY",
    "=",
    "=~",
    "!~",
    "/^a.*$/",
    "DROP",
    "SERIES",
    "DELETE",
    "DATABASE",
    "CREATE",
    "ON",
    "AND",
    "OR",
    "NOT",
    "(",
    ")",
    ",",
    ";",
    "*",
    "mean(v)",
    "count(*)",
    "\"q\"",
    "'s'",
    "x",
    "1",
    "-1.5e3",
    "now()",
    "-",
    "1h",
    "tz('UTC')",
    "::",
    "..",
    "$p",
    "FINAL",
    "JOIN",
    "UNION",
    "INTO",
    "AS",
    "`b`",
    "\\",
    "\n",
    "#",
    "--",
    "/*",
    "*/",
    "db..m",
    "1=1",
];

fn statement_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,200}",
        prop::collection::vec(prop::sample::select(WORDS), 0..24).prop_map(|w| w.join(" ")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn influxql_parses_or_names_the_error_position(text in statement_text()) {
        match shardhouse_influxql::parse(&text) {
            // What parsed prints back and parses again.
            Ok(q) => {
                for st in &q.statements {
                    let printed = st.to_string();
                    prop_assert!(shardhouse_influxql::parse(&printed).is_ok(), "{text:?} printed as {printed:?}");
                }
            }
            Err(e) => prop_assert!(e.to_string().contains("line"), "{e}"),
        }
    }

    #[test]
    fn sql_check_accepts_or_explains(text in statement_text()) {
        if let Err(e) = sql_check::check_select(&text) {
            prop_assert!(!e.is_empty());
        }
        let _ = sql_check::lex(&text);
    }

    #[test]
    fn remote_write_bodies_decode_or_fail(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = snap::raw::decompress_len(&bytes);
        let _ = snap::raw::Decoder::new().decompress_vec(&bytes);
        if let Err(e) = <prom_proto::WriteRequest as prost::Message>::decode(&bytes[..]) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn node_request_messages_decode_or_fail(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        use prost::Message;
        let _ = proto::WriteRequest::decode(&bytes[..]);
        let _ = proto::WriteManyRequest::decode(&bytes[..]);
        let _ = proto::QueryRequest::decode(&bytes[..]);
        let _ = proto::RaftBatch::decode(&bytes[..]);
        let _ = proto::StorageRequest::decode(&bytes[..]);
        let _ = shardhouse_common::ingest_proto::WriteRequest::decode(&bytes[..]);
    }

    #[test]
    fn msgpack_bodies_decode_or_fail(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = shardhouse_router::write::parse::decode_msgpack(&bytes) {
            prop_assert!(e.to_string().contains("msgpack"), "{e}");
        }
    }
}
