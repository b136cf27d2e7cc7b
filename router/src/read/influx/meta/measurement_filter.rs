//! `SHOW MEASUREMENTS WHERE`: InfluxDB decides per measurement, not per
//! series. `tag = 'v'` (or `=~`) keeps a measurement with the tag and some
//! series whose value matches; `tag != 'v'` (or `!~`) one with the tag and
//! no series whose value matches; a measurement without the tag is never
//! kept; `AND` / `OR` intersect / unite the sets; `_name` tests the name.
//! So `region !~ /ca/` leaves out a measurement with `region=caeast` among
//! its series, which a per-series filter would keep for its other series.
//!
//! Each shard counts, per measurement, its series with each tag of the
//! condition and those whose value matches; the router sums the shards'
//! counts and evaluates the condition on them.

use std::collections::BTreeMap;

use shardhouse_common::names::sql_literal;
use shardhouse_influxql::{BinaryOp, Expr, Literal};

use crate::error::{Error, Result};

/// One comparison of the condition.
#[derive(Debug, Clone, PartialEq)]
enum Leaf {
    /// `_name` compared with a value or a regex: the measurement's name.
    Name { op: BinaryOp, value: String },
    /// A tag compared with a value or a regex.
    Tag {
        key: String,
        op: BinaryOp,
        value: String,
    },
    /// Another system name (`_tagKey`, ...): matches no measurement.
    Nothing,
}

/// A checked condition: its comparisons in pre-order.
#[derive(Debug)]
pub(super) struct MeasurementFilter {
    condition: Expr,
    leaves: Vec<Leaf>,
}

/// Per measurement: for each tag comparison, (series with the tag,
/// series whose value matches), summed over the shards.
pub(super) type TagCounts = BTreeMap<String, Vec<(u64, u64)>>;

impl MeasurementFilter {
    /// Checks the condition as InfluxDB does, with its errors.
    pub(super) fn new(condition: &Expr) -> Result<Self> {
        let mut leaves = Vec::new();
        collect(condition, &mut leaves)?;
        Ok(Self {
            condition: condition.clone(),
            leaves,
        })
    }

    /// The query each shard runs: the measurement, then two counts per
    /// tag comparison (series with the tag, series whose value matches).
    pub(super) fn sql(&self) -> String {
        let mut sql = "SELECT measurement".to_string();
        for leaf in &self.leaves {
            if let Leaf::Tag { key, op, value } = leaf {
                let k = sql_literal(key);
                let matched = match op {
                    BinaryOp::EqRegex | BinaryOp::NotEqRegex => {
                        format!("match(tags[{k}], {})", sql_literal(value))
                    }
                    _ => format!("tags[{k}] = {}", sql_literal(value)),
                };
                sql.push_str(&format!(
                    ", countIf(mapContains(tags, {k})), countIf(mapContains(tags, {k}) AND {matched})"
                ));
            }
        }
        sql.push_str(" FROM _series GROUP BY measurement");
        sql
    }

    /// How many count pairs [`Self::sql`] returns after the measurement.
    pub(super) fn tag_comparisons(&self) -> usize {
        self.leaves
            .iter()
            .filter(|l| matches!(l, Leaf::Tag { .. }))
            .count()
    }

    /// The measurements the condition keeps, by name.
    pub(super) fn keep(&self, counts: &TagCounts) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (name, pairs) in counts {
            let mut at = (0, 0);
            if self.eval(&self.condition, name, pairs, &mut at)? {
                out.push(name.clone());
            }
        }
        Ok(out)
    }

    /// `at`: (next leaf, next tag count pair), walking in pre-order as
    /// [`collect`] did.
    fn eval(
        &self,
        e: &Expr,
        name: &str,
        pairs: &[(u64, u64)],
        at: &mut (usize, usize),
    ) -> Result<bool> {
        if let Expr::Binary { op, lhs, rhs } = e {
            if matches!(op, BinaryOp::And | BinaryOp::Or) {
                // Both sides are walked: the leaves are numbered in order.
                let l = self.eval(lhs, name, pairs, at)?;
                let r = self.eval(rhs, name, pairs, at)?;
                return Ok(if *op == BinaryOp::And { l && r } else { l || r });
            }
        }
        let leaf = &self.leaves[at.0];
        at.0 += 1;
        Ok(match leaf {
            Leaf::Nothing => false,
            Leaf::Name { op, value } => {
                let matched = match op {
                    BinaryOp::EqRegex | BinaryOp::NotEqRegex => {
                        regex::Regex::new(value)?.is_match(name)
                    }
                    _ => name == value,
                };
                matched == matches!(op, BinaryOp::Eq | BinaryOp::EqRegex)
            }
            Leaf::Tag { op, .. } => {
                let (with_tag, matched) = pairs.get(at.1).copied().unwrap_or((0, 0));
                at.1 += 1;
                with_tag > 0 && (matched > 0) == matches!(op, BinaryOp::Eq | BinaryOp::EqRegex)
            }
        })
    }
}

/// InfluxDB's system names (`influxql.IsSystemName`).
fn is_system_name(name: &str) -> bool {
    matches!(
        name,
        "_fieldKeys" | "_measurements" | "_name" | "_series" | "_tagKey" | "_tagKeys" | "_tags"
    )
}

fn collect(e: &Expr, out: &mut Vec<Leaf>) -> Result<()> {
    let Expr::Binary { op, lhs, rhs } = e else {
        return Err(Error::statement(format!("{e:?}")));
    };
    match op {
        BinaryOp::And | BinaryOp::Or => {
            collect(lhs, out)?;
            collect(rhs, out)
        }
        BinaryOp::Eq | BinaryOp::NotEq | BinaryOp::EqRegex | BinaryOp::NotEqRegex => {
            let symbol = op.symbol();
            let Expr::VarRef(tag) = lhs.as_ref() else {
                return Err(Error::statement(format!(
                    "left side of '{symbol}' must be a tag key"
                )));
            };
            let value = match (op, rhs.as_ref()) {
                (BinaryOp::EqRegex | BinaryOp::NotEqRegex, Expr::Regex(re)) => re.0.clone(),
                (BinaryOp::EqRegex | BinaryOp::NotEqRegex, _) => {
                    return Err(Error::statement(format!(
                        "right side of '{symbol}' must be a regular expression"
                    )))
                }
                (_, Expr::Literal(Literal::String(v))) => v.clone(),
                _ => {
                    return Err(Error::statement(format!(
                        "right side of '{symbol}' must be a tag value string"
                    )))
                }
            };
            out.push(if tag.name == "_name" {
                Leaf::Name { op: *op, value }
            } else if is_system_name(&tag.name) {
                Leaf::Nothing
            } else {
                Leaf::Tag {
                    key: tag.name.clone(),
                    op: *op,
                    value,
                }
            });
            Ok(())
        }
        _ => Err(Error::statement("invalid tag comparison operator")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_influxql::Statement;

    fn filter(cond: &str) -> Result<MeasurementFilter> {
        let Statement::ShowMeasurements(m) =
            shardhouse_influxql::parse_statement(&format!("SHOW MEASUREMENTS WHERE {cond}"))
                .unwrap()
        else {
            panic!("a SHOW MEASUREMENTS");
        };
        MeasurementFilter::new(m.condition.as_ref().unwrap())
    }

    /// cpu: region in {uswest, useast} and a series without it; gpu:
    /// useast and caeast; other: caeast; mem: no region.
    fn counts(f: &MeasurementFilter, region: &str) -> TagCounts {
        let re = regex::Regex::new(region).unwrap();
        let data: &[(&str, &[&str], u64)] = &[
            ("cpu", &["uswest", "useast"], 3),
            ("gpu", &["useast", "caeast"], 2),
            ("other", &["caeast"], 1),
            ("mem", &[], 1),
        ];
        data.iter()
            .map(|(m, values, _)| {
                let with = values.len() as u64;
                let matched = values.iter().filter(|v| re.is_match(v)).count() as u64;
                (m.to_string(), vec![(with, matched); f.tag_comparisons()])
            })
            .collect()
    }

    #[test]
    fn negations_leave_out_measurements_with_any_matching_series() {
        let f = filter("region !~ /ca.*/").unwrap();
        assert_eq!(f.keep(&counts(&f, "ca.*")).unwrap(), ["cpu"]);
        let f = filter("region =~ /ca.*/").unwrap();
        assert_eq!(f.keep(&counts(&f, "ca.*")).unwrap(), ["gpu", "other"]);
        let f = filter("region != 'caeast'").unwrap();
        assert_eq!(f.keep(&counts(&f, "^caeast$")).unwrap(), ["cpu"]);
        assert_eq!(
            f.sql(),
            "SELECT measurement, countIf(mapContains(tags, 'region')), \
             countIf(mapContains(tags, 'region') AND tags['region'] = 'caeast') \
             FROM _series GROUP BY measurement"
        );
    }

    #[test]
    fn names_and_boolean_operators() {
        let f = filter("_name = 'mem' OR region = 'caeast'").unwrap();
        assert_eq!(f.tag_comparisons(), 1);
        assert_eq!(
            f.keep(&counts(&f, "^caeast$")).unwrap(),
            ["gpu", "mem", "other"]
        );
        let f = filter("_name =~ /pu$/ AND region = 'caeast'").unwrap();
        assert_eq!(f.keep(&counts(&f, "^caeast$")).unwrap(), ["gpu"]);
        let f = filter("_tagKey = 'region'").unwrap();
        assert!(f.keep(&counts(&f, "x")).unwrap().is_empty());
    }

    #[test]
    fn other_conditions_get_influxdbs_errors() {
        let err = |c: &str| filter(c).unwrap_err().to_string();
        assert_eq!(err("region > 'a'"), "invalid tag comparison operator");
        assert_eq!(err("'a' = region"), "left side of '=' must be a tag key");
        assert_eq!(
            err("region = 5"),
            "right side of '=' must be a tag value string"
        );
        assert_eq!(
            err("region = host"),
            "right side of '=' must be a tag value string"
        );
    }
}
