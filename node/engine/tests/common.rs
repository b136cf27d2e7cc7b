//! Helpers shared by the engine's integration tests (real chDB).
#![allow(dead_code)]

use std::path::PathBuf;

use arrow_array::RecordBatch;
use arrow_schema::DataType;

/// The engine directory the tests use; fails loudly when it is missing so a
/// machine without chDB never passes these tests silently.
pub fn chdb_dir() -> PathBuf {
    let dir = shardhouse_engine::loader::resolve_chdb_dir(None);
    assert!(
        shardhouse_engine::loader::driver_path(&dir).is_file(),
        "chDB engine not found at {}: run `make deps` or set SHARDHOUSE_CHDB_DIR",
        dir.display()
    );
    dir
}

/// Column `i` of all batches as strings.
pub fn col_strings(batches: &[RecordBatch], i: usize) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let c = arrow_cast::cast::cast(b.column(i), &DataType::Utf8).expect("cast to string");
        for j in 0..c.len() {
            out.push(arrow_cast::display::array_value_to_string(&c, j).expect("display"));
        }
    }
    out
}

/// The single value of a one-row, one-column result as u64.
pub fn scalar(batches: &[RecordBatch]) -> u64 {
    let v = col_strings(batches, 0);
    assert_eq!(v.len(), 1, "expected one row, got {v:?}");
    v[0].parse().expect("integer result")
}
