//! Appending one point to its table: field types checked against the
//! request's earlier points, the series admitted under the database's
//! cardinality limit, then the values pushed onto the table's columns. A
//! rejected point leaves no trace.

use super::columns::{FieldColumn, FieldTarget};
use super::state::{Admission, BatchState};
use super::{lossy, name_error, RejectReason};
use shardhouse_common::lineproto::FieldValue;
use shardhouse_common::names;

impl BatchState<'_> {
    /// Type-checks, admits and appends one point of series `slot`.
    #[inline]
    pub(super) fn append<'v, I>(
        &mut self,
        slot: u32,
        time: i64,
        fields: I,
        n_fields: usize,
    ) -> Result<(), (RejectReason, String)>
    where
        I: Iterator<Item = (&'v [u8], FieldValue<'v>)> + Clone,
    {
        let table_idx = self.slots[slot as usize].table as usize;
        self.check_field_types(table_idx, fields.clone())?;
        self.admit_series(slot)?;
        self.push_point(slot, table_idx, time, fields, n_fields);
        Ok(())
    }

    /// Step 1: field types must agree with earlier points of the
    /// measurement. Leaves in `self.targets` where each field goes. A
    /// column of the table has the measurement's type of its field, so the
    /// measurement's list is only searched for fields the table has not
    /// seen yet.
    #[inline(always)]
    fn check_field_types<'v, I>(
        &mut self,
        table_idx: usize,
        fields: I,
    ) -> Result<(), (RejectReason, String)>
    where
        I: Iterator<Item = (&'v [u8], FieldValue<'v>)>,
    {
        let t = &self.tables[table_idx];
        let m = t.measurement as usize;
        self.targets.clear();
        for (i, (k, v)) in fields.enumerate() {
            let ty = v.field_type();
            let (want, target) = match t.find_column(k, i) {
                Some(c) => (Some(t.columns[c].ty), FieldTarget::Column(c as u32)),
                None => match self.measurements[m].find(k, i) {
                    Some(j) => (
                        Some(self.measurements[m].fields[j].1),
                        FieldTarget::NewColumn,
                    ),
                    None => {
                        // A field new to the measurement: its key becomes a
                        // column name.
                        names::validate_field_key(k).map_err(name_error)?;
                        (None, FieldTarget::NewField)
                    }
                },
            };
            if let Some(want) = want {
                if want != ty {
                    return Err((
                        RejectReason::BadPoint,
                        format!(
                            "field type conflict: field {:?} of measurement {:?} is {} in an \
                             earlier point of this request, got {}",
                            lossy(k),
                            self.measurements[m].name,
                            want,
                            ty
                        ),
                    ));
                }
            }
            self.targets.push(target);
        }
        Ok(())
    }

    /// Step 2, cardinality: a series new to the database must fit the
    /// limit.
    #[inline(always)]
    fn admit_series(&mut self, slot: u32) -> Result<(), (RejectReason, String)> {
        let s = &self.slots[slot as usize];
        if matches!(s.admission, Admission::Admitted | Admission::Reserved) {
            return Ok(());
        }
        let series_id = s.series_id;
        let admitted = match (s.admission, self.db) {
            (Admission::Rejected, _) => false,
            (_, None) => true,
            (_, Some(db)) if self.reserving && self.take_place(db) => {
                self.reserved_slots.push(slot);
                self.slots[slot as usize].admission = Admission::Reserved;
                true
            }
            (_, Some(db)) => db.admit(series_id),
        };
        let s = &mut self.slots[slot as usize];
        if admitted {
            if s.admission != Admission::Reserved {
                s.admission = Admission::Admitted;
            }
            return Ok(());
        }
        s.admission = Admission::Rejected;
        let db = self.db.expect("rejected only with a db");
        Err((
            RejectReason::Cardinality,
            format!(
                "database {:?} reached its series limit of {} (--max-series-per-db); \
                 points of new series are rejected, existing series can still be written",
                db.name(),
                db.limit()
            ),
        ))
    }

    /// Step 3: pushes the point's time, series and values onto the table's
    /// columns, creating the columns `check_field_types` found missing.
    #[inline(always)]
    fn push_point<'v, I>(
        &mut self,
        slot: u32,
        table_idx: usize,
        time: i64,
        fields: I,
        n_fields: usize,
    ) where
        I: Iterator<Item = (&'v [u8], FieldValue<'v>)>,
    {
        let s = &mut self.slots[slot as usize];
        let t = &mut self.tables[table_idx];
        let m = t.measurement as usize;
        if !s.listed {
            s.listed = true;
            t.series.push(slot);
        }
        let series_id = s.series_id;
        let row = t.time.len();
        t.layout.resize(n_fields, 0);
        for (i, ((k, v), target)) in fields.zip(&self.targets).enumerate() {
            let c = match *target {
                FieldTarget::Column(c) => c as usize,
                FieldTarget::NewColumn | FieldTarget::NewField => {
                    if let FieldTarget::NewField = target {
                        self.measurements[m].fields.push((k.into(), v.field_type()));
                    }
                    t.columns
                        .push(FieldColumn::new(k, v.field_type(), row, t.rows_hint));
                    t.columns.len() - 1
                }
            };
            t.layout[i] = c as u32;
            let col = &mut t.columns[c];
            col.pad_to(row);
            col.push(v);
        }
        t.time.push(time);
        t.series_id.push(series_id);
        // Fields absent from this point stay null: padded lazily on the next
        // append of that column or at finish; only pad when the point had
        // fewer fields than the table has columns.
        if n_fields < t.columns.len() {
            for c in &mut t.columns {
                c.pad_to(row + 1);
            }
        }
        self.points += 1;
    }
}
