//! The functions InfluxQL 1.8 defines, with their arity and argument rules.
//! Checked as each call is parsed, so errors point at the call.

use crate::ast::{Call, Expr, Literal};
use crate::error::ErrorKind;

/// Every function name the parser accepts (lower case).
pub const FUNCTIONS: &[&str] = &[
    // aggregates
    "count",
    "distinct",
    "integral",
    "mean",
    "median",
    "mode",
    "spread",
    "stddev",
    "sum",
    // selectors
    "bottom",
    "first",
    "last",
    "max",
    "min",
    "percentile",
    "sample",
    "top",
    // transformations
    "cumulative_sum",
    "derivative",
    "difference",
    "elapsed",
    "moving_average",
    "non_negative_derivative",
    "non_negative_difference",
    // predictors and technical analysis
    "holt_winters",
    "holt_winters_with_fit",
    "chande_momentum_oscillator",
    "exponential_moving_average",
    "double_exponential_moving_average",
    "triple_exponential_moving_average",
    "triple_exponential_derivative",
    "relative_strength_index",
    "kaufmans_efficiency_ratio",
    "kaufmans_adaptive_moving_average",
    // math
    "abs",
    "acos",
    "asin",
    "atan",
    "atan2",
    "ceil",
    "cos",
    "exp",
    "floor",
    "ln",
    "log",
    "log2",
    "log10",
    "pow",
    "round",
    "sin",
    "sqrt",
    "tan",
    // time
    "now",
];

/// Checks `call` against its function's rules.
pub fn validate(call: &Call) -> Result<(), ErrorKind> {
    let name = call.name.as_str();
    let args = &call.args;
    let arity = |min: usize, max: Option<usize>| check_arity(name, args.len(), min, max);
    let bad = |message: String| ErrorKind::Argument {
        function: name.to_string(),
        message,
    };
    match name {
        // An aggregate's argument that is not a field (`count(2)`,
        // `max(mean(x))`) parses: as in InfluxDB, the statement fails when
        // it runs, with "expected field argument in count()".
        "count" | "distinct" | "mean" | "median" | "mode" | "spread" | "stddev" | "sum"
        | "first" | "last" | "max" | "min" => arity(1, Some(1))?,
        "percentile" => {
            arity(2, Some(2))?;
            if !matches!(
                args[1],
                Expr::Literal(Literal::Integer(_) | Literal::Float(_))
            ) {
                return Err(bad(format!("expected a number as N, got {}", args[1])));
            }
        }
        "sample" => {
            arity(2, Some(2))?;
            positive_int(&args[1], "N", &bad)?;
        }
        "top" | "bottom" => {
            arity(2, None)?;
            top_bottom_args(args, &bad)?;
        }
        "derivative" | "non_negative_derivative" | "elapsed" | "integral" => {
            arity(1, Some(2))?;
            field_or_aggregate(&args[0], &bad)?;
            if let Some(unit) = args.get(1) {
                if !matches!(unit, Expr::Literal(Literal::Duration(d)) if *d > 0) {
                    return Err(bad(format!(
                        "the unit must be a positive duration, got {unit}"
                    )));
                }
            }
        }
        "difference" | "non_negative_difference" | "cumulative_sum" => {
            arity(1, Some(1))?;
            field_or_aggregate(&args[0], &bad)?;
        }
        "moving_average" => {
            arity(2, Some(2))?;
            field_or_aggregate(&args[0], &bad)?;
            positive_int(&args[1], "N", &bad)?;
        }
        "holt_winters" | "holt_winters_with_fit" => {
            arity(3, Some(3))?;
            if !matches!(args[0], Expr::Call(_)) {
                return Err(bad(format!("expected an aggregate, got {}", args[0])));
            }
            positive_int(&args[1], "N", &bad)?;
            int_arg(&args[2], "S", &bad)?;
        }
        "exponential_moving_average"
        | "double_exponential_moving_average"
        | "triple_exponential_moving_average"
        | "triple_exponential_derivative"
        | "relative_strength_index"
        | "chande_momentum_oscillator" => {
            arity(2, Some(4))?;
            field_or_aggregate(&args[0], &bad)?;
            positive_int(&args[1], "the period", &bad)?;
        }
        "kaufmans_efficiency_ratio" | "kaufmans_adaptive_moving_average" => {
            arity(2, Some(3))?;
            field_or_aggregate(&args[0], &bad)?;
            positive_int(&args[1], "the period", &bad)?;
        }
        "abs" | "acos" | "asin" | "atan" | "ceil" | "cos" | "exp" | "floor" | "ln" | "log2"
        | "log10" | "round" | "sin" | "sqrt" | "tan" => arity(1, Some(1))?,
        "atan2" | "log" | "pow" => arity(2, Some(2))?,
        "now" => arity(0, Some(0))?,
        _ => {
            return Err(ErrorKind::UndefinedFunction {
                name: name.to_string(),
            })
        }
    }
    Ok(())
}

/// `Arity` unless `n` arguments is within `min..=max` (`None`: no most).
fn check_arity(name: &str, n: usize, min: usize, max: Option<usize>) -> Result<(), ErrorKind> {
    if n >= min && max.is_none_or(|max| n <= max) {
        return Ok(());
    }
    let expected = match max {
        Some(max) if max == min => min.to_string(),
        Some(max) => format!("at least {min} but no more than {max}"),
        None => format!("at least {min}"),
    };
    Err(ErrorKind::Arity {
        function: name.to_string(),
        expected,
        got: n,
    })
}

/// `top(field, [tag, ...,] N)` and `bottom(...)`: a field, tag keys, then
/// a positive N (at least two arguments, checked before).
fn top_bottom_args(args: &[Expr], bad: &dyn Fn(String) -> ErrorKind) -> Result<(), ErrorKind> {
    if !matches!(args[0], Expr::VarRef(_)) {
        return Err(bad(format!(
            "expected a field as first argument, got {}",
            args[0]
        )));
    }
    for tag in &args[1..args.len() - 1] {
        if !matches!(tag, Expr::VarRef(_)) {
            return Err(bad(format!("expected a tag key, got {tag}")));
        }
    }
    positive_int(&args[args.len() - 1], "the last argument", bad)
}

fn is_field_like(arg: &Expr) -> bool {
    matches!(arg, Expr::VarRef(_) | Expr::Wildcard(_) | Expr::Regex(_))
}

/// Transformations take a field, or an aggregate when grouped by time
/// (`derivative(mean(x), 1s)`).
fn field_or_aggregate(arg: &Expr, bad: &dyn Fn(String) -> ErrorKind) -> Result<(), ErrorKind> {
    if is_field_like(arg) || matches!(arg, Expr::Call(c) if c.name != "now") {
        Ok(())
    } else {
        Err(bad(format!(
            "expected field or aggregate argument, got {arg}"
        )))
    }
}

fn int_arg(arg: &Expr, what: &str, bad: &dyn Fn(String) -> ErrorKind) -> Result<(), ErrorKind> {
    match arg {
        Expr::Literal(Literal::Integer(_)) => Ok(()),
        other => Err(bad(format!("{what} must be an integer, got {other}"))),
    }
}

fn positive_int(
    arg: &Expr,
    what: &str,
    bad: &dyn Fn(String) -> ErrorKind,
) -> Result<(), ErrorKind> {
    match arg {
        Expr::Literal(Literal::Integer(n)) if *n > 0 => Ok(()),
        other => Err(bad(format!(
            "{what} must be a positive integer, got {other}"
        ))),
    }
}
