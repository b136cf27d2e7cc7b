//! Pure helpers the planner uses on a WHERE clause: split it into its time,
//! tag and field parts, and evaluate the time part into a `[start, end)`
//! range of nanoseconds since the Unix epoch.
//!
//! A time value is `now()`, `now() - 1h`, an RFC3339 string
//! (`'2024-01-01T00:00:00Z'`, also `'2024-01-01 00:00:00'` and
//! `'2024-01-01'`, UTC), an integer (nanoseconds since the epoch) or a
//! duration counted from the epoch (`1795385275890ms`, what Grafana's
//! `$timeFilter` expands to), with `+`/`-` durations between them.

use crate::ast::{BinaryOp, DataType, Expr, Literal};
use crate::error::TimeError;

/// `[start, end)` in nanoseconds; `i64::MIN` / `i64::MAX` mean unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub start: i64,
    pub end: i64,
}

impl TimeRange {
    pub const UNBOUNDED: TimeRange = TimeRange {
        start: i64::MIN,
        end: i64::MAX,
    };

    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }

    pub fn has_start(&self) -> bool {
        self.start != i64::MIN
    }

    pub fn has_end(&self) -> bool {
        self.end != i64::MAX
    }

    pub fn intersect(self, other: TimeRange) -> TimeRange {
        TimeRange {
            start: self.start.max(other.start),
            end: self.end.min(other.end),
        }
    }

    pub fn contains(&self, t: i64) -> bool {
        self.start <= t && t < self.end
    }
}

/// A WHERE clause cut along its top-level `AND`s. Each part is the `AND`
/// of its conjuncts in their original order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SplitCondition {
    /// Comparisons of `time` with a time value.
    pub time: Option<Expr>,
    /// Conjuncts that reference only tags (series selection; can prune
    /// series before reading points).
    pub tags: Option<Expr>,
    /// Everything else: conjuncts that need a field value, mix fields and
    /// tags under `OR`, or reference nothing; evaluated per point.
    pub fields: Option<Expr>,
}

/// Splits `condition`; `is_tag(name)` says whether an uncast identifier is
/// a tag key (`::tag` / `::field` casts decide on their own). Errors when
/// `time` appears anywhere but in a top-level conjunct comparing it with a
/// value, e.g. under `OR`, because no single time range would then be right.
pub fn split_condition(
    condition: &Expr,
    is_tag: impl Fn(&str) -> bool,
) -> Result<SplitCondition, TimeError> {
    let mut split = SplitCondition::default();
    for conjunct in conjuncts(condition) {
        let mut refs = Vec::new();
        collect_refs(conjunct, &mut refs);
        let part = if refs.iter().any(|(name, _)| is_time(name)) {
            time_comparison(conjunct)?;
            &mut split.time
        } else if !refs.is_empty()
            && !contains_call(conjunct)
            && refs.iter().all(|(name, ty)| match ty {
                Some(DataType::Tag) => true,
                Some(_) => false,
                None => is_tag(name),
            })
        {
            &mut split.tags
        } else {
            &mut split.fields
        };
        *part = Expr::and(part.take(), Some(conjunct.clone()));
    }
    Ok(split)
}

/// The time range `condition` selects, given the query's `now`. Conjuncts
/// that do not mention `time` are ignored; `time` compared under `OR` or
/// with `!=` is an error.
pub fn time_range(condition: &Expr, now: i64) -> Result<TimeRange, TimeError> {
    let mut range = TimeRange::UNBOUNDED;
    for conjunct in conjuncts(condition) {
        let mut refs = Vec::new();
        collect_refs(conjunct, &mut refs);
        if !refs.iter().any(|(name, _)| is_time(name)) {
            continue;
        }
        let (op, value) = time_comparison(conjunct)?;
        let t = eval_time(value, now)?;
        let bound = match op {
            BinaryOp::Eq => TimeRange {
                start: t,
                end: t.saturating_add(1),
            },
            BinaryOp::Gt => TimeRange {
                start: t.saturating_add(1),
                end: i64::MAX,
            },
            BinaryOp::GtEq => TimeRange {
                start: t,
                end: i64::MAX,
            },
            BinaryOp::Lt => TimeRange {
                start: i64::MIN,
                end: t,
            },
            BinaryOp::LtEq => TimeRange {
                start: i64::MIN,
                end: t.saturating_add(1),
            },
            other => {
                let message = format!("time cannot be compared with {}", other.symbol());
                return Err(TimeError::InvalidComparison(message));
            }
        };
        range = range.intersect(bound);
    }
    Ok(range)
}

/// Evaluates a time value (see the module doc) to nanoseconds.
pub fn eval_time(value: &Expr, now: i64) -> Result<i64, TimeError> {
    match value {
        Expr::Call(c) if c.name == "now" && c.args.is_empty() => Ok(now),
        Expr::Literal(Literal::Integer(n)) | Expr::Literal(Literal::Duration(n)) => Ok(*n),
        Expr::Literal(Literal::Unsigned(n)) => i64::try_from(*n).map_err(|_| TimeError::Overflow),
        Expr::Literal(Literal::Float(f)) if f.is_finite() && f.abs() < 9.2e18 => Ok(*f as i64),
        Expr::Literal(Literal::String(s)) => parse_time_literal(s),
        Expr::Binary { op, lhs, rhs } if matches!(op, BinaryOp::Add | BinaryOp::Sub) => {
            let l = eval_time(lhs, now)?;
            let r = eval_time(rhs, now)?;
            let sum = if *op == BinaryOp::Add {
                l.checked_add(r)
            } else {
                l.checked_sub(r)
            };
            sum.ok_or(TimeError::Overflow)
        }
        other => Err(TimeError::InvalidComparison(format!(
            "{other} is not a time value"
        ))),
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.f](Z|±HH:MM)`, `YYYY-MM-DD HH:MM:SS[.f]`
/// (UTC) or `YYYY-MM-DD` (UTC midnight) into nanoseconds since the epoch.
pub fn parse_time_literal(text: &str) -> Result<i64, TimeError> {
    let invalid = || TimeError::InvalidTimeLiteral(text.to_string());
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, TimeError> {
        let digits = b.get(from..from + len).ok_or_else(invalid)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(invalid());
        }
        Ok(digits
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, c: u8| {
        if b.get(at) == Some(&c) {
            Ok(())
        } else {
            Err(invalid())
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    expect(4, b'-')?;
    expect(7, b'-')?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(invalid());
    }
    let mut nanos_of_day = 0i64;
    let mut offset_secs = 0i64;
    if b.len() > 10 {
        if !matches!(b[10], b'T' | b't' | b' ') {
            return Err(invalid());
        }
        let (h, m, s) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
        expect(13, b':')?;
        expect(16, b':')?;
        if h > 23 || m > 59 || s > 59 {
            return Err(invalid());
        }
        nanos_of_day = ((h * 60 + m) * 60 + s) * 1_000_000_000;
        let mut i = 19;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let first = i;
            let mut frac = 0i64;
            while i < b.len() && b[i].is_ascii_digit() {
                if i - first < 9 {
                    frac = frac * 10 + i64::from(b[i] - b'0');
                }
                i += 1;
            }
            let digits = i - first;
            if digits == 0 {
                return Err(invalid());
            }
            frac *= 10i64.pow(9u32.saturating_sub(digits as u32));
            nanos_of_day += frac;
        }
        match b.get(i) {
            None if b[10] == b' ' => {}
            Some(b'Z' | b'z') if i + 1 == b.len() => {}
            Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() => {
                let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
                expect(i + 3, b':')?;
                if oh > 23 || om > 59 {
                    return Err(invalid());
                }
                let secs = (oh * 60 + om) * 60;
                offset_secs = if sign == b'+' { secs } else { -secs };
            }
            _ => return Err(invalid()),
        }
    }
    let secs = days_from_civil(year, month, day) * 86_400 - offset_secs;
    secs.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(nanos_of_day))
        .ok_or(TimeError::Overflow)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_time(name: &str) -> bool {
    name.eq_ignore_ascii_case("time")
}

/// The top-level `AND` operands of `expr`, left to right.
pub fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::Binary {
            op: BinaryOp::And,
            lhs,
            rhs,
        } => {
            let mut out = conjuncts(lhs);
            out.extend(conjuncts(rhs));
            out
        }
        other => vec![other],
    }
}

fn collect_refs<'a>(expr: &'a Expr, out: &mut Vec<(&'a str, Option<DataType>)>) {
    match expr {
        Expr::VarRef(v) => out.push((&v.name, v.data_type)),
        Expr::Call(c) => c.args.iter().for_each(|a| collect_refs(a, out)),
        Expr::Binary { lhs, rhs, .. } => {
            collect_refs(lhs, out);
            collect_refs(rhs, out);
        }
        Expr::Wildcard(_) | Expr::Regex(_) | Expr::Literal(_) => {}
    }
}

fn contains_call(expr: &Expr) -> bool {
    match expr {
        Expr::Call(_) => true,
        Expr::Binary { lhs, rhs, .. } => contains_call(lhs) || contains_call(rhs),
        _ => false,
    }
}

/// `time <op> value` or `value <op> time` (flipped), with a time-free value.
fn time_comparison(conjunct: &Expr) -> Result<(BinaryOp, &Expr), TimeError> {
    let misplaced = || {
        TimeError::InvalidCondition(format!(
            "time must be compared with a value in a condition joined to the rest with AND: {conjunct}"
        ))
    };
    let Expr::Binary { op, lhs, rhs } = conjunct else {
        return Err(misplaced());
    };
    if !op.is_comparison() {
        return Err(misplaced());
    }
    let is_time_ref = |e: &Expr| matches!(e, Expr::VarRef(v) if is_time(&v.name));
    let (op, value) = if is_time_ref(lhs) {
        (*op, rhs.as_ref())
    } else if is_time_ref(rhs) {
        let flipped = match op {
            BinaryOp::Lt => BinaryOp::Gt,
            BinaryOp::LtEq => BinaryOp::GtEq,
            BinaryOp::Gt => BinaryOp::Lt,
            BinaryOp::GtEq => BinaryOp::LtEq,
            other => *other,
        };
        (flipped, lhs.as_ref())
    } else {
        return Err(misplaced());
    };
    let mut refs = Vec::new();
    collect_refs(value, &mut refs);
    if !refs.is_empty() {
        return Err(misplaced());
    }
    Ok((op, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_statement, Statement};

    const S: i64 = 1_000_000_000;
    const NOW: i64 = 1_700_000_000 * S;

    fn cond(text: &str) -> Expr {
        match parse_statement(&format!("SELECT a FROM m WHERE {text}")).unwrap() {
            Statement::Select(s) => s.condition.unwrap(),
            other => panic!("{other}"),
        }
    }

    fn range(text: &str) -> Result<TimeRange, TimeError> {
        time_range(&cond(text), NOW)
    }

    #[test]
    fn time_literals() {
        assert_eq!(parse_time_literal("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_time_literal("2024-01-01T00:00:00Z"),
            Ok(1_704_067_200 * S)
        );
        assert_eq!(
            parse_time_literal("2024-01-01 00:00:00"),
            Ok(1_704_067_200 * S)
        );
        assert_eq!(parse_time_literal("2024-01-01"), Ok(1_704_067_200 * S));
        assert_eq!(
            parse_time_literal("2024-01-01T00:00:00.5Z"),
            Ok(1_704_067_200 * S + S / 2)
        );
        assert_eq!(
            parse_time_literal("2024-01-01T00:00:00.123456789123Z"),
            Ok(1_704_067_200 * S + 123_456_789)
        );
        assert_eq!(
            parse_time_literal("2024-01-01T01:00:00+01:00"),
            Ok(1_704_067_200 * S)
        );
        assert_eq!(
            parse_time_literal("2023-12-31T19:00:00-05:00"),
            Ok(1_704_067_200 * S)
        );
        assert_eq!(parse_time_literal("1969-12-31T23:59:59Z"), Ok(-S));
        assert_eq!(parse_time_literal("2024-02-29"), Ok(1_709_164_800 * S));
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-1-01",
            "yesterday",
            "",
        ] {
            assert!(
                matches!(
                    parse_time_literal(bad),
                    Err(TimeError::InvalidTimeLiteral(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(parse_time_literal("2300-01-01"), Err(TimeError::Overflow));
    }

    #[test]
    fn grafana_time_filter_is_a_closed_interval() {
        let r = range("time >= 1795385275890ms and time <= 1795388870598ms").unwrap();
        assert_eq!(r.start, 1_795_385_275_890_000_000);
        assert_eq!(r.end, 1_795_388_870_598_000_001);
        assert!(r.contains(1_795_388_870_598_000_000));
    }

    #[test]
    fn bounds_from_now_strings_and_flipped_comparisons() {
        let r = range("time > now() - 1h").unwrap();
        assert_eq!((r.start, r.end), (NOW - 3_600 * S + 1, i64::MAX));
        assert!(!r.has_end());
        let r = range("now() - 1h <= time AND time < now()").unwrap();
        assert_eq!((r.start, r.end), (NOW - 3_600 * S, NOW));
        let r = range("time >= '2024-01-01T00:00:00Z' AND time < '2024-01-01' + 1d").unwrap();
        assert_eq!((r.start, r.end), (1_704_067_200 * S, 1_704_153_600 * S));
        let r = range("time = 5").unwrap();
        assert_eq!((r.start, r.end), (5, 6));
        let r = range("host = 'a' AND value > 1").unwrap();
        assert_eq!(r, TimeRange::UNBOUNDED);
        let r = range("time > 10 AND time < 5").unwrap();
        assert!(r.is_empty());
    }

    #[test]
    fn time_outside_top_level_and_is_refused() {
        assert!(matches!(
            range("time > now() - 1h OR host = 'a'"),
            Err(TimeError::InvalidCondition(_))
        ));
        assert!(matches!(
            range("(time > 1 AND host = 'a') OR time < 0"),
            Err(TimeError::InvalidCondition(_))
        ));
        assert!(matches!(
            range("time != 5"),
            Err(TimeError::InvalidComparison(_))
        ));
        assert!(matches!(
            range("time > host"),
            Err(TimeError::InvalidCondition(_))
        ));
        assert!(matches!(
            range("time > 'soon'"),
            Err(TimeError::InvalidTimeLiteral(_))
        ));
        assert!(matches!(
            range("time > true"),
            Err(TimeError::InvalidComparison(_))
        ));
    }

    #[test]
    fn split_by_time_tags_and_fields() {
        let is_tag = |name: &str| matches!(name, "host" | "region");
        let split = split_condition(
            &cond("host = 'a' AND value > 1 AND time > now() - 1h AND region =~ /^eu/ AND time < now()"),
            is_tag,
        )
        .unwrap();
        let text = |e: &Option<Expr>| e.as_ref().map(|e| e.to_string());
        assert_eq!(
            text(&split.time).as_deref(),
            Some("time > now() - 1h AND time < now()")
        );
        assert_eq!(
            text(&split.tags).as_deref(),
            Some("host = 'a' AND region =~ /^eu/")
        );
        assert_eq!(text(&split.fields).as_deref(), Some("value > 1"));

        // A tag and a field under OR need each point: the field part.
        let split = split_condition(
            &cond("(host = 'a' OR value > 1) AND (host = 'b' OR region = 'c')"),
            is_tag,
        )
        .unwrap();
        assert_eq!(
            text(&split.fields).as_deref(),
            Some("host = 'a' OR value > 1")
        );
        assert_eq!(
            text(&split.tags).as_deref(),
            Some("host = 'b' OR region = 'c'")
        );
        assert_eq!(split.time, None);

        // Casts decide over the schema.
        let split = split_condition(&cond("host::field = 'x' AND dc::tag = 'y'"), is_tag).unwrap();
        assert_eq!(text(&split.fields).as_deref(), Some("host::field = 'x'"));
        assert_eq!(text(&split.tags).as_deref(), Some("dc::tag = 'y'"));

        assert!(split_condition(&cond("time > 0 OR host = 'a'"), is_tag).is_err());
    }
}
