//! Merged parts need not be uploaded again when the parts they were
//! merged from are already in the destination.
//!
//! The engine merges parts in the background. A part merged since the
//! last backup is new content (new files, new checksums), so content
//! addressing alone would upload it again: one merge of a shard's large
//! parts can make an "incremental" backup upload a third of the data.
//! But a merge that only concatenates rows (no row was aggregated,
//! replaced, expired or deleted) holds exactly the rows of its sources,
//! and restoring the sources instead gives the same table (the engine
//! merges them again after the restore). [`sources_in_base`] decides
//! when a part of this backup can be named by the previous backup's
//! parts instead of uploading it.
//!
//! A part's name is `<partition>_<min block>_<max block>_<level>` with an
//! optional `_<mutation>`; partition ids never hold `_`. A merge of
//! parts of one partition covers their block ranges and has a higher
//! level. The sources of a merged part are exactly the parts of its
//! partition inside its block range that existed before the merge, so
//! the previous backup's parts inside the range are its sources when:
//! - the merged part and those parts carry no mutation (a mutation
//!   rewrites rows);
//! - they are disjoint, the first starts at the merged part's first
//!   block and the last ends at its last block;
//! - their row counts add up to the merged part's (a merge that
//!   aggregated, replaced or expired rows has fewer; a part written
//!   after the previous backup adds rows the previous parts lack);
//! - there are at most [`MAX_SOURCES`] of them, so a restore does not
//!   attach an unbounded number of small parts.

use crate::manifest::{PartEntry, TableEntry};

/// Most previous parts one merged part is replaced by.
pub const MAX_SOURCES: usize = 32;

/// A part name, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartName<'a> {
    pub partition: &'a str,
    pub min_block: u64,
    pub max_block: u64,
    pub level: u32,
    pub mutation: Option<u64>,
}

/// Parses `<partition>_<min>_<max>_<level>[_<mutation>]`; `None` for a
/// name of any other shape.
pub fn parse_part_name(name: &str) -> Option<PartName<'_>> {
    let mut it = name.split('_');
    let partition = it.next().filter(|p| !p.is_empty())?;
    let nums: Vec<&str> = it.collect();
    if !(3..=4).contains(&nums.len()) {
        return None;
    }
    let n = |s: &str| s.parse::<u64>().ok();
    let p = PartName {
        partition,
        min_block: n(nums[0])?,
        max_block: n(nums[1])?,
        level: u32::try_from(n(nums[2])?).ok()?,
        mutation: match nums.get(3) {
            Some(m) => Some(n(m)?),
            None => None,
        },
    };
    (p.min_block <= p.max_block).then_some(p)
}

/// The previous backup's parts of the same table that hold exactly the
/// rows of the merged part `name` (`rows` rows), in block order; `None`
/// when the part must be uploaded.
pub fn sources_in_base<'b>(
    name: &str,
    rows: u64,
    base: &'b TableEntry,
) -> Option<Vec<&'b PartEntry>> {
    let merged = parse_part_name(name)?;
    if merged.level == 0 || merged.mutation.is_some() || rows == 0 {
        return None;
    }
    let mut sources: Vec<(PartName<'_>, &PartEntry)> = Vec::new();
    for p in &base.parts {
        let Some(parsed) = parse_part_name(&p.name) else {
            continue;
        };
        if parsed.partition == merged.partition
            && parsed.min_block >= merged.min_block
            && parsed.max_block <= merged.max_block
        {
            if parsed.mutation.is_some() || p.rows == 0 {
                return None;
            }
            sources.push((parsed, p));
        }
    }
    if sources.is_empty() || sources.len() > MAX_SOURCES {
        return None;
    }
    sources.sort_by_key(|(n, _)| n.min_block);
    let disjoint = sources
        .windows(2)
        .all(|w| w[0].0.max_block < w[1].0.min_block);
    let spans = sources[0].0.min_block == merged.min_block
        && sources[sources.len() - 1].0.max_block == merged.max_block;
    let source_rows: u64 = sources.iter().map(|(_, p)| p.rows).sum();
    (disjoint && spans && source_rows == rows)
        .then(|| sources.into_iter().map(|(_, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, rows: u64) -> PartEntry {
        PartEntry {
            name: name.into(),
            rows,
            files: Vec::new(),
        }
    }

    fn table(parts: &[(&str, u64)]) -> TableEntry {
        TableEntry {
            database: "db".into(),
            table: "cpu".into(),
            uuid: "u".into(),
            fields: Vec::new(),
            order: None,
            parts: parts.iter().map(|(n, r)| part(n, *r)).collect(),
        }
    }

    fn names(found: Option<Vec<&PartEntry>>) -> Option<Vec<String>> {
        found.map(|ps| ps.iter().map(|p| p.name.clone()).collect())
    }

    #[test]
    fn part_names_parse_and_odd_names_do_not() {
        let p = parse_part_name("20261127_3_9_2").unwrap();
        assert_eq!(
            (p.partition, p.min_block, p.max_block, p.level, p.mutation),
            ("20261127", 3, 9, 2, None)
        );
        assert_eq!(parse_part_name("all_1_1_0_7").unwrap().mutation, Some(7));
        for bad in ["all_1_1", "all_2_1_0", "_1_1_0", "all_1_x_0", "a_1_1_0_1_1"] {
            assert_eq!(parse_part_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_concatenating_merge_is_named_by_its_sources() {
        let base = table(&[
            ("20261127_1_1_0", 10),
            ("20261127_3_3_0", 20),
            ("20261127_4_6_1", 30),
            ("20261128_2_2_0", 5),
            ("20261127_7_7_0", 1),
        ]);
        assert_eq!(
            names(sources_in_base("20261127_1_6_2", 60, &base)),
            Some(vec![
                "20261127_1_1_0".to_string(),
                "20261127_3_3_0".into(),
                "20261127_4_6_1".into()
            ])
        );
    }

    #[test]
    fn anything_else_is_uploaded() {
        let base = table(&[("p_1_1_0", 10), ("p_2_2_0", 20), ("p_3_3_0_9", 5)]);
        // Rows aggregated or replaced by the merge, or a later part in it.
        assert!(sources_in_base("p_1_2_1", 29, &base).is_none());
        assert!(sources_in_base("p_1_2_1", 31, &base).is_none());
        // The first source is not in the base.
        assert!(sources_in_base("p_0_2_1", 30, &base).is_none());
        // A mutated merged part, or a mutated source.
        assert!(sources_in_base("p_1_2_1_4", 30, &base).is_none());
        assert!(sources_in_base("p_1_3_1", 35, &base).is_none());
        // An unmerged part is itself or new.
        assert!(sources_in_base("p_1_1_0", 10, &base).is_none());
        // Sources without a row count (an older manifest).
        assert!(sources_in_base("p_1_2_1", 0, &table(&[("p_1_1_0", 0), ("p_2_2_0", 0)])).is_none());
        // Too many sources.
        let many: Vec<(String, u64)> = (1..=40).map(|b| (format!("p_{b}_{b}_0"), 1)).collect();
        let refs: Vec<(&str, u64)> = many.iter().map(|(n, r)| (n.as_str(), *r)).collect();
        assert!(sources_in_base("p_1_40_1", 40, &table(&refs)).is_none());
        assert!(sources_in_base("p_1_32_1", 32, &table(&refs)).is_some());
    }
}
