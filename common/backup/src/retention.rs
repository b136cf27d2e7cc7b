//! Retention of backups: keep the newest N, delete the others' objects
//! that no kept backup names. A pure plan over the manifests.

use std::collections::BTreeSet;

use crate::manifest::Manifest;
use crate::objects::ObjectId;

/// What to delete, in this order: manifests first (a backup stops existing
/// before any of its objects go), then the objects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub delete_backups: Vec<String>,
    pub delete_objects: BTreeSet<ObjectId>,
    pub keep_backups: Vec<String>,
}

/// Keeps the `keep` newest backups (by start time, then id).
pub fn keep_newest(manifests: &[Manifest], keep: usize) -> Plan {
    let mut order: Vec<&Manifest> = manifests.iter().collect();
    order.sort_by(|a, b| (b.started_ms, &b.id).cmp(&(a.started_ms, &a.id)));
    let (kept, dropped) = order.split_at(keep.min(order.len()));
    plan(kept, dropped)
}

/// Deletes the named backups and keeps the others.
pub fn delete_ids(manifests: &[Manifest], ids: &[String]) -> Plan {
    let (dropped, kept): (Vec<&Manifest>, Vec<&Manifest>) =
        manifests.iter().partition(|m| ids.contains(&m.id));
    plan(&kept, &dropped)
}

fn plan(kept: &[&Manifest], dropped: &[&Manifest]) -> Plan {
    let named: BTreeSet<ObjectId> = kept.iter().flat_map(|m| m.objects()).collect();
    Plan {
        delete_backups: dropped.iter().map(|m| m.id.clone()).collect(),
        delete_objects: dropped
            .iter()
            .flat_map(|m| m.objects())
            .filter(|o| !named.contains(o))
            .collect(),
        keep_backups: kept.iter().map(|m| m.id.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::tests::manifest;

    fn at(id: &str, started_ms: u64, contents: &[&str]) -> Manifest {
        Manifest {
            started_ms,
            ..manifest(id, contents)
        }
    }

    #[test]
    fn an_object_a_kept_backup_names_is_never_deleted() {
        let ms = [
            at("b1", 1, &["old", "shared"]),
            at("b2", 2, &["shared", "mid"]),
            at("b3", 3, &["shared", "new"]),
        ];
        let p = keep_newest(&ms, 2);
        assert_eq!(p.keep_backups, ["b3", "b2"]);
        assert_eq!(p.delete_backups, ["b1"]);
        assert_eq!(p.delete_objects, [ObjectId::of(b"old")].into());
        let p = keep_newest(&ms, 1);
        assert_eq!(
            p.delete_objects,
            [ObjectId::of(b"old"), ObjectId::of(b"mid")].into()
        );
        assert_eq!(keep_newest(&ms, 5).delete_objects, BTreeSet::new());
        let p = keep_newest(&ms, 0);
        assert_eq!(p.delete_objects.len(), 4);
    }

    #[test]
    fn deleting_by_id_keeps_what_others_name() {
        let ms = [at("b1", 1, &["a", "b"]), at("b2", 2, &["b", "c"])];
        let p = delete_ids(&ms, &["b2".to_string()]);
        assert_eq!(p.delete_backups, ["b2"]);
        assert_eq!(p.delete_objects, [ObjectId::of(b"c")].into());
        assert_eq!(
            delete_ids(&ms, &["zz".to_string()]),
            Plan {
                keep_backups: vec!["b1".into(), "b2".into()],
                ..Plan::default()
            }
        );
    }
}
