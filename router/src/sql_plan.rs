//! Planning of `/api/v1/sql` across shards (docs/api.md, "Read-back: SQL").
//!
//! The statement is read on ClickHouse's tokens ([`crate::sql_check`]) and
//! cut into its clauses at bracket depth 0. The router only parses what it
//! must evaluate itself: the expressions of SELECT, HAVING and ORDER BY
//! down to their aggregate calls. Everything else (FROM, JOIN, WHERE,
//! GROUP BY keys, aggregate arguments, scalar sub-expressions) is sent to
//! the shards as the text the user wrote, so ClickHouse syntax the router
//! does not know still runs as ClickHouse runs it.
//!
//! - Without aggregates ([`Plan::Rows`]): every shard runs the statement with
//!   the ORDER BY keys appended as hidden columns and `LIMIT limit+offset`;
//!   the router sorts the union by those keys and applies OFFSET/LIMIT once.
//! - With aggregates, GROUP BY or DISTINCT ([`Plan::Groups`]): every shard
//!   returns its group keys, the scalar sub-expressions and mergeable
//!   partial states ([`AggKind`]); the router merges per group, evaluates
//!   the expressions over aggregates, HAVING, DISTINCT, ORDER BY and
//!   LIMIT/OFFSET.
//!
//! What a shard computes alone must be the same as over all the data: joins
//! must be on `series_id` (a series' points and its `_series` row live on
//! one shard) and subqueries must not aggregate or limit unless they group
//! by `series_id`. Anything else is refused with its position.

use crate::sql_check::{at_pos, lex, unquote, Kind, Token};
use crate::sql_value::Value;
use std::collections::HashSet;

/// ClickHouse's aggregate functions (`system.functions WHERE is_aggregate`,
/// chDB 26.9), lower case: a call of one of these, with or without
/// combinators, is an aggregate.
#[rustfmt::skip]
const AGGREGATES: &[&str] = &[
    "aggthrow", "analysisofvariance", "anova", "any", "any_respect_nulls", "any_value",
    "any_value_respect_nulls", "anyheavy", "anylast", "anylast_respect_nulls",
    "anylastrespectnulls", "anyrespectnulls", "anyvaluerespectnulls", "approx_top_count",
    "approx_top_k", "approx_top_sum", "argandmax", "argandmin", "argmax", "argmin", "array_agg",
    "array_concat_agg", "avg", "avgweighted", "bit_and", "bit_or", "bit_xor", "boundingratio",
    "categoricalinformationvalue", "contingency", "corr", "corrmatrix", "corrstable", "count",
    "countdistinct", "covar_pop", "covar_samp", "covarpop", "covarpopmatrix", "covarpopstable",
    "covarsamp", "covarsampmatrix", "covarsampstable", "cramersv", "cramersvbiascorrected",
    "cume_dist", "deltasum", "deltasumtimestamp", "dense_rank", "denserank", "distinctdynamictypes",
    "distinctjsonpaths", "distinctjsonpathsandtypes", "entropy", "estimatecompressionratio",
    "exponentialmovingaverage", "exponentialtimedecayedavg", "exponentialtimedecayedcount",
    "exponentialtimedecayedmax", "exponentialtimedecayedsum", "first_value",
    "first_value_respect_nulls", "firstvaluerespectnulls", "flamegraph", "gini", "group_concat",
    "grouparray", "grouparrayinsertat", "grouparrayintersect", "grouparraylast",
    "grouparraymovingavg", "grouparraymovingsum", "grouparraysample", "grouparraysorted",
    "groupbitand", "groupbitmap", "groupbitmapand", "groupbitmapor", "groupbitmapxor", "groupbitor",
    "groupbitxor", "groupconcat", "groupformat", "groupnumericindexedvector", "groupuniqarray",
    "hierarchicalkmeans", "histogram", "intervallengthsum", "kolmogorovsmirnovtest", "kurtpop",
    "kurtsamp", "lag", "laginframe", "largesttrianglethreebuckets", "last_value",
    "last_value_respect_nulls", "lastvaluerespectnulls", "lead", "leadinframe", "lttb",
    "mannwhitneyutest", "max", "max_by", "maxintersections", "maxintersectionsposition",
    "maxmappedarrays", "meanztest", "median", "medianbfloat16", "medianbfloat16weighted",
    "mediandd", "mediandeterministic", "medianexact", "medianexacthigh", "medianexactlow",
    "medianexactweighted", "medianexactweightedinterpolated", "mediangk",
    "medianinterpolatedweighted", "mediantdigest", "mediantdigestweighted", "mediantiming",
    "mediantimingweighted", "mergedjsonpatch", "min", "min_by", "minmappedarrays", "mvtencode",
    "nonnegativederivative", "nothing", "nothingnull", "nothinguint64", "nth_value", "ntile",
    "percent_rank", "percentrank", "quantile", "quantilebfloat16", "quantilebfloat16weighted",
    "quantiledd", "quantiledeterministic", "quantileexact", "quantileexactexclusive",
    "quantileexacthigh", "quantileexactinclusive", "quantileexactlow", "quantileexactweighted",
    "quantileexactweightedinterpolated", "quantilegk", "quantileinterpolatedweighted",
    "quantileprometheushistogram", "quantiles", "quantilesbfloat16", "quantilesbfloat16weighted",
    "quantilesdd", "quantilesdeterministic", "quantilesexact", "quantilesexactexclusive",
    "quantilesexacthigh", "quantilesexactinclusive", "quantilesexactlow", "quantilesexactweighted",
    "quantilesexactweightedinterpolated", "quantilesgk", "quantilesinterpolatedweighted",
    "quantilesprometheushistogram", "quantilestdigest", "quantilestdigestweighted",
    "quantilestiming", "quantilestimingweighted", "quantiletdigest", "quantiletdigestweighted",
    "quantiletiming", "quantiletimingweighted", "rank", "rankcorr", "regr_avgx", "regr_avgy",
    "regr_count", "regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy",
    "retention", "row_number", "sequencecount", "sequencematch", "sequencematchevents",
    "sequencenextnode", "simplelinearregression", "singlevalueornull", "skewpop", "skewsamp",
    "sparkbar", "st_asmvt", "std", "stddev", "stddev_pop", "stddev_samp", "stddevpop",
    "stddevpopstable", "stddevsamp", "stddevsampstable", "stochasticlinearregression",
    "stochasticlogisticregression", "string_agg", "studentttest", "studentttestonesample", "sum",
    "sumcount", "sumkahan", "summapfiltered", "summapfilteredwithoverflow", "summappedarrays",
    "summapwithoverflow", "sumwithoverflow", "theilsu", "timeseriesavgtogrid",
    "timeseriesbottomkmasks", "timeserieschangestogrid", "timeseriescounttogrid",
    "timeseriesdeltatogrid", "timeseriesderivtogrid", "timeseriesgrouparray",
    "timeseriesincreasetogrid", "timeseriesinstantdeltatogrid", "timeseriesinstantratetogrid",
    "timeserieslasttogrid", "timeserieslasttwosamples", "timeserieslimitkmasks",
    "timeseriesmaxtogrid", "timeseriesmintogrid", "timeseriespredictlineartogrid",
    "timeseriesratetogrid", "timeseriesresampletogridwithstaleness", "timeseriesresetstogrid",
    "timeseriessumtogrid", "timeseriestimestampofmaxtogrid", "timeseriestimestampofmintogrid",
    "timeseriestopkmasks", "topk", "topkweighted", "uniq", "uniqcombined", "uniqcombined64",
    "uniqexact", "uniqhll12", "uniqupto", "var_pop", "var_samp", "varpop", "varpopstable",
    "varsamp", "varsampstable", "welchttest", "windowfunnel",
];

/// Aggregate function combinators (`system.aggregate_function_combinators`).
#[rustfmt::skip]
const COMBINATORS: &[&str] = &[
    "simplestate", "ordefault", "distinct", "resample", "foreach", "argmax", "argmin", "ornull",
    "tuple", "merge", "state", "array", "null", "map", "if",
];

/// Whether `name` (any case) is an aggregate function, possibly with
/// combinators; returns the base name and whether it ends in `If` (the
/// only combinator merged across shards).
pub fn aggregate_name(name: &str) -> Option<(String, Vec<&'static str>)> {
    let lower = name.to_ascii_lowercase();
    let mut base = lower.as_str();
    let mut combs = Vec::new();
    loop {
        if AGGREGATES.binary_search(&base).is_ok() {
            combs.reverse();
            return Some((base.to_owned(), combs));
        }
        let c = COMBINATORS
            .iter()
            .find(|c| base.len() > c.len() && base.ends_with(*c))?;
        base = &base[..base.len() - c.len()];
        combs.push(*c);
    }
}

/// A 400: the message names the construct and its position.
pub type PlanError = String;

/// An aggregate the router merges exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum AggKind {
    /// `count`: sum of the shards' counts.
    Count,
    Sum,
    Min,
    Max,
    /// Shards send `sum` and `count`.
    Avg,
    /// `any`: the first non-NULL partial; `anyLast`: the last.
    Any,
    AnyLast,
    /// Shards send `argMin(a, b)` and `min(b)`.
    ArgMin,
    ArgMax,
    /// `uniqExact`, `count(DISTINCT)`, `uniq*`: shards send
    /// `groupUniqArray`; exact.
    Uniq,
    /// Shards send `groupArray`. `interpolated`: `quantile`/`median`
    /// (ClickHouse's linear interpolation between neighbours, exact here
    /// for any count); else `quantileExact` (the element at
    /// `floor(level * n)`). `multi`: `quantiles(...)`, an array.
    Quantile {
        levels: Vec<f64>,
        interpolated: bool,
        multi: bool,
    },
    /// Shards send `count`, `avg` and `varPop`, merged by Chan's formula.
    Var {
        sample: bool,
        sqrt: bool,
    },
}

/// One aggregate call: its kind and where its partials are in a shard row.
#[derive(Debug, Clone, PartialEq)]
pub struct AggSpec {
    pub kind: AggKind,
    pub cols: Vec<usize>,
}

/// Binary operators the router evaluates over aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    fn ch_name(self) -> &'static str {
        match self {
            BinOp::Add => "plus",
            BinOp::Sub => "minus",
            BinOp::Mul => "multiply",
            BinOp::Div => "divide",
            BinOp::Mod => "modulo",
            BinOp::Eq => "equals",
            BinOp::Ne => "notEquals",
            BinOp::Lt => "less",
            BinOp::Le => "lessOrEquals",
            BinOp::Gt => "greater",
            BinOp::Ge => "greaterOrEquals",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

/// Functions the router evaluates over aggregates.
#[rustfmt::skip]
pub const ROUTER_FUNCTIONS: &[&str] = &[
    "round", "abs", "sqrt", "floor", "ceil", "tofloat64", "toint64", "touint64", "ifnull",
    "coalesce",
];

/// An expression the router evaluates per group.
#[derive(Debug, Clone, PartialEq)]
pub enum RExpr {
    /// A column of the shard row (group key or scalar), constant per group.
    Col(usize),
    /// The merged value of aggregate `i`.
    Agg(usize),
    Lit(Value),
    Bin(BinOp, Box<RExpr>, Box<RExpr>),
    Neg(Box<RExpr>),
    Not(Box<RExpr>),
    Func(String, Vec<RExpr>),
}

/// An ORDER BY key.
#[derive(Debug, Clone, PartialEq)]
pub struct SortKey<E> {
    pub expr: E,
    pub desc: bool,
    pub nulls_first: bool,
}

/// How the name of an output column is found.
#[derive(Debug, Clone, PartialEq)]
pub enum OutName {
    /// As given (an alias, or the router's rendering of an expression
    /// over aggregates, as ClickHouse names it).
    Fixed(String),
    /// The name the shards' answer gives shard column `i` (ClickHouse's
    /// own), else the fallback.
    Shard(usize, String),
}

/// The plan of a statement without aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct RowsPlan {
    /// Projection items as written (with aliases).
    pub items: Vec<String>,
    /// `FROM ...` up to (not including) GROUP BY / ORDER BY / LIMIT.
    pub from: String,
    /// ORDER BY expressions (sent as hidden columns `__sh_o<i>` at the end
    /// of every shard row) and the clause as written.
    pub order: Vec<SortKey<String>>,
    pub order_text: Option<String>,
    pub limit: Option<u64>,
    pub offset: u64,
}

/// The plan of a statement with aggregates, GROUP BY or DISTINCT.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupsPlan {
    /// Shard row: `keys`, then `scalars`, then the aggregates' partials.
    pub keys: Vec<String>,
    pub scalars: Vec<String>,
    pub partials: Vec<String>,
    pub from: String,
    pub group_by: bool,
    pub aggs: Vec<AggSpec>,
    pub outputs: Vec<(OutName, RExpr)>,
    pub having: Option<RExpr>,
    pub distinct: bool,
    pub order: Vec<SortKey<RExpr>>,
    pub limit: Option<u64>,
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Rows(RowsPlan),
    Groups(GroupsPlan),
}

// ------------------------------------------------------------------ clauses

fn text_of<'a>(q: &'a str, t: &Token) -> &'a str {
    &q[t.start..t.end]
}

fn is_kw(q: &str, t: &Token, kw: &str) -> bool {
    t.kind == Kind::Word && text_of(q, t).eq_ignore_ascii_case(kw)
}

/// The clauses of one SELECT, as token index ranges.
#[derive(Debug, Default)]
struct Clauses {
    distinct: bool,
    select: (usize, usize),
    from: Option<(usize, usize)>,
    group_by: Option<(usize, usize)>,
    having: Option<(usize, usize)>,
    order_by: Option<(usize, usize)>,
    limit: Option<(usize, usize)>,
    offset: Option<(usize, usize)>,
}

/// Depth of every token (before it), `(`/`[`/`{` opening.
fn depths(q: &str, toks: &[Token]) -> Result<Vec<i32>, PlanError> {
    let mut d = 0i32;
    let mut out = Vec::with_capacity(toks.len());
    for t in toks {
        match t.kind {
            Kind::Punct('(' | '[' | '{') => {
                out.push(d);
                d += 1;
            }
            Kind::Punct(')' | ']' | '}') => {
                d -= 1;
                if d < 0 {
                    return Err(format!(
                        "unbalanced `{}` at {}",
                        text_of(q, t),
                        at_pos(q, t.start)
                    ));
                }
                out.push(d);
            }
            _ => out.push(d),
        }
    }
    if d != 0 {
        return Err("unbalanced brackets: a `(` or `[` is not closed".into());
    }
    Ok(out)
}

/// Cuts tokens `lo..hi` (one SELECT) into clauses. `base` is the depth of
/// the SELECT's own tokens.
fn clauses(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> Result<Clauses, PlanError> {
    let base = dep[lo];
    let unsupported = |t: &Token, what: &str| -> PlanError {
        format!(
            "{what} (at {}) is not supported by /api/v1/sql across shards",
            at_pos(q, t.start)
        )
    };
    if lo >= hi || !is_kw(q, &toks[lo], "select") {
        let t = &toks[lo.min(toks.len() - 1)];
        if is_kw(q, t, "with") {
            return Err(
                unsupported(t, "WITH (common table expressions and expression aliases)")
                    + "; write the expression or a subquery in place",
            );
        }
        if t.kind == Kind::Punct('(') {
            return Err(unsupported(t, "a parenthesised statement") + "; send the SELECT alone");
        }
        return Err(format!("expected SELECT at {}", at_pos(q, t.start)));
    }
    let mut c = Clauses::default();
    let mut i = lo + 1;
    if i < hi && is_kw(q, &toks[i], "distinct") {
        if toks.get(i + 1).is_some_and(|t| is_kw(q, t, "on")) {
            return Err(unsupported(&toks[i], "SELECT DISTINCT ON"));
        }
        c.distinct = true;
        i += 1;
    } else if i < hi && is_kw(q, &toks[i], "all") {
        i += 1;
    }
    if i < hi && is_kw(q, &toks[i], "top") {
        return Err(unsupported(&toks[i], "SELECT TOP") + "; use LIMIT");
    }
    // (clause name, start token of its body)
    let mut marks: Vec<(&'static str, usize, usize)> = vec![("select", lo, i)];
    let mut j = i;
    while j < hi {
        let t = &toks[j];
        if dep[j] != base || t.kind != Kind::Word {
            j += 1;
            continue;
        }
        let next_by = toks.get(j + 1).is_some_and(|n| is_kw(q, n, "by")) && j + 1 < hi;
        let word = text_of(q, t).to_ascii_lowercase();
        let (name, body) = match word.as_str() {
            "from" => ("from", j + 1),
            "group" if next_by => ("group", j + 2),
            "having" => ("having", j + 1),
            "order" if next_by => ("order", j + 2),
            "limit" => ("limit", j + 1),
            "offset" => ("offset", j + 1),
            "union" | "except" | "intersect" => {
                return Err(unsupported(
                    t,
                    &format!("{} of SELECTs", word.to_uppercase()),
                ))
            }
            "window" | "qualify" | "fetch" | "format" | "settings" | "into" => {
                return Err(unsupported(
                    t,
                    &format!("the {} clause", word.to_uppercase()),
                ))
            }
            "with" => {
                let what = toks
                    .get(j + 1)
                    .map(|n| text_of(q, n).to_ascii_uppercase())
                    .unwrap_or_default();
                return Err(unsupported(t, &format!("WITH {what}")));
            }
            "over" => return Err(unsupported(t, "a window function (OVER)")),
            _ => {
                j += 1;
                continue;
            }
        };
        marks.push((name, j, body));
        j = body;
    }
    let mut seen = HashSet::new();
    for (k, (name, at, body)) in marks.iter().enumerate() {
        let end = marks.get(k + 1).map_or(hi, |m| m.1);
        if !seen.insert(*name) {
            return Err(format!(
                "a second {} clause at {}",
                name.to_uppercase(),
                at_pos(q, toks[*at].start)
            ));
        }
        let r = (*body, end);
        match *name {
            "select" => c.select = r,
            // FROM keeps its keyword, and takes PREWHERE / WHERE along.
            "from" => c.from = Some((*at, end)),
            "group" => c.group_by = Some(r),
            "having" => c.having = Some(r),
            "order" => c.order_by = Some(r),
            "limit" => c.limit = Some(r),
            _ => c.offset = Some(r),
        }
    }
    let order = [
        "select", "from", "group", "having", "order", "limit", "offset",
    ];
    let pos: Vec<usize> = marks
        .iter()
        .map(|m| order.iter().position(|o| *o == m.0).unwrap_or(0))
        .collect();
    if let Some(k) = pos.windows(2).position(|w| w[0] > w[1]) {
        let m = &marks[k + 1];
        return Err(format!(
            "{} at {} is out of place",
            m.0.to_uppercase(),
            at_pos(q, toks[m.1].start)
        ));
    }
    if c.select.0 >= c.select.1 {
        return Err(format!(
            "SELECT at {} has no columns",
            at_pos(q, toks[lo].start)
        ));
    }
    Ok(c)
}

/// Splits `lo..hi` at the commas of depth `dep[lo]`.
fn split_commas(toks: &[Token], dep: &[i32], lo: usize, hi: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = lo;
    for j in lo..hi {
        if toks[j].kind == Kind::Punct(',') && dep[j] == dep[lo] {
            out.push((s, j));
            s = j + 1;
        }
    }
    out.push((s, hi));
    out
}

fn span_text<'a>(q: &'a str, toks: &[Token], r: (usize, usize)) -> &'a str {
    if r.0 >= r.1 {
        return "";
    }
    &q[toks[r.0].start..toks[r.1 - 1].end]
}

/// Index of the `)` matching the `(` at `open`.
fn matching(toks: &[Token], dep: &[i32], open: usize) -> usize {
    (open + 1..toks.len())
        .find(|&j| matches!(toks[j].kind, Kind::Punct(')' | ']' | '}')) && dep[j] == dep[open])
        .unwrap_or(toks.len() - 1)
}

/// Checks that JOINs in FROM are on `series_id` and that every subquery is
/// shard-local.
fn check_from(q: &str, toks: &[Token], dep: &[i32], lo: usize, hi: usize) -> Result<(), PlanError> {
    let base = dep[lo];
    let mut j = lo;
    while j < hi {
        let t = &toks[j];
        if dep[j] == base && t.kind == Kind::Punct(',') {
            return Err(format!(
                "a comma join (at {}) is not supported across shards; join on series_id with JOIN ... USING series_id",
                at_pos(q, t.start)
            ));
        }
        if dep[j] == base && is_kw(q, t, "cross") {
            return Err(format!(
                "CROSS JOIN (at {}) is not supported across shards",
                at_pos(q, t.start)
            ));
        }
        if dep[j] == base && is_kw(q, t, "join") && !(j > lo && is_kw(q, &toks[j - 1], "array")) {
            // The join's constraint runs to the next JOIN keyword or the end.
            let end = (j + 1..hi)
                .find(|&k| dep[k] == base && is_kw(q, &toks[k], "join"))
                .map(|k| {
                    // back over LEFT / INNER / ANY / GLOBAL ...
                    let mut s = k;
                    while s > j + 1
                        && toks[s - 1].kind == Kind::Word
                        && JOIN_WORDS.iter().any(|w| is_kw(q, &toks[s - 1], w))
                    {
                        s -= 1;
                    }
                    s
                })
                .unwrap_or(hi);
            let cons = (j + 1..end).find(|&k| {
                dep[k] == base && (is_kw(q, &toks[k], "using") || is_kw(q, &toks[k], "on"))
            });
            let ok = cons.is_some_and(|k| {
                let n = (k + 1..end)
                    .filter(|&m| ident_name(q, &toks[m]).as_deref() == Some("series_id"))
                    .count();
                if is_kw(q, &toks[k], "using") {
                    n >= 1
                } else {
                    n >= 2 && (k + 1..end).any(|m| toks[m].kind == Kind::Punct('='))
                }
            });
            if !ok {
                return Err(format!(
                    "the JOIN at {} must be on series_id (USING series_id, or ON a.series_id = b.series_id): only then is each shard's join complete",
                    at_pos(q, t.start)
                ));
            }
        }
        j += 1;
    }
    Ok(())
}

const JOIN_WORDS: &[&str] = &[
    "left", "right", "inner", "outer", "full", "any", "all", "semi", "anti", "asof", "global",
    "paste",
];

/// Every `(SELECT ...)` in `lo..hi` is shard-local: no aggregate, GROUP BY,
/// DISTINCT, LIMIT or window, unless it groups by `series_id` (then each
/// group is whole on its shard) and has no LIMIT.
fn check_subqueries(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> Result<(), PlanError> {
    let mut j = lo;
    while j < hi {
        if toks[j].kind == Kind::Punct('(')
            && toks
                .get(j + 1)
                .is_some_and(|t| is_kw(q, t, "select") || is_kw(q, t, "with"))
        {
            let close = matching(toks, dep, j);
            let c = clauses(q, toks, dep, j + 1, close)?;
            let at = at_pos(q, toks[j + 1].start);
            let by_series = c.group_by.is_some_and(|g| {
                split_commas(toks, dep, g.0, g.1).iter().any(|r| {
                    r.1 > r.0
                        && ident_name(q, &toks[r.1 - 1]).as_deref() == Some("series_id")
                        && (r.1 - r.0 == 1 || toks[r.1 - 2].kind == Kind::Punct('.'))
                })
            });
            let aggregates = has_aggregate_call(q, toks, dep, c.select.0, close);
            if c.limit.is_some() || c.offset.is_some() {
                return Err(format!(
                    "LIMIT/OFFSET in the subquery at {at} would apply per shard; not supported"
                ));
            }
            if (aggregates || c.group_by.is_some() || c.distinct) && !by_series {
                return Err(format!(
                    "the subquery at {at} aggregates (or uses GROUP BY / DISTINCT) and would run per shard: not supported unless it groups by series_id"
                ));
            }
            check_from(
                q,
                toks,
                dep,
                c.from.map_or(close, |f| f.0),
                c.from.map_or(close, |f| f.1),
            )?;
            check_subqueries(q, toks, dep, j + 1, close)?;
            j = close + 1;
            continue;
        }
        j += 1;
    }
    Ok(())
}

fn is_call(q: &str, toks: &[Token], k: usize) -> bool {
    matches!(toks[k].kind, Kind::Word | Kind::QuotedIdent)
        && toks.get(k + 1).is_some_and(|n| n.kind == Kind::Punct('('))
        && !(k > 0 && toks[k - 1].kind == Kind::Punct('.'))
        && !is_kw(q, &toks[k], "in")
}

fn call_name(q: &str, t: &Token) -> String {
    ident_name(q, t).unwrap_or_default()
}

/// The name an identifier token stands for (unquoted), if it is one.
fn ident_name(q: &str, t: &Token) -> Option<String> {
    match t.kind {
        Kind::Word if !text_of(q, t).starts_with(|c: char| c.is_ascii_digit()) => {
            Some(text_of(q, t).to_owned())
        }
        Kind::QuotedIdent => unquote(text_of(q, t)),
        _ => None,
    }
}

// ------------------------------------------------------------------ expressions

/// A parsed expression (of SELECT, HAVING, ORDER BY), with its byte span.
#[derive(Debug, Clone)]
enum Ex {
    Lit(Value, String),
    Ident(String),
    Call(String, Vec<Node>),
    Agg(AggCall),
    Bin(BinOp, Box<Node>, Box<Node>),
    Neg(Box<Node>),
    Not(Box<Node>),
    /// Text the router does not evaluate (no aggregate inside).
    Opaque,
}

#[derive(Debug, Clone)]
struct Node {
    ex: Ex,
    span: (usize, usize),
}

#[derive(Debug, Clone)]
struct AggCall {
    name: String,
    params: Vec<String>,
    args: Vec<String>,
    distinct: bool,
}

struct Parser<'a> {
    q: &'a str,
    toks: &'a [Token],
    dep: &'a [i32],
    i: usize,
    hi: usize,
}

type PResult<T> = Result<T, (usize, String)>;

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Token> {
        (self.i < self.hi).then(|| &self.toks[self.i])
    }
    fn kw(&self, k: &str) -> bool {
        self.peek().is_some_and(|t| is_kw(self.q, t, k))
    }
    fn punct(&self, c: char) -> bool {
        self.peek().is_some_and(|t| t.kind == Kind::Punct(c))
    }
    fn pos(&self) -> usize {
        self.peek()
            .map_or_else(|| self.toks[self.hi - 1].end, |t| t.start)
    }
    fn err<T>(&self, what: &str) -> PResult<T> {
        let found = self.peek().map_or("the end".to_owned(), |t| {
            format!("`{}`", text_of(self.q, t))
        });
        Err((self.pos(), format!("{what}, found {found}")))
    }
    fn node(&self, ex: Ex, start: usize) -> Node {
        Node {
            ex,
            span: (start, self.toks[self.i - 1].end),
        }
    }

    fn expr(&mut self) -> PResult<Node> {
        self.binary(0)
    }

    fn binary(&mut self, level: u8) -> PResult<Node> {
        if level == 2 && self.kw("not") {
            let start = self.pos();
            self.i += 1;
            let e = self.binary(2)?;
            return Ok(self.node(Ex::Not(Box::new(e)), start));
        }
        if level > 5 {
            return self.unary();
        }
        let start = self.pos();
        let mut l = self.binary(level + 1)?;
        while let Some(op) = self.op(level) {
            let r = self.binary(level + 1)?;
            l = self.node(Ex::Bin(op, Box::new(l), Box::new(r)), start);
            if level == 3 {
                break; // comparisons do not chain
            }
        }
        Ok(l)
    }

    /// The operator of `level` at the cursor, consumed.
    fn op(&mut self, level: u8) -> Option<BinOp> {
        let t = self.peek()?;
        let next = self.toks.get(self.i + 1).filter(|_| self.i + 1 < self.hi);
        let adjacent = |c: char| next.is_some_and(|n| n.kind == Kind::Punct(c) && n.start == t.end);
        let (op, n) = match (level, t.kind) {
            (0, Kind::Word) if is_kw(self.q, t, "or") => (BinOp::Or, 1),
            (1, Kind::Word) if is_kw(self.q, t, "and") => (BinOp::And, 1),
            (3, Kind::Punct('=')) => (BinOp::Eq, if adjacent('=') { 2 } else { 1 }),
            (3, Kind::Punct('!')) if adjacent('=') => (BinOp::Ne, 2),
            (3, Kind::Punct('<')) if adjacent('>') => (BinOp::Ne, 2),
            (3, Kind::Punct('<')) if adjacent('=') => (BinOp::Le, 2),
            (3, Kind::Punct('>')) if adjacent('=') => (BinOp::Ge, 2),
            (3, Kind::Punct('<')) => (BinOp::Lt, 1),
            (3, Kind::Punct('>')) => (BinOp::Gt, 1),
            (4, Kind::Punct('+')) => (BinOp::Add, 1),
            (4, Kind::Punct('-')) => (BinOp::Sub, 1),
            (5, Kind::Punct('*')) => (BinOp::Mul, 1),
            (5, Kind::Punct('/')) => (BinOp::Div, 1),
            (5, Kind::Punct('%')) => (BinOp::Mod, 1),
            _ => return None,
        };
        self.i += n;
        Some(op)
    }

    fn unary(&mut self) -> PResult<Node> {
        let start = self.pos();
        if self.punct('-') {
            self.i += 1;
            let e = self.unary()?;
            if let Ex::Lit(v, s) = &e.ex {
                let neg = match v {
                    Value::Int(i) => Some(Value::Int(-i)),
                    Value::UInt(u) if *u <= i64::MAX as u64 + 1 => {
                        Some(Value::Int((*u as i64).wrapping_neg()))
                    }
                    Value::Float(f) => Some(Value::Float(-f)),
                    _ => None,
                };
                if let Some(n) = neg {
                    return Ok(self.node(Ex::Lit(n, format!("-{s}")), start));
                }
            }
            return Ok(self.node(Ex::Neg(Box::new(e)), start));
        }
        if self.punct('+') {
            self.i += 1;
            return self.unary();
        }
        self.primary()
    }

    fn primary(&mut self) -> PResult<Node> {
        let start = self.pos();
        let Some(t) = self.peek() else {
            return self.err("expected an expression");
        };
        let text = text_of(self.q, t);
        match t.kind {
            Kind::Punct('(') => {
                if self
                    .toks
                    .get(self.i + 1)
                    .is_some_and(|n| is_kw(self.q, n, "select"))
                {
                    return self.err("a subquery here is not supported");
                }
                self.i += 1;
                let e = self.expr()?;
                if !self.punct(')') {
                    return self.err("expected `)`");
                }
                self.i += 1;
                Ok(Node {
                    ex: e.ex,
                    span: (start, self.toks[self.i - 1].end),
                })
            }
            Kind::Str => {
                self.i += 1;
                let lit = if text.starts_with('\'') {
                    unescape_string(text)
                } else {
                    None
                };
                match lit {
                    Some(s) => {
                        let shown = format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
                        Ok(self.node(Ex::Lit(Value::Str(s), shown), start))
                    }
                    None => Ok(self.node(Ex::Opaque, start)),
                }
            }
            Kind::Word if text.starts_with(|c: char| c.is_ascii_digit()) => {
                // 1, 1.5, 1e3, 1.5e-3: the lexer cuts at `.` and `-`.
                let mut end = self.i + 1;
                let mut s = text.to_owned();
                while end < self.hi {
                    let n = &self.toks[end];
                    let joined = n.start == self.toks[end - 1].end;
                    let last = s.chars().last().unwrap_or(' ');
                    if joined
                        && (n.kind == Kind::Punct('.')
                            || (matches!(n.kind, Kind::Punct('-' | '+'))
                                && matches!(last, 'e' | 'E'))
                            || (n.kind == Kind::Word && matches!(last, '.' | '-' | '+')))
                    {
                        s.push_str(text_of(self.q, n));
                        end += 1;
                    } else {
                        break;
                    }
                }
                self.i = end;
                let (v, shown) =
                    number(&s).ok_or((start, format!("cannot read the number `{s}`")))?;
                Ok(self.node(Ex::Lit(v, shown), start))
            }
            Kind::Word if is_kw(self.q, t, "null") => {
                self.i += 1;
                Ok(self.node(Ex::Lit(Value::Null, "NULL".into()), start))
            }
            Kind::Word if is_kw(self.q, t, "true") || is_kw(self.q, t, "false") => {
                self.i += 1;
                Ok(self.node(
                    Ex::Lit(
                        Value::Bool(is_kw(self.q, t, "true")),
                        text.to_ascii_lowercase(),
                    ),
                    start,
                ))
            }
            Kind::Word | Kind::QuotedIdent => {
                if [
                    "case", "cast", "interval", "not", "distinct", "exists", "array",
                ]
                .iter()
                .any(|k| is_kw(self.q, t, k))
                    && t.kind == Kind::Word
                    && !self
                        .toks
                        .get(self.i + 1)
                        .is_some_and(|n| n.kind == Kind::Punct('(') && n.start == t.end)
                {
                    return self.err("this construct is not evaluated by the router");
                }
                let name = ident_name(self.q, t).ok_or((start, format!("cannot read `{text}`")))?;
                self.i += 1;
                if self.punct('(') {
                    return self.call(name, start);
                }
                let mut last = name;
                while self.punct('.') {
                    self.i += 1;
                    let Some(n) = self.peek().and_then(|n| ident_name(self.q, n)) else {
                        return self.err("expected a name after `.`");
                    };
                    self.i += 1;
                    last = n;
                }
                if self.punct('[') || self.punct(':') {
                    return self.err("this construct is not evaluated by the router");
                }
                Ok(self.node(Ex::Ident(last), start))
            }
            _ => self.err("expected an expression"),
        }
    }

    /// `name(` at the cursor: an aggregate (`name(params)(args)` too) or a
    /// function the router may evaluate.
    fn call(&mut self, name: String, start: usize) -> PResult<Node> {
        let open = self.i;
        let close = matching(self.toks, self.dep, open);
        if aggregate_name(&name).is_some() {
            let mut groups = vec![(open, close)];
            if self
                .toks
                .get(close + 1)
                .is_some_and(|t| t.kind == Kind::Punct('('))
                && close + 1 < self.hi
            {
                let c2 = matching(self.toks, self.dep, close + 1);
                groups.push((close + 1, c2));
            }
            let (args_r, params_r) = if groups.len() == 2 {
                (groups[1], Some(groups[0]))
            } else {
                (groups[0], None)
            };
            self.i = args_r.1 + 1;
            if self.kw("over") {
                return self.err("window functions (OVER) are not supported across shards");
            }
            let texts = |r: (usize, usize)| -> Vec<String> {
                if r.1 == r.0 + 1 {
                    return vec![];
                }
                split_commas(self.toks, self.dep, r.0 + 1, r.1)
                    .into_iter()
                    .map(|s| span_text(self.q, self.toks, s).to_owned())
                    .collect()
            };
            let mut args = texts(args_r);
            let mut distinct = false;
            if let Some(first) = args.first_mut() {
                let lower = first.to_ascii_lowercase();
                if lower.starts_with("distinct ") || lower.starts_with("distinct\n") {
                    distinct = true;
                    *first = first[8..].trim().to_owned();
                }
            }
            if args.len() == 1 && args[0] == "*" {
                args.clear();
            }
            let call = AggCall {
                name,
                params: params_r.map(texts).unwrap_or_default(),
                args,
                distinct,
            };
            return Ok(self.node(Ex::Agg(call), start));
        }
        self.i += 1;
        let mut args = Vec::new();
        if !self.punct(')') {
            loop {
                args.push(self.expr()?);
                if self.punct(',') {
                    self.i += 1;
                    continue;
                }
                break;
            }
        }
        if !self.punct(')') {
            return self.err("expected `,` or `)`");
        }
        self.i += 1;
        if self.punct('(') || self.kw("over") {
            return self.err("this construct is not evaluated by the router");
        }
        Ok(self.node(Ex::Call(name, args), start))
    }
}

fn unescape_string(raw: &str) -> Option<String> {
    let inner = &raw[1..raw.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                c @ ('\\' | '\'' | '"') => out.push(c),
                _ => return None,
            },
            '\'' => {
                chars.next()?;
                out.push('\'');
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// A numeric literal and its ClickHouse column-name rendering.
fn number(s: &str) -> Option<(Value, String)> {
    if let Ok(u) = s.parse::<u64>() {
        return Some((Value::UInt(u), u.to_string()));
    }
    let f: f64 = s.parse().ok()?;
    let shown = if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{f}.")
    } else {
        format!("{f}")
    };
    Some((Value::Float(f), shown))
}

/// Whether tokens `lo..hi` call an aggregate outside subqueries.
fn has_aggregate_call(q: &str, toks: &[Token], dep: &[i32], lo: usize, hi: usize) -> bool {
    let mut j = lo;
    while j < hi {
        if toks[j].kind == Kind::Punct('(')
            && toks.get(j + 1).is_some_and(|t| is_kw(q, t, "select"))
        {
            j = matching(toks, dep, j) + 1;
            continue;
        }
        if is_call(q, toks, j) && aggregate_name(&call_name(q, &toks[j])).is_some() {
            return true;
        }
        j += 1;
    }
    false
}

// ------------------------------------------------------------------ planning

/// A projection item.
struct Item {
    node: Option<Node>,
    /// The expression's text (without the alias).
    text: String,
    alias: Option<String>,
    /// Whether it is `*` or `t.*` (or `COLUMNS(...)`).
    star: bool,
}

const NOT_ALIASES: &[&str] = &[
    "end", "null", "true", "false", "second", "minute", "hour", "day", "week", "month", "quarter",
    "year", "desc", "asc",
];

fn parse_node(q: &str, toks: &[Token], dep: &[i32], r: (usize, usize)) -> Result<Node, PlanError> {
    let mut p = Parser {
        q,
        toks,
        dep,
        i: r.0,
        hi: r.1,
    };
    let res = p.expr().and_then(|n| {
        if p.i < r.1 {
            p.err("unexpected text").map(|()| n)
        } else {
            Ok(n)
        }
    });
    match res {
        Ok(n) => Ok(n),
        Err(_) if !has_aggregate_call(q, toks, dep, r.0, r.1) => Ok(Node {
            ex: Ex::Opaque,
            span: (toks[r.0].start, toks[r.1 - 1].end),
        }),
        Err((at, msg)) => Err(format!(
            "{msg} at {}: over aggregates the router evaluates only + - * / %, comparisons, AND/OR/NOT, literals and {} (compute the rest inside the aggregate's argument, or use per_shard=true)",
            at_pos(q, at),
            ROUTER_FUNCTIONS.join(", ")
        )),
    }
}

fn items(q: &str, toks: &[Token], dep: &[i32], r: (usize, usize)) -> Result<Vec<Item>, PlanError> {
    let mut out = Vec::new();
    for (lo, hi) in split_commas(toks, dep, r.0, r.1) {
        if lo >= hi {
            return Err(format!(
                "an empty column in SELECT near {}",
                at_pos(q, toks[lo.min(toks.len() - 1)].start)
            ));
        }
        let mut end = hi;
        let mut alias = None;
        let last = &toks[hi - 1];
        if hi - lo >= 2 && matches!(last.kind, Kind::Word | Kind::QuotedIdent) {
            let prev = &toks[hi - 2];
            if is_kw(q, prev, "as") {
                alias = ident_name(q, last);
                end = hi - 2;
            } else if dep[hi - 1] == dep[lo]
                && !NOT_ALIASES.iter().any(|w| is_kw(q, last, w))
                && ident_name(q, last).is_some()
                && (matches!(prev.kind, Kind::Punct(')') | Kind::Str | Kind::QuotedIdent)
                    || (prev.kind == Kind::Word
                        && !is_kw(q, prev, "as")
                        && (hi - lo == 2 || toks[hi - 3].kind != Kind::Punct('.'))))
                && prev.kind != Kind::Punct('.')
                && !(prev.kind == Kind::Word
                    && [
                        "distinct", "not", "and", "or", "is", "case", "when", "then", "else",
                        "interval",
                    ]
                    .iter()
                    .any(|w| is_kw(q, prev, w)))
            {
                alias = ident_name(q, last);
                end = hi - 1;
            }
        }
        let text = span_text(q, toks, (lo, end)).to_owned();
        let star = toks[end - 1].kind == Kind::Punct('*')
            && (end - lo == 1 || toks[end - 2].kind == Kind::Punct('.'))
            || (is_call(q, toks, lo) && call_name(q, &toks[lo]).eq_ignore_ascii_case("columns"));
        let node = if star {
            None
        } else {
            Some(parse_node(q, toks, dep, (lo, end))?)
        };
        out.push(Item {
            node,
            text,
            alias,
            star,
        });
    }
    Ok(out)
}

fn uint_clause(q: &str, toks: &[Token], r: (usize, usize), what: &str) -> Result<u64, PlanError> {
    let mut hi = r.1;
    if what == "OFFSET"
        && hi > r.0 + 1
        && (is_kw(q, &toks[hi - 1], "rows") || is_kw(q, &toks[hi - 1], "row"))
    {
        hi -= 1;
    }
    if hi == r.0 + 1 && toks[r.0].kind == Kind::Word {
        if let Ok(n) = text_of(q, &toks[r.0]).parse::<u64>() {
            return Ok(n);
        }
    }
    let at = toks
        .get(r.0)
        .map_or(String::new(), |t| format!(" at {}", at_pos(q, t.start)));
    Err(format!("{what}{at} must be a plain non-negative integer here (LIMIT n, LIMIT m, n, LIMIT n OFFSET m; LIMIT ... BY and WITH TIES are not supported)"))
}

fn has_aggregates(n: &Node, agg_aliases: &HashSet<String>) -> bool {
    match &n.ex {
        Ex::Agg(_) => true,
        Ex::Ident(name) => agg_aliases.contains(name),
        Ex::Call(_, args) => args.iter().any(|a| has_aggregates(a, agg_aliases)),
        Ex::Bin(_, l, r) => has_aggregates(l, agg_aliases) || has_aggregates(r, agg_aliases),
        Ex::Neg(e) | Ex::Not(e) => has_aggregates(e, agg_aliases),
        Ex::Lit(..) | Ex::Opaque => false,
    }
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Builds router expressions and the shard row they read.
struct Builder<'a> {
    q: &'a str,
    keys: Vec<String>,
    scalars: Vec<String>,
    partials: Vec<String>,
    aggs: Vec<AggSpec>,
    /// alias -> item node, for items with aggregates
    agg_items: Vec<(String, Node)>,
    agg_aliases: HashSet<String>,
    depth: usize,
}

impl Builder<'_> {
    fn scalar(&mut self, text: &str) -> usize {
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

    fn build(&mut self, n: &Node) -> Result<RExpr, PlanError> {
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
fn ch_name(q: &str, n: &Node) -> String {
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

/// One ORDER BY item: the expression's token range, direction, NULLS.
fn order_items(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    r: (usize, usize),
) -> Result<Vec<SortKey<(usize, usize)>>, PlanError> {
    let mut out = Vec::new();
    for (lo, mut hi) in split_commas(toks, dep, r.0, r.1) {
        let mut desc = false;
        let mut nulls_first = None;
        if hi >= lo + 3 && is_kw(q, &toks[hi - 2], "nulls") {
            nulls_first = Some(is_kw(q, &toks[hi - 1], "first"));
            hi -= 2;
        }
        if hi > lo + 1 {
            let t = &toks[hi - 1];
            if is_kw(q, t, "desc") || is_kw(q, t, "descending") {
                desc = true;
                hi -= 1;
            } else if is_kw(q, t, "asc") || is_kw(q, t, "ascending") {
                hi -= 1;
            }
        }
        if let Some(c) = (lo..hi).find(|&k| dep[k] == dep[lo] && is_kw(q, &toks[k], "collate")) {
            return Err(format!(
                "COLLATE (at {}) is not supported across shards",
                at_pos(q, toks[c].start)
            ));
        }
        if lo >= hi {
            return Err("an empty ORDER BY item".into());
        }
        out.push(SortKey {
            expr: (lo, hi),
            desc,
            nulls_first: nulls_first.unwrap_or(false),
        });
    }
    Ok(out)
}

fn position(q: &str, toks: &[Token], r: (usize, usize)) -> Option<usize> {
    (r.1 == r.0 + 1)
        .then(|| text_of(q, &toks[r.0]).parse::<usize>().ok())
        .flatten()
}

/// Plans `sql` (a statement [`crate::sql_check::check_select`] accepted).
pub fn plan(sql: &str) -> Result<Plan, PlanError> {
    let q = sql;
    let toks = lex(q)?;
    if toks.is_empty() {
        return Err("empty query".into());
    }
    let toks: Vec<Token> = match toks.last() {
        Some(t) if t.kind == Kind::Semicolon => toks[..toks.len() - 1].to_vec(),
        _ => toks,
    };
    let dep = depths(q, &toks)?;
    let c = clauses(q, &toks, &dep, 0, toks.len())?;
    if let Some(f) = c.from {
        check_from(q, &toks, &dep, f.0 + 1, f.1)?;
    }
    check_subqueries(q, &toks, &dep, 0, toks.len())?;
    let items = items(q, &toks, &dep, c.select)?;
    let limit = c.limit.map(|r| -> Result<(u64, Option<u64>), PlanError> {
        // LIMIT m, n
        let parts = split_commas(&toks, &dep, r.0, r.1);
        if parts.len() == 2 {
            Ok((
                uint_clause(q, &toks, parts[1], "LIMIT")?,
                Some(uint_clause(q, &toks, parts[0], "LIMIT")?),
            ))
        } else {
            Ok((uint_clause(q, &toks, r, "LIMIT")?, None))
        }
    });
    let (limit, offset_in_limit) = match limit.transpose()? {
        Some((n, off)) => (Some(n), off),
        None => (None, None),
    };
    let offset = match (c.offset, offset_in_limit) {
        (Some(r), None) => uint_clause(q, &toks, r, "OFFSET")?,
        (Some(r), Some(_)) => {
            return Err(format!(
                "OFFSET at {} with LIMIT m, n",
                at_pos(q, toks[r.0].start)
            ))
        }
        (None, o) => o.unwrap_or(0),
    };
    let from = c
        .from
        .map_or(String::new(), |f| span_text(q, &toks, f).to_owned());
    let order = c
        .order_by
        .map(|r| order_items(q, &toks, &dep, r))
        .transpose()?
        .unwrap_or_default();
    // Aliases of items with aggregates (to a fixpoint: aliases of aliases).
    let mut agg_aliases = HashSet::new();
    loop {
        let before = agg_aliases.len();
        for it in &items {
            if let (Some(a), Some(n)) = (&it.alias, &it.node) {
                if has_aggregates(n, &agg_aliases) {
                    agg_aliases.insert(a.clone());
                }
            }
        }
        if agg_aliases.len() == before {
            break;
        }
    }
    let item_has_agg = |it: &Item| {
        it.node
            .as_ref()
            .is_some_and(|n| has_aggregates(n, &agg_aliases))
    };
    let having_node = c
        .having
        .map(|r| parse_node(q, &toks, &dep, r))
        .transpose()?;
    let order_nodes: Vec<SortKey<Option<Node>>> = order
        .iter()
        .map(|k| {
            let node = match position(q, &toks, k.expr) {
                Some(_) => None,
                None => Some(parse_node(q, &toks, &dep, k.expr)?),
            };
            Ok(SortKey {
                expr: node,
                desc: k.desc,
                nulls_first: k.nulls_first,
            })
        })
        .collect::<Result<_, PlanError>>()?;
    let aggregating = c.group_by.is_some()
        || c.distinct
        || items.iter().any(item_has_agg)
        || having_node.is_some()
        || order_nodes.iter().any(|k| {
            k.expr
                .as_ref()
                .is_some_and(|n| has_aggregates(n, &agg_aliases))
        });
    let positional = |p: usize, what: &str| -> Result<&Item, PlanError> {
        items
            .get(p.wrapping_sub(1))
            .filter(|it| !it.star)
            .ok_or_else(|| format!("{what} position {p} is not a column of the SELECT list"))
    };
    if !aggregating {
        let order = order
            .iter()
            .map(|k| {
                let text = match position(q, &toks, k.expr) {
                    Some(p) => positional(p, "ORDER BY")?.text.clone(),
                    None => span_text(q, &toks, k.expr).to_owned(),
                };
                Ok(SortKey {
                    expr: text,
                    desc: k.desc,
                    nulls_first: k.nulls_first,
                })
            })
            .collect::<Result<_, PlanError>>()?;
        return Ok(Plan::Rows(RowsPlan {
            items: items.iter().map(span_text_item).collect(),
            from,
            order,
            order_text: c.order_by.map(|r| span_text(q, &toks, r).to_owned()),
            limit,
            offset,
        }));
    }
    if let Some(it) = items.iter().find(|it| it.star) {
        return Err(format!(
            "`{}` with GROUP BY, DISTINCT or aggregates is not supported; name the columns",
            it.text
        ));
    }
    let mut keys = Vec::new();
    if let Some(g) = c.group_by {
        for r in split_commas(&toks, &dep, g.0, g.1) {
            if r.0 >= r.1 {
                return Err("an empty GROUP BY item".into());
            }
            let text = match position(q, &toks, r) {
                Some(p) => {
                    let it = positional(p, "GROUP BY")?;
                    if item_has_agg(it) {
                        return Err(format!("GROUP BY position {p} is an aggregate"));
                    }
                    it.text.clone()
                }
                None => span_text(q, &toks, r).to_owned(),
            };
            keys.push(text);
        }
    } else if c.distinct && !items.iter().any(item_has_agg) {
        // SELECT DISTINCT a, b: GROUP BY a, b.
        keys = items.iter().map(|it| it.text.clone()).collect();
    }
    let mut b = Builder {
        q,
        keys,
        scalars: Vec::new(),
        partials: Vec::new(),
        aggs: Vec::new(),
        agg_items: items
            .iter()
            .filter_map(|it| Some((it.alias.clone()?, it.node.clone()?)))
            .filter(|(a, _)| agg_aliases.contains(a))
            .collect(),
        agg_aliases: agg_aliases.clone(),
        depth: 0,
    };
    // Non-aggregate items go to the shards as written (aliases included, so
    // GROUP BY and WHERE can name them).
    let mut outputs = Vec::new();
    for it in &items {
        let node = it.node.as_ref().expect("not a star");
        if item_has_agg(it) {
            let e = b.build(node)?;
            let name = it.alias.clone().unwrap_or_else(|| ch_name(q, node));
            outputs.push((OutName::Fixed(name), e));
        } else {
            let text = span_text_item(it);
            let col = match b.keys.iter().position(|k| squash(k) == squash(&text)) {
                Some(k) if it.alias.is_none() => k,
                _ => b.scalar(&text),
            };
            let fallback = it.alias.clone().unwrap_or_else(|| ch_name(q, node));
            outputs.push((OutName::Shard(col, fallback), RExpr::Col(col)));
        }
    }
    let resolve_item = |n: &Node| -> Option<usize> {
        match &n.ex {
            Ex::Ident(name) => items
                .iter()
                .position(|it| it.alias.as_deref() == Some(name.as_str())),
            _ => None,
        }
    };
    let having = having_node.as_ref().map(|n| b.build(n)).transpose()?;
    let mut sort = Vec::new();
    for (k, raw) in order_nodes.iter().zip(&order) {
        let expr = match &k.expr {
            None => {
                let p = position(q, &toks, raw.expr).expect("positional");
                positional(p, "ORDER BY")?;
                outputs[p - 1].1.clone()
            }
            Some(n) => match resolve_item(n) {
                Some(i) => outputs[i].1.clone(),
                None => b.build(n)?,
            },
        };
        sort.push(SortKey {
            expr,
            desc: k.desc,
            nulls_first: k.nulls_first,
        });
    }
    let (keys, scalars, partials) = (b.keys, b.scalars, b.partials);
    let mut aggs = b.aggs;
    // Partials come after keys and scalars in the shard row.
    for a in &mut aggs {
        for c in &mut a.cols {
            *c += keys.len() + scalars.len();
        }
    }
    Ok(Plan::Groups(GroupsPlan {
        keys,
        scalars,
        partials,
        from,
        group_by: c.group_by.is_some() || (c.distinct && !items.iter().any(item_has_agg)),
        aggs,
        outputs,
        having,
        distinct: c.distinct,
        order: sort,
        limit,
        offset,
    }))
}

fn span_text_item(it: &Item) -> String {
    match &it.alias {
        Some(a) => format!("{} AS {}", it.text, quote_ident(a)),
        None => it.text.clone(),
    }
}

/// Whether `sql` reads no shard's table: no FROM, or FROM a table function
/// (`numbers(10)`). Every shard would give the same answer; one is kept.
pub fn reads_no_table(sql: &str) -> bool {
    let Ok(toks) = lex(sql) else { return false };
    let Ok(dep) = depths(sql, &toks) else {
        return false;
    };
    match (0..toks.len()).find(|&k| dep[k] == 0 && is_kw(sql, &toks[k], "from")) {
        None => true,
        Some(k) => k + 1 < toks.len() && is_call(sql, &toks, k + 1),
    }
}

/// An identifier, backquoted unless it is a plain word.
pub fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_owned()
    } else {
        format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
    }
}

// ------------------------------------------------------------------ shard SQL

/// `text` with every reference to a column in `missing` replaced by
/// `NULL` (a shard that never received the field has no such column: its
/// rows read NULL there, as they would in one table holding every field).
pub fn rewrite_missing(text: &str, missing: &HashSet<String>) -> String {
    if missing.is_empty() {
        return text.to_owned();
    }
    let Ok(toks) = lex(text) else {
        return text.to_owned();
    };
    let mut out = String::new();
    let mut copied = 0;
    for (i, t) in toks.iter().enumerate() {
        let Some(name) = ident_name(text, t) else {
            continue;
        };
        if !missing.contains(&name) {
            continue;
        }
        let next = toks.get(i + 1);
        if next.is_some_and(|n| matches!(n.kind, Kind::Punct('(' | '.'))) {
            continue;
        }
        if i > 0 && is_kw(text, &toks[i - 1], "as") {
            continue;
        }
        // `f.usage` -> NULL
        let mut start = t.start;
        if i >= 2 && toks[i - 1].kind == Kind::Punct('.') {
            if ident_name(text, &toks[i - 2]).is_some()
                && !(i >= 3 && toks[i - 3].kind == Kind::Punct('.'))
            {
                start = toks[i - 2].start;
            } else {
                continue;
            }
        }
        if start < copied {
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str("NULL");
        copied = t.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// A projection item for a shard that lacks some columns: a bare column
/// keeps its name (`NULL AS usage`).
fn shard_item(item: &str, missing: &HashSet<String>) -> String {
    let rewritten = rewrite_missing(item, missing);
    if rewritten == "NULL" && rewritten != item {
        let toks = lex(item).unwrap_or_default();
        if let Some(name) = toks.last().and_then(|t| ident_name(item, t)) {
            return format!("NULL AS {}", quote_ident(&name));
        }
    }
    rewritten
}

impl Plan {
    /// The statement one shard runs. `missing`: columns other shards have
    /// and this one lacks; `cap`: at most this many rows from a shard.
    pub fn shard_sql(&self, missing: &HashSet<String>, cap: u64) -> String {
        let rw = |s: &str| rewrite_missing(s, missing);
        match self {
            Plan::Rows(p) => {
                let mut cols: Vec<String> =
                    p.items.iter().map(|i| shard_item(i, missing)).collect();
                for (i, k) in p.order.iter().enumerate() {
                    cols.push(format!("{} AS __sh_o{i}", rw(&k.expr)));
                }
                let mut sql = format!("SELECT {}", cols.join(", "));
                if !p.from.is_empty() {
                    sql.push(' ');
                    sql.push_str(&rw(&p.from));
                }
                if let Some(o) = &p.order_text {
                    sql.push_str(" ORDER BY ");
                    sql.push_str(&rw(o));
                }
                let n = p.limit.map_or(cap, |l| l.saturating_add(p.offset).min(cap));
                sql.push_str(&format!(" LIMIT {n}"));
                sql
            }
            Plan::Groups(p) => {
                let cols: Vec<String> = p
                    .keys
                    .iter()
                    .chain(&p.scalars)
                    .chain(&p.partials)
                    .map(|s| rw(s))
                    .collect();
                let mut sql = format!("SELECT {}", cols.join(", "));
                if !p.from.is_empty() {
                    sql.push(' ');
                    sql.push_str(&rw(&p.from));
                }
                if p.group_by {
                    sql.push_str(" GROUP BY ");
                    sql.push_str(&p.keys.iter().map(|k| rw(k)).collect::<Vec<_>>().join(", "));
                }
                sql.push_str(&format!(" LIMIT {cap}"));
                sql
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(sql: &str) -> GroupsPlan {
        match plan(sql).unwrap() {
            Plan::Groups(g) => g,
            p => panic!("{sql}: {p:?}"),
        }
    }

    #[test]
    fn aggregate_list_is_sorted_and_combinators_strip() {
        assert!(AGGREGATES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(aggregate_name("sumIf"), Some(("sum".into(), vec!["if"])));
        assert_eq!(aggregate_name("COUNT"), Some(("count".into(), vec![])));
        assert_eq!(
            aggregate_name("uniqExactStateIf"),
            Some(("uniqexact".into(), vec!["state", "if"]))
        );
        assert_eq!(aggregate_name("toStartOfHour"), None);
        assert_eq!(aggregate_name("round"), None);
    }

    #[test]
    fn rows_push_order_and_limit_plus_offset() {
        let p = plan("SELECT time, usage FROM cpu FINAL WHERE usage > 1 ORDER BY time DESC, usage LIMIT 10 OFFSET 5").unwrap();
        let Plan::Rows(r) = &p else { panic!("{p:?}") };
        assert_eq!(r.limit, Some(10));
        assert_eq!(r.offset, 5);
        assert_eq!(r.order.len(), 2);
        assert!(r.order[0].desc && !r.order[1].desc);
        assert_eq!(
            p.shard_sql(&HashSet::new(), 1000),
            "SELECT time, usage, time AS __sh_o0, usage AS __sh_o1 FROM cpu FINAL WHERE usage > 1 ORDER BY time DESC, usage LIMIT 15"
        );
        let missing: HashSet<String> = ["usage".to_string()].into();
        assert_eq!(
            p.shard_sql(&missing, 1000),
            "SELECT time, NULL AS usage, time AS __sh_o0, NULL AS __sh_o1 FROM cpu FINAL WHERE NULL > 1 ORDER BY time DESC, NULL LIMIT 15"
        );
        let Plan::Rows(r) = plan("SELECT * FROM cpu LIMIT 5, 10").unwrap() else {
            panic!()
        };
        assert_eq!((r.limit, r.offset), (Some(10), 5));
    }

    #[test]
    fn aggregates_become_partials() {
        let g = groups(
            "SELECT s.tags['host'] AS host, count() AS n, avg(usage), sum(usage) / count(usage) AS m, median(usage), uniqExact(idle) \
             FROM cpu AS f FINAL INNER JOIN (SELECT series_id, tags FROM _series WHERE measurement = 'cpu') AS s USING series_id \
             GROUP BY host HAVING n > 2 ORDER BY host LIMIT 3",
        );
        assert_eq!(g.keys, vec!["host"]);
        assert_eq!(g.scalars, vec!["s.tags['host'] AS host"]);
        assert_eq!(
            g.partials,
            vec![
                "count()",
                "sum(usage)",
                "count(usage)",
                "groupArray(usage)",
                "groupUniqArray(idle)"
            ]
        );
        assert_eq!(g.outputs[0].0, OutName::Shard(1, "host".into()));
        assert_eq!(g.outputs[1].0, OutName::Fixed("n".into()));
        assert_eq!(g.outputs[2].0, OutName::Fixed("avg(usage)".into()));
        assert_eq!(
            g.outputs[3].1,
            RExpr::Bin(BinOp::Div, Box::new(RExpr::Agg(2)), Box::new(RExpr::Agg(3)))
        );
        assert_eq!(
            g.having,
            Some(RExpr::Bin(
                BinOp::Gt,
                Box::new(RExpr::Agg(0)),
                Box::new(RExpr::Lit(Value::UInt(2)))
            ))
        );
        assert_eq!(g.aggs[0].cols, vec![2]);
        assert_eq!(g.order[0].expr, RExpr::Col(1));
        let sql = Plan::Groups(g).shard_sql(&HashSet::new(), 100);
        assert!(
            sql.starts_with("SELECT host, s.tags['host'] AS host, count(), sum(usage)"),
            "{sql}"
        );
        assert!(
            sql.ends_with("USING series_id GROUP BY host LIMIT 100"),
            "{sql}"
        );
    }

    #[test]
    fn if_combinator_quantiles_and_names() {
        let g = groups("SELECT sumIf(x, y = 'a'), quantile(0.9)(x), quantilesExact(0.1, 0.9)(x), count(DISTINCT x), -sum(x*2.50), round(avg(x), 2) FROM t");
        assert_eq!(g.partials[0], "sumIf(x, y = 'a')");
        assert_eq!(
            g.aggs[1].kind,
            AggKind::Quantile {
                levels: vec![0.9],
                interpolated: true,
                multi: false
            }
        );
        assert_eq!(
            g.aggs[2].kind,
            AggKind::Quantile {
                levels: vec![0.1, 0.9],
                interpolated: false,
                multi: true
            }
        );
        assert_eq!(g.aggs[3].kind, AggKind::Uniq);
        let names: Vec<_> = g
            .outputs
            .iter()
            .map(|o| match &o.0 {
                OutName::Fixed(s) => s.clone(),
                OutName::Shard(_, s) => s.clone(),
            })
            .collect();
        assert_eq!(
            names,
            vec![
                "sumIf(x, equals(y, 'a'))",
                "quantile(0.9)(x)",
                "quantilesExact(0.1, 0.9)(x)",
                "countDistinct(x)",
                "negate(sum(multiply(x, 2.5)))",
                "round(avg(x), 2)"
            ]
        );
        assert!(!g.group_by);
    }

    #[test]
    fn distinct_without_aggregates_groups_by_the_columns() {
        let g = groups("SELECT DISTINCT host FROM t ORDER BY host DESC");
        assert_eq!(g.keys, vec!["host"]);
        assert!(g.group_by && g.aggs.is_empty());
        assert!(g.order[0].desc);
    }

    #[test]
    fn refusals_name_the_construct_and_position() {
        for (sql, want) in [
            (
                "SELECT topK(3)(x) FROM t",
                "aggregate `topK` (at line 1, column 8)",
            ),
            ("SELECT count() OVER () FROM t", "window function"),
            (
                "SELECT x FROM a JOIN b ON a.time = b.time",
                "must be on series_id",
            ),
            ("SELECT x FROM a, b", "comma join"),
            (
                "SELECT x FROM t WHERE x > (SELECT avg(x) FROM t)",
                "aggregates",
            ),
            (
                "SELECT x FROM t WHERE series_id IN (SELECT series_id FROM _series LIMIT 3)",
                "LIMIT/OFFSET in the subquery",
            ),
            ("SELECT 1 UNION ALL SELECT 2", "UNION"),
            ("WITH 1 AS a SELECT a", "WITH"),
            ("SELECT x FROM t GROUP BY x WITH TOTALS", "WITH TOTALS"),
            ("SELECT x FROM t LIMIT 1 BY x", "LIMIT"),
            (
                "SELECT CASE WHEN count() > 1 THEN 1 ELSE 0 END FROM t",
                "line 1, column 8",
            ),
            ("SELECT lower(toString(count())) FROM t", "function `lower`"),
            ("SELECT *, count() FROM t", "name the columns"),
        ] {
            let e = plan(sql).unwrap_err();
            assert!(e.contains(want), "{sql}: {e}");
        }
        // Shard-local subqueries and joins pass.
        plan("SELECT count() FROM cpu FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE tags['host'] = 'a')").unwrap();
        plan("SELECT max(n) FROM (SELECT series_id, count() AS n FROM cpu GROUP BY series_id)")
            .unwrap();
        plan(
            "SELECT f.time FROM cpu AS f FINAL LEFT JOIN _series AS s ON f.series_id = s.series_id",
        )
        .unwrap();
    }

    #[test]
    fn common_statements_plan() {
        for sql in [
            "SELECT toStartOfMinute(time) AS t, avg(usage) FROM cpu FINAL WHERE time >= now() - INTERVAL 1 HOUR AND series_id IN (SELECT series_id FROM _series WHERE tags['host'] = 'a') GROUP BY t ORDER BY t",
            "SELECT s.tags['host'] AS host, argMax(f.usage, f.time) AS last FROM cpu AS f FINAL JOIN _series AS s USING series_id GROUP BY host",
            "SELECT count() FROM cpu FINAL WHERE usage BETWEEN 1 AND 2",
            "SELECT host, count() FROM (SELECT tags['host'] AS host, series_id FROM _series) GROUP BY host",
            "SELECT avg(usage) AS a, a * 2 AS b FROM cpu",
            "SELECT quantile(0.5)(usage) - min(usage) FROM cpu",
            "select count(*) from cpu final where time > '2023-01-01 00:00:00'",
            "SELECT sum(usage) FROM cpu GROUP BY series_id ORDER BY 1 DESC LIMIT 3",
            "SELECT DISTINCT measurement FROM _series",
            "SELECT CASE WHEN usage > 50 THEN 'hi' ELSE 'lo' END AS lvl, count() c FROM cpu GROUP BY lvl",
            "SELECT time, usage * 2 AS u2 FROM cpu FINAL ORDER BY time DESC NULLS FIRST LIMIT 3",
            "SELECT count() AS \"my count\" FROM cpu",
        ] {
            plan(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let g = groups("SELECT avg(usage) AS a, a * 2 AS b FROM cpu");
        assert_eq!(g.aggs.len(), 1, "{g:?}");
        assert_eq!(
            g.outputs[1].1,
            RExpr::Bin(
                BinOp::Mul,
                Box::new(RExpr::Agg(0)),
                Box::new(RExpr::Lit(Value::UInt(2)))
            )
        );
        let g = groups("SELECT sum(usage) FROM cpu GROUP BY series_id ORDER BY 1 DESC LIMIT 3");
        assert_eq!(g.order[0].expr, RExpr::Agg(0));
        assert!(g.order[0].desc);
    }

    #[test]
    fn statements_without_tables_are_seen() {
        assert!(reads_no_table("SELECT 1"));
        assert!(reads_no_table("SELECT count() FROM numbers(10)"));
        assert!(!reads_no_table("SELECT count() FROM cpu"));
        assert!(!reads_no_table("SELECT x FROM (SELECT 1 AS x FROM cpu)"));
    }

    #[test]
    fn missing_columns_read_null() {
        let m: HashSet<String> = ["usage".to_string()].into();
        assert_eq!(
            rewrite_missing("avg(f.usage) + usage_x AS usage", &m),
            "avg(NULL) + usage_x AS usage"
        );
        assert_eq!(
            rewrite_missing("`usage` > 1 AND usage(1)", &m),
            "NULL > 1 AND usage(1)"
        );
        assert_eq!(shard_item("f.usage", &m), "NULL AS usage");
    }
}
