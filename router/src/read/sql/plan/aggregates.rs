//! The list of ClickHouse's aggregate functions and combinators, and the
//! test of whether a call is an aggregate. It is a table kept apart from
//! the planner so the planner reads as logic; the clause cutter, the
//! expression parser and the partial-state builder all ask it.

/// ClickHouse's aggregate functions (`system.functions WHERE is_aggregate`,
/// chDB 26.9), lower case: a call of one of these, with or without
/// combinators, is an aggregate.
#[rustfmt::skip]
pub(super) const AGGREGATES: &[&str] = &[
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
