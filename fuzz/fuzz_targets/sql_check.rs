//! Fuzzes the SQL checker (common/src/sql_check.rs) that guards
//! `/api/v1/sql` and the nodes' planned reads: accept or explain, never panic.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run sql_check`
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardhouse_common::sql_check;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = sql_check::lex(text);
    if let Err(e) = sql_check::check_select(text) {
        assert!(!e.is_empty());
    }
});
