//! Fuzzes the line protocol parser: any input must parse or be rejected
//! with an error, never panic; accepted points must re-derive a series key.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run lineproto corpus/lineproto`
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardhouse_common::lineproto;

fuzz_target!(|data: &[u8]| {
    for (_, point) in lineproto::parse_body(data) {
        if let Ok(p) = point {
            assert!(!p.measurement.is_empty());
            assert!(!p.fields.is_empty());
            let tags: Vec<(&str, &str)> =
                p.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let _ = shardhouse_common::series::series_id(&p.measurement, &tags);
        }
    }
});
