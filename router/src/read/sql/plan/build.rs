//! Building a groups plan's evaluation side: [`Builder`] turns parsed
//! expressions over aggregates into router expressions ([`super::RExpr`])
//! and collects the shard row they read (group keys, scalar
//! sub-expressions, mergeable partial states per aggregate kind), and
//! [`ch_name`] gives an output column the name ClickHouse would.

use super::aggregates::aggregate_name;
use super::clauses::depths;
use super::expr::{AggCall, Ex, Node, Parser};
use super::{AggKind, AggSpec, PlanError, RExpr, ROUTER_FUNCTIONS};
use crate::sql_check::{at_pos, lex};
use std::collections::HashSet;

pub(super) fn has_aggregates(n: &Node, agg_aliases: &HashSet<String>) -> bool {
    match &n.ex {
        Ex::Agg(_) => true,
        Ex::Ident(name) => agg_aliases.contains(name),
        Ex::Call(_, args) => args.iter().any(|a| has_aggregates(a, agg_aliases)),
        Ex::Bin(_, l, r) => has_aggregates(l, agg_aliases) || has_aggregates(r, agg_aliases),
        Ex::Neg(e) | Ex::Not(e) => has_aggregates(e, agg_aliases),
        Ex::Lit(..) | Ex::Opaque => false,
    }
}

pub(super) fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Builds router expressions and the shard row they read.
pub(super) struct Builder<'a> {
    pub(super) q: &'a str,
    pub(super) keys: Vec<String>,
    pub(super) scalars: Vec<String>,
    pub(super) partials: Vec<String>,
    pub(super) aggs: Vec<AggSpec>,
    /// alias -> item node, for items with aggregates
    pub(super) agg_items: Vec<(String, Node)>,
    pub(super) agg_aliases: HashSet<String>,
    pub(super) depth: usize,
}

impl Builder<'_> {
    pub(super) fn scalar(&mut self, text: &str) -> usize {
        let t = squash(text);
        if let Some(k) = self.keys.iter().position(|k| squash(k) == t) {
            return k;
        }
        if let Some(s) = self.scalars.iter().position(|s| squash(s) == t) {
            return self.keys.len() + s;
        }
        self.scalars.push(text.to_owned());
        self.keys.len() + self.scalars.len() - 1
    }

    pub(super) fn build(&mut self, n: &Node) -> Result<RExpr, PlanError> {
        if !has_aggregates(n, &self.agg_aliases) {
            if let Ex::Lit(v, _) = &n.ex {
                return Ok(RExpr::Lit(v.clone()));
            }
            let text = &self.q[n.span.0..n.span.1];
            return Ok(RExpr::Col(self.scalar(text)));
        }
        Ok(match &n.ex {
            Ex::Ident(name) => {
                let item = self
                    .agg_items
                    .iter()
                    .find(|(a, _)| a == name)
                    .map(|(_, n)| n.clone())
                    .expect("an aggregate alias");
                self.depth += 1;
                if self.depth > 16 {
                    return Err(format!("alias `{name}` refers to itself"));
                }
                let r = self.build(&item);
                self.depth -= 1;
                r?
            }
            Ex::Agg(call) => RExpr::Agg(self.aggregate(call, n.span.0)?),
            Ex::Call(name, args) => {
                let lower = name.to_ascii_lowercase();
                if !ROUTER_FUNCTIONS.contains(&lower.as_str()) {
                    return Err(format!(
                        "function `{name}` over an aggregate (at {}) is not evaluated by the router; it evaluates {} (compute inside the aggregate's argument instead)",
                        at_pos(self.q, n.span.0),
                        ROUTER_FUNCTIONS.join(", ")
                    ));
                }
                RExpr::Func(
                    lower,
                    args.iter()
                        .map(|a| self.build(a))
                        .collect::<Result<_, _>>()?,
                )
            }
            Ex::Bin(op, l, r) => {
                RExpr::Bin(*op, Box::new(self.build(l)?), Box::new(self.build(r)?))
            }
            Ex::Neg(e) => RExpr::Neg(Box::new(self.build(e)?)),
            Ex::Not(e) => RExpr::Not(Box::new(self.build(e)?)),
            Ex::Lit(..) | Ex::Opaque => unreachable!("no aggregates"),
        })
    }

    fn push(&mut self, partial: String) -> usize {
        if let Some(i) = self
            .partials
            .iter()
            .position(|p| squash(p) == squash(&partial))
        {
            return i;
        }
        self.partials.push(partial);
        self.partials.len() - 1
    }

    fn aggregate(&mut self, call: &AggCall, at: usize) -> Result<usize, PlanError> {
        let (base, combs) = aggregate_name(&call.name).expect("an aggregate");
        let pos = at_pos(self.q, at);
        let unsupported = || -> PlanError {
            format!(
                "aggregate `{}` (at {pos}) is not supported across shards; supported: count, sum, avg, min, max, any, anyLast, argMin, argMax, uniqExact (and uniq*, count(DISTINCT x)), median, quantile, quantiles, medianExact, quantileExact, quantilesExact, varPop, varSamp, stddevPop, stddevSamp, each also with the If combinator; or use per_shard=true",
                call.name
            )
        };
        let with_if = match combs.as_slice() {
            [] => false,
            ["if"] => true,
            _ => return Err(unsupported()),
        };
        let mut args = call.args.clone();
        let cond = if with_if {
            Some(
                args.pop()
                    .ok_or_else(|| format!("`{}` at {pos} needs a condition", call.name))?,
            )
        } else {
            None
        };
        let p = |f: &str, a: &[String]| -> String {
            let mut a = a.to_vec();
            match &cond {
                Some(c) => {
                    a.push(c.clone());
                    format!("{f}If({})", a.join(", "))
                }
                None => format!("{f}({})", a.join(", ")),
            }
        };
        let one = |args: &[String]| -> Result<(), PlanError> {
            if args.len() == 1 {
                Ok(())
            } else {
                Err(format!("`{}` at {pos} takes one argument here", call.name))
            }
        };
        let levels = |params: &[String], default: bool| -> Result<Vec<f64>, PlanError> {
            if params.is_empty() && default {
                return Ok(vec![0.5]);
            }
            params
                .iter()
                .map(|s| {
                    s.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|l| (0.0..=1.0).contains(l))
                })
                .collect::<Option<Vec<_>>>()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    format!("`{}` at {pos}: levels must be numbers in [0, 1]", call.name)
                })
        };
        if call.distinct && base != "count" {
            return Err(unsupported());
        }
        let (kind, partials): (AggKind, Vec<String>) = match base.as_str() {
            "count" if call.distinct => {
                one(&args)?;
                (AggKind::Uniq, vec![p("groupUniqArray", &args)])
            }
            "count" => (AggKind::Count, vec![p("count", &args)]),
            "sum" => {
                one(&args)?;
                (AggKind::Sum, vec![p("sum", &args)])
            }
            "min" | "max" => {
                one(&args)?;
                let k = if base == "min" {
                    AggKind::Min
                } else {
                    AggKind::Max
                };
                (k, vec![p(&base, &args)])
            }
            "avg" => {
                one(&args)?;
                (AggKind::Avg, vec![p("sum", &args), p("count", &args)])
            }
            "any" | "any_value" | "first_value" => {
                one(&args)?;
                (AggKind::Any, vec![p("any", &args)])
            }
            "anylast" | "last_value" => {
                one(&args)?;
                (AggKind::AnyLast, vec![p("anyLast", &args)])
            }
            "argmin" | "argmax" | "min_by" | "max_by" => {
                if args.len() != 2 {
                    return Err(format!("`{}` at {pos} takes two arguments", call.name));
                }
                let min = base == "argmin" || base == "min_by";
                let (k, f, m) = if min {
                    (AggKind::ArgMin, "argMin", "min")
                } else {
                    (AggKind::ArgMax, "argMax", "max")
                };
                (k, vec![p(f, &args), p(m, &args[1..])])
            }
            "uniqexact" | "uniq" | "uniqcombined" | "uniqcombined64" | "uniqhll12"
            | "countdistinct" => {
                one(&args)?;
                (AggKind::Uniq, vec![p("groupUniqArray", &args)])
            }
            "median" | "quantile" | "medianexact" | "quantileexact" | "quantiles"
            | "quantilesexact" => {
                one(&args)?;
                let interpolated = !base.contains("exact");
                let multi = base.starts_with("quantiles");
                if base.starts_with("median") && !call.params.is_empty() {
                    return Err(format!("`{}` at {pos} takes no level", call.name));
                }
                let levels = levels(&call.params, !multi)?;
                if !multi && levels.len() != 1 {
                    return Err(format!("`{}` at {pos} takes one level", call.name));
                }
                (
                    AggKind::Quantile {
                        levels,
                        interpolated,
                        multi,
                    },
                    vec![p("groupArray", &args)],
                )
            }
            "varpop" | "var_pop" | "varsamp" | "var_samp" | "stddevpop" | "stddev_pop" | "std"
            | "stddevsamp" | "stddev_samp" | "stddev" => {
                one(&args)?;
                let sample = base.contains("samp") || base == "stddev";
                let sqrt = base.starts_with("std");
                (
                    AggKind::Var { sample, sqrt },
                    vec![p("count", &args), p("avg", &args), p("varPop", &args)],
                )
            }
            _ => return Err(unsupported()),
        };
        let cols = partials.into_iter().map(|s| self.push(s)).collect();
        let spec = AggSpec { kind, cols };
        if let Some(i) = self.aggs.iter().position(|a| *a == spec) {
            return Ok(i);
        }
        self.aggs.push(spec);
        Ok(self.aggs.len() - 1)
    }
}

/// The column name ClickHouse gives an unaliased expression, for the forms
/// the router parses (others: their text, whitespace squashed).
pub(super) fn ch_name(q: &str, n: &Node) -> String {
    match &n.ex {
        Ex::Lit(_, shown) => shown.clone(),
        Ex::Ident(name) => name.clone(),
        Ex::Call(name, args) => format!(
            "{name}({})",
            args.iter()
                .map(|a| ch_name(q, a))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Ex::Agg(call) => {
            let args = call
                .args
                .iter()
                .map(|a| {
                    let toks = lex(a).unwrap_or_default();
                    match depths(a, &toks) {
                        Ok(dep) if !toks.is_empty() => {
                            let mut p = Parser {
                                q: a,
                                toks: &toks,
                                dep: &dep,
                                i: 0,
                                hi: toks.len(),
                            };
                            match p.expr() {
                                Ok(n) if p.i == toks.len() => ch_name(a, &n),
                                _ => squash(a),
                            }
                        }
                        _ => squash(a),
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            let name = if call.distinct {
                format!("{}Distinct", call.name)
            } else {
                call.name.clone()
            };
            let params = if call.params.is_empty() {
                String::new()
            } else {
                format!(
                    "({})",
                    call.params
                        .iter()
                        .map(|s| squash(s))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            format!("{name}{params}({args})")
        }
        Ex::Bin(op, l, r) => format!("{}({}, {})", op.ch_name(), ch_name(q, l), ch_name(q, r)),
        Ex::Neg(e) => format!("negate({})", ch_name(q, e)),
        Ex::Not(e) => format!("not({})", ch_name(q, e)),
        Ex::Opaque => squash(&q[n.span.0..n.span.1]),
    }
}
