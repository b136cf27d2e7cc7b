//! Fuzzes the InfluxQL parser (router/influxql): any text parses or fails
//! with a positioned error; what parses prints back as text that parses.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run influxql`
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = shardhouse_influxql::parse(text) {
        for st in &q.statements {
            let printed = st.to_string();
            assert!(shardhouse_influxql::parse(&printed).is_ok(), "{printed:?}");
        }
    }
});
