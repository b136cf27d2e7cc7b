//! Field types one shard stores, per measurement. Pure data, no I/O.
//!
//! A field's type is decided by the first entry of the shard's log that
//! carries the field, when that entry is applied. Every replica applies the
//! same log in the same order from the same starting state (its stored
//! columns, or a snapshot's), so every replica decides the same: an entry
//! whose types conflict with earlier entries is rejected on every replica
//! alike, and nothing is ever cast. (A catalog shared by all the shards of a
//! node, as before, saw entries of different shards in a different order on
//! each node, and replicas disagreed.)

use std::collections::HashMap;

use crate::error::{EngineError, Result};
use crate::layout::{FieldType, TableId};

/// One table's fields offered by an entry.
pub type Offered<'a> = (&'a TableId, &'a [(String, FieldType)]);

/// The decided field types of one shard, per (database, table).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShardCatalog {
    tables: HashMap<TableId, HashMap<String, FieldType>>,
}

/// Fields an entry introduces: (table, field, type).
pub type Additions = Vec<(TableId, String, FieldType)>;

impl ShardCatalog {
    /// The stored type of `table`.`field`, if decided.
    pub fn field(&self, table: &TableId, field: &str) -> Option<FieldType> {
        self.tables.get(table)?.get(field).copied()
    }

    /// Fails with the first offered field whose type differs from the
    /// decided one (admission on the leader: no reservation, the apply
    /// decides).
    pub fn check(&self, table: &TableId, offered: &[(String, FieldType)]) -> Result<()> {
        let Some(known) = self.tables.get(table) else {
            return Ok(());
        };
        crate::layout::check_conflicts(&table.table, offered, |n| known.get(n).copied())
    }

    /// Decides a whole entry: each table's fields against the decided types
    /// and against earlier tables of the same entry (a coalesced entry can
    /// carry two requests that introduce one field with two types). Returns
    /// the fields it introduces, or the first conflict (the entry is then
    /// rejected whole, and nothing is recorded).
    pub fn decide(&self, tables: &[Offered<'_>]) -> Result<Additions> {
        let mut added: Additions = Vec::new();
        for (measurement, offered) in tables {
            for (name, t) in offered.iter() {
                let decided = self.field(measurement, name).or_else(|| {
                    added
                        .iter()
                        .find(|(m, f, _)| m == *measurement && f == name)
                        .map(|(_, _, t)| *t)
                });
                match decided {
                    Some(s) if s != *t => {
                        return Err(EngineError::FieldTypeConflict {
                            measurement: measurement.table.clone(),
                            field: name.clone(),
                            stored: s.name().to_string(),
                            offered: t.name().to_string(),
                        })
                    }
                    Some(_) => {}
                    None => added.push(((*measurement).clone(), name.clone(), *t)),
                }
            }
        }
        Ok(added)
    }

    /// Records what [`ShardCatalog::decide`] returned.
    pub fn record(&mut self, additions: Additions) {
        for (m, f, t) in additions {
            self.tables.entry(m).or_default().entry(f).or_insert(t);
        }
    }

    /// Records a stored column (start-up, snapshot import). The first type
    /// seen for a field stays.
    pub fn insert(&mut self, table: &TableId, field: &str, t: FieldType) {
        self.tables
            .entry(table.clone())
            .or_default()
            .entry(field.to_string())
            .or_insert(t);
    }

    /// The decided fields of `database`'s measurements (not the engine's
    /// own tables), or of one `table`: (table, field, type), sorted.
    pub fn fields_of(
        &self,
        database: &str,
        table: Option<&str>,
    ) -> Vec<(String, String, FieldType)> {
        let mut out: Vec<(String, String, FieldType)> = self
            .tables
            .iter()
            .filter(|(id, _)| {
                id.database == database
                    && match table {
                        Some(t) => id.table == t,
                        None => !crate::layout::is_engine_table(&id.table),
                    }
            })
            .flat_map(|(id, fields)| {
                fields
                    .iter()
                    .map(|(f, t)| (id.table.clone(), f.clone(), *t))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Forgets everything (the shard's data was replaced or dropped).
    pub fn clear(&mut self) {
        self.tables.clear();
    }

    /// Forgets what matches (a dropped database or table).
    pub fn forget(&mut self, keep: impl Fn(&TableId) -> bool) {
        self.tables.retain(|t, _| keep(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FieldType::{Bool, Float64, Int64};

    #[test]
    fn fields_of_lists_one_database_user_tables_sorted() {
        let mut c = ShardCatalog::default();
        c.insert(&TableId::new("db", "mem"), "used", Int64);
        c.insert(&TableId::new("db", "cpu"), "usage", Float64);
        c.insert(&TableId::new("db", "cpu"), "idle", Float64);
        c.insert(&TableId::new("db", "_samples"), "value", Float64);
        c.insert(&TableId::new("db", "_cpu"), "value", Int64);
        c.insert(&TableId::new("other", "cpu"), "up", Bool);
        let all = c.fields_of("db", None);
        assert_eq!(
            all,
            vec![
                ("_cpu".into(), "value".into(), Int64),
                ("cpu".into(), "idle".into(), Float64),
                ("cpu".into(), "usage".into(), Float64),
                ("mem".into(), "used".into(), Int64),
            ]
        );
        assert_eq!(c.fields_of("db", Some("mem")).len(), 1);
        assert!(c.fields_of("db", Some("disk")).is_empty());
        assert!(c.fields_of("nodb", None).is_empty());
    }

    fn f(n: &str, t: FieldType) -> (String, FieldType) {
        (n.to_string(), t)
    }

    fn tid(m: &str) -> TableId {
        TableId::new("db", m)
    }

    #[test]
    fn the_first_entry_in_log_order_decides() {
        let mut cat = ShardCatalog::default();
        let a = [f("g", Float64)];
        let b = [f("g", Int64)];
        // Log order a, b: a decides Float64, b is rejected.
        let add = cat.decide(&[(&tid("m"), &a)]).unwrap();
        cat.record(add);
        let err = cat.decide(&[(&tid("m"), &b)]).unwrap_err().to_string();
        assert!(
            err.contains("`g`") && err.contains("Float64") && err.contains("Int64"),
            "{err}"
        );
        assert_eq!(cat.field(&tid("m"), "g"), Some(Float64));
        // The other order on another shard decides the other way.
        let mut other = ShardCatalog::default();
        let add = other.decide(&[(&tid("m"), &b)]).unwrap();
        other.record(add);
        assert!(other.decide(&[(&tid("m"), &a)]).is_err());
        assert_eq!(other.field(&tid("m"), "g"), Some(Int64));
    }

    #[test]
    fn two_tables_of_one_entry_that_disagree_reject_it_whole() {
        let cat = ShardCatalog::default();
        let a = [f("g", Float64), f("h", Bool)];
        let b = [f("g", Int64)];
        assert!(cat.decide(&[(&tid("m"), &a), (&tid("m"), &b)]).is_err());
        // Same field name in another measurement is another column.
        let add = cat.decide(&[(&tid("m"), &a), (&tid("n"), &b)]).unwrap();
        assert_eq!(add.len(), 3);
    }

    #[test]
    fn known_fields_add_nothing_and_admission_checks_without_reserving() {
        let mut cat = ShardCatalog::default();
        cat.insert(&tid("cpu"), "usage", Float64);
        let same = [f("usage", Float64)];
        assert_eq!(cat.decide(&[(&tid("cpu"), &same)]).unwrap(), vec![]);
        assert!(cat.check(&tid("cpu"), &same).is_ok());
        assert!(cat
            .check(&tid("cpu"), &[f("usage", FieldType::String)])
            .is_err());
        // check() never records: a new field stays undecided.
        assert!(cat.check(&tid("cpu"), &[f("new", Int64)]).is_ok());
        assert_eq!(cat.field(&tid("cpu"), "new"), None);
    }
}
