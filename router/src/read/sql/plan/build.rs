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
                    return Err(PlanError(format!("alias `{name}` refers to itself")));
                }
                let r = self.build(&item);
                self.depth -= 1;
                r?
            }
            Ex::Agg(call) => RExpr::Agg(self.aggregate(call, n.span.0)?),
            Ex::Call(name, args) => {
                let lower = name.to_ascii_lowercase();
                if !ROUTER_FUNCTIONS.contains(&lower.as_str()) {
                    return Err(PlanError(format!(
                        "function `{name}` over an aggregate (at {}) is not evaluated by the router; it evaluates {} (compute inside the aggregate's argument instead)",
                        at_pos(self.q, n.span.0),
                        ROUTER_FUNCTIONS.join(", ")
                    )));
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

    /// The aggregate's index in the plan: its partial states pushed to
    /// the shard row (shared with an identical call's).
    fn aggregate(&mut self, call: &AggCall, at: usize) -> Result<usize, PlanError> {
        let (base, combs) = aggregate_name(&call.name).expect("an aggregate");
        let a = AggArgs::new(call, at_pos(self.q, at), &combs)?;
        if call.distinct && base != "count" {
            return Err(a.unsupported());
        }
        let (kind, partials) = a.partials(&base)?;
        let cols = partials.into_iter().map(|s| self.push(s)).collect();
        let spec = AggSpec { kind, cols };
        if let Some(i) = self.aggs.iter().position(|a| *a == spec) {
            return Ok(i);
        }
        self.aggs.push(spec);
        Ok(self.aggs.len() - 1)
    }
}

/// One aggregate call's arguments (the `If` combinator's condition apart)
/// and where it stands, for the partial states the shards compute.
struct AggArgs<'a> {
    call: &'a AggCall,
    pos: String,
    args: Vec<String>,
    cond: Option<String>,
}

impl<'a> AggArgs<'a> {
    fn new(call: &'a AggCall, pos: String, combs: &[&str]) -> Result<Self, PlanError> {
        let mut a = AggArgs {
            call,
            pos,
            args: call.args.clone(),
            cond: None,
        };
        match combs {
            [] => {}
            ["if"] => {
                let cond = a.args.pop().ok_or_else(|| {
                    PlanError(format!("`{}` at {} needs a condition", call.name, a.pos))
                })?;
                a.cond = Some(cond);
            }
            _ => return Err(a.unsupported()),
        }
        Ok(a)
    }

    fn unsupported(&self) -> PlanError {
        PlanError(format!(
            "aggregate `{}` (at {}) is not supported across shards; supported: count, sum, avg, min, max, any, anyLast, argMin, argMax, uniqExact (and uniq*, count(DISTINCT x)), median, quantile, quantiles, medianExact, quantileExact, quantilesExact, varPop, varSamp, stddevPop, stddevSamp, each also with the If combinator; or use per_shard=true",
            self.call.name, self.pos
        ))
    }

    /// `f(a)`, or `fIf(a, cond)` under the `If` combinator.
    fn partial_of(&self, f: &str, a: &[String]) -> String {
        let mut a = a.to_vec();
        match &self.cond {
            Some(c) => {
                a.push(c.clone());
                format!("{f}If({})", a.join(", "))
            }
            None => format!("{f}({})", a.join(", ")),
        }
    }

    /// `f` of the call's arguments.
    fn p(&self, f: &str) -> String {
        self.partial_of(f, &self.args)
    }

    fn one(&self) -> Result<(), PlanError> {
        if self.args.len() == 1 {
            Ok(())
        } else {
            Err(PlanError(format!(
                "`{}` at {} takes one argument here",
                self.call.name, self.pos
            )))
        }
    }

    /// The aggregate's kind and its partial states, by its base name.
    fn partials(&self, base: &str) -> Result<(AggKind, Vec<String>), PlanError> {
        Ok(match base {
            "count" if self.call.distinct => {
                self.one()?;
                (AggKind::Uniq, vec![self.p("groupUniqArray")])
            }
            "count" => (AggKind::Count, vec![self.p("count")]),
            "sum" => {
                self.one()?;
                (AggKind::Sum, vec![self.p("sum")])
            }
            "min" | "max" => {
                self.one()?;
                let k = if base == "min" {
                    AggKind::Min
                } else {
                    AggKind::Max
                };
                (k, vec![self.p(base)])
            }
            "avg" => {
                self.one()?;
                (AggKind::Avg, vec![self.p("sum"), self.p("count")])
            }
            "any" | "any_value" | "first_value" => {
                self.one()?;
                (AggKind::Any, vec![self.p("any")])
            }
            "anylast" | "last_value" => {
                self.one()?;
                (AggKind::AnyLast, vec![self.p("anyLast")])
            }
            "argmin" | "argmax" | "min_by" | "max_by" => self.arg_min_max(base)?,
            "uniqexact" | "uniq" | "uniqcombined" | "uniqcombined64" | "uniqhll12"
            | "countdistinct" => {
                self.one()?;
                (AggKind::Uniq, vec![self.p("groupUniqArray")])
            }
            "median" | "quantile" | "medianexact" | "quantileexact" | "quantiles"
            | "quantilesexact" => self.quantile(base)?,
            "varpop" | "var_pop" | "varsamp" | "var_samp" | "stddevpop" | "stddev_pop" | "std"
            | "stddevsamp" | "stddev_samp" | "stddev" => {
                self.one()?;
                let sample = base.contains("samp") || base == "stddev";
                let sqrt = base.starts_with("std");
                (
                    AggKind::Var { sample, sqrt },
                    vec![self.p("count"), self.p("avg"), self.p("varPop")],
                )
            }
            _ => return Err(self.unsupported()),
        })
    }

    /// `argMin(v, k)` / `argMax(v, k)`: the value and the extreme key.
    fn arg_min_max(&self, base: &str) -> Result<(AggKind, Vec<String>), PlanError> {
        if self.args.len() != 2 {
            return Err(PlanError(format!(
                "`{}` at {} takes two arguments",
                self.call.name, self.pos
            )));
        }
        let min = base == "argmin" || base == "min_by";
        let (k, f, m) = if min {
            (AggKind::ArgMin, "argMin", "min")
        } else {
            (AggKind::ArgMax, "argMax", "max")
        };
        Ok((k, vec![self.p(f), self.partial_of(m, &self.args[1..])]))
    }

    /// The median and quantile family: every value of the group.
    fn quantile(&self, base: &str) -> Result<(AggKind, Vec<String>), PlanError> {
        self.one()?;
        let interpolated = !base.contains("exact");
        let multi = base.starts_with("quantiles");
        if base.starts_with("median") && !self.call.params.is_empty() {
            return Err(PlanError(format!(
                "`{}` at {} takes no level",
                self.call.name, self.pos
            )));
        }
        let levels = self.levels(!multi)?;
        if !multi && levels.len() != 1 {
            return Err(PlanError(format!(
                "`{}` at {} takes one level",
                self.call.name, self.pos
            )));
        }
        Ok((
            AggKind::Quantile {
                levels,
                interpolated,
                multi,
            },
            vec![self.p("groupArray")],
        ))
    }

    /// The call's levels, in [0, 1]; 0.5 when none and `default`.
    fn levels(&self, default: bool) -> Result<Vec<f64>, PlanError> {
        let params = &self.call.params;
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
                PlanError(format!(
                    "`{}` at {}: levels must be numbers in [0, 1]",
                    self.call.name, self.pos
                ))
            })
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
