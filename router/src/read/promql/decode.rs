//! A shard's answer to a selection (`samples_sql`: rows `(series_id, t,
//! bits)`, ordered by series) decoded column by column: one pass finds
//! each series' runs of rows and so its sample count, the second
//! allocates each series' vector once at that size and copies its runs
//! from the flat column buffers. No per-row lookups, no vector growing
//! one push at a time.

use std::collections::HashMap;
use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowPrimitiveType, Int64Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;

/// A shard answered a selection in another shape than `samples_sql` asks
/// for: a router and a node of different versions.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ShapeError {
    #[error("{found} columns, not the 3 of a selection")]
    ColumnCount { found: usize },
    #[error("{column} is {found}, not {expected}")]
    ColumnType {
        column: &'static str,
        found: DataType,
        expected: DataType,
    },
}

/// One series' samples in time order, keyed by its id.
pub type SeriesSamples = (u64, Vec<(i64, f64)>);

fn column<'a, T: ArrowPrimitiveType>(
    b: &'a RecordBatch,
    i: usize,
    column: &'static str,
) -> Result<&'a [T::Native], ShapeError> {
    let col = b.column(i);
    col.as_primitive_opt::<T>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| ShapeError::ColumnType {
            column,
            found: col.data_type().clone(),
            expected: T::DATA_TYPE,
        })
}

/// The three columns of a batch: series ids, times (ms), value bits.
type Columns<'a> = (&'a [u64], &'a [i64], &'a [u64]);

fn columns(b: &RecordBatch) -> Result<Columns<'_>, ShapeError> {
    if b.num_columns() < 3 {
        return Err(ShapeError::ColumnCount {
            found: b.num_columns(),
        });
    }
    Ok((
        column::<UInt64Type>(b, 0, "series_id")?,
        column::<Int64Type>(b, 1, "t")?,
        column::<UInt64Type>(b, 2, "bits")?,
    ))
}

/// The runs of equal ids in `ids`, in order.
fn runs(ids: &[u64]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        let id = *ids.get(start)?;
        let len = ids[start..].iter().take_while(|&&i| i == id).count();
        let run = start..start + len;
        start += len;
        Some(run)
    })
}

/// Every series of one shard's answer (its batches, in order), in the
/// order of first appearance. Rows of a series need not be contiguous
/// (an unordered answer costs one run per row, nothing worse); samples
/// out of time order are sorted.
pub fn series_samples(batches: &[RecordBatch]) -> Result<Vec<SeriesSamples>, ShapeError> {
    let cols: Vec<Columns<'_>> = batches
        .iter()
        .filter(|b| b.num_rows() > 0)
        .map(columns)
        .collect::<Result<_, _>>()?;
    // Pass 1: each run's series, and each series' sample count.
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut counts: Vec<(u64, usize)> = Vec::new();
    let mut placed: Vec<(usize, Range<usize>, usize)> = Vec::new();
    for (c, (ids, _, _)) in cols.iter().enumerate() {
        for run in runs(ids) {
            let id = ids[run.start];
            let s = *index.entry(id).or_insert_with(|| {
                counts.push((id, 0));
                counts.len() - 1
            });
            counts[s].1 += run.len();
            placed.push((c, run, s));
        }
    }
    // Pass 2: vectors at their final size, filled run by run.
    let mut out: Vec<SeriesSamples> = counts
        .iter()
        .map(|&(id, n)| (id, Vec::with_capacity(n)))
        .collect();
    for (c, run, s) in placed {
        let (_, times, bits) = cols[c];
        out[s].1.extend(
            times[run.clone()]
                .iter()
                .zip(&bits[run])
                .map(|(&t, &b)| (t, f64::from_bits(b))),
        );
    }
    for (_, samples) in &mut out {
        if !samples.is_sorted_by_key(|s| s.0) {
            samples.sort_by_key(|s| s.0);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, UInt64Array};

    use super::*;

    fn batch(rows: &[(u64, i64, f64)]) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "series_id",
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
            ),
            (
                "t",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))) as ArrayRef,
            ),
            (
                "bits",
                Arc::new(UInt64Array::from_iter_values(
                    rows.iter().map(|r| r.2.to_bits()),
                )) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn runs_of_rows_become_series_allocated_once() {
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let out = series_samples(&[
            batch(&[(7, 10, 1.0), (7, 20, stale), (9, 5, 2.0)]),
            // A series continued in the next batch.
            batch(&[(9, 15, 3.0), (4, 1, 0.5)]),
        ])
        .unwrap();
        let ids: Vec<u64> = out.iter().map(|s| s.0).collect();
        assert_eq!(ids, [7, 9, 4]);
        assert_eq!(out[0].1[0], (10, 1.0));
        assert_eq!(
            out[0].1[1].1.to_bits(),
            0x7ff0_0000_0000_0002,
            "stale markers keep their bits"
        );
        assert_eq!(out[1].1, vec![(5, 2.0), (15, 3.0)]);
        assert_eq!(out[1].1.capacity(), 2, "sized from the counts");
        assert_eq!(out[2].1, vec![(1, 0.5)]);
    }

    #[test]
    fn rows_out_of_order_are_grouped_and_sorted() {
        let out = series_samples(&[batch(&[(1, 30, 3.0), (2, 5, 9.0), (1, 10, 1.0)])]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], (1, vec![(10, 1.0), (30, 3.0)]));
        assert_eq!(out[1], (2, vec![(5, 9.0)]));
    }

    #[test]
    fn no_rows_are_no_series() {
        assert!(series_samples(&[]).unwrap().is_empty());
        assert!(series_samples(&[batch(&[])]).unwrap().is_empty());
    }

    #[test]
    fn an_answer_of_another_shape_is_an_error() {
        let b = batch(&[(1, 1, 1.0)]);
        let ids = RecordBatch::try_from_iter([("series_id", b.column(0).clone())]).unwrap();
        assert_eq!(
            series_samples(&[ids]).unwrap_err(),
            ShapeError::ColumnCount { found: 1 }
        );
        let swapped = RecordBatch::try_from_iter([
            ("series_id", b.column(0).clone()),
            ("t", b.column(2).clone()),
            ("bits", b.column(2).clone()),
        ])
        .unwrap();
        let e = series_samples(&[swapped]).unwrap_err();
        assert_eq!(
            e,
            ShapeError::ColumnType {
                column: "t",
                found: DataType::UInt64,
                expected: DataType::Int64,
            }
        );
        assert_eq!(e.to_string(), "t is UInt64, not Int64");
    }
}
