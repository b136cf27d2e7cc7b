//! Canonical InfluxQL for every AST node: keywords upper case, identifiers
//! quoted only when they must be, parentheses only where precedence needs
//! them. `parse(tree.to_string())` gives back `tree`.

use std::fmt::{self, Display, Formatter, Write};

use crate::ast::*;
use crate::lexer::{keyword, DURATION_UNITS};

/// An identifier as InfluxQL text: bare when it is a plain word that is not
/// a keyword, else double-quoted with `\"`, `\\` and `\n` escaped.
pub fn quote_ident(ident: &str) -> String {
    let plain = ident
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && keyword(ident).is_none();
    if plain {
        ident.to_string()
    } else {
        quote(ident, '"')
    }
}

/// A single-quoted string literal.
pub fn quote_string(value: &str) -> String {
    quote(value, '\'')
}

fn quote(value: &str, q: char) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push(q);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// A duration in the largest unit that divides it: `90s` is `90s`, `3600s`
/// is `1h`, zero is `0s`.
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    // Largest unit first; `u` rather than `µ` so output stays ASCII.
    let mut units: Vec<(&str, i64)> = DURATION_UNITS
        .iter()
        .copied()
        .filter(|(u, _)| *u != "µ")
        .collect();
    units.sort_by_key(|&(_, ns)| std::cmp::Reverse(ns));
    let (unit, ns) = units
        .into_iter()
        .find(|&(_, ns)| nanos % ns == 0)
        .unwrap_or(("ns", 1));
    format!("{}{unit}", nanos / ns)
}

fn list<T: Display>(f: &mut Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

fn opt_clause<T: Display>(f: &mut Formatter<'_>, word: &str, value: &Option<T>) -> fmt::Result {
    match value {
        Some(v) => write!(f, " {word} {v}"),
        None => Ok(()),
    }
}

fn on_clause(f: &mut Formatter<'_>, database: &Option<Ident>) -> fmt::Result {
    opt_clause(f, "ON", &database.as_deref().map(quote_ident))
}

fn from_clause(f: &mut Formatter<'_>, from: &[MeasurementName]) -> fmt::Result {
    if from.is_empty() {
        return Ok(());
    }
    f.write_str(" FROM ")?;
    list(f, from)
}

impl Display for Query {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, statement) in self.statements.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{statement}")?;
        }
        Ok(())
    }
}

impl Display for Statement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Select(s) => write!(f, "{s}"),
            Statement::Explain { analyze, statement } => {
                let analyze = if *analyze { "ANALYZE " } else { "" };
                write!(f, "EXPLAIN {analyze}{statement}")
            }
            Statement::ShowDatabases => f.write_str("SHOW DATABASES"),
            Statement::ShowMeasurements(s) => write!(f, "{s}"),
            Statement::ShowTagKeys(s) => write!(f, "{s}"),
            Statement::ShowTagValues(s) => write!(f, "{s}"),
            Statement::ShowFieldKeys(s) => write!(f, "{s}"),
            Statement::ShowSeries(s) => write!(f, "{s}"),
            Statement::ShowRetentionPolicies { database } => {
                f.write_str("SHOW RETENTION POLICIES")?;
                on_clause(f, database)
            }
            Statement::ShowCardinality(s) => write!(f, "{s}"),
            Statement::CreateDatabase(s) => write!(f, "{s}"),
            Statement::DropDatabase { name } => write!(f, "DROP DATABASE {}", quote_ident(name)),
            Statement::DropMeasurement { name } => {
                write!(f, "DROP MEASUREMENT {}", quote_ident(name))
            }
            Statement::DropSeries(s) => {
                f.write_str("DROP SERIES")?;
                from_clause(f, &s.from)?;
                opt_clause(f, "WHERE", &s.condition)
            }
            Statement::Delete(s) => {
                f.write_str("DELETE")?;
                from_clause(f, &s.from)?;
                opt_clause(f, "WHERE", &s.condition)
            }
            Statement::CreateRetentionPolicy(s) => write!(f, "{s}"),
            Statement::AlterRetentionPolicy(s) => write!(f, "{s}"),
            Statement::CreateContinuousQuery(c) => write!(f, "{c}"),
            Statement::ShowContinuousQueries => f.write_str("SHOW CONTINUOUS QUERIES"),
            Statement::DropContinuousQuery { name, database } => write!(
                f,
                "DROP CONTINUOUS QUERY {} ON {}",
                quote_ident(name),
                quote_ident(database)
            ),
            Statement::DropRetentionPolicy { name, database } => write!(
                f,
                "DROP RETENTION POLICY {} ON {}",
                quote_ident(name),
                quote_ident(database)
            ),
            Statement::User(u) => write!(f, "{u}"),
        }
    }
}

impl Display for ShowMeasurements {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SHOW MEASUREMENTS")?;
        on_clause(f, &self.database)?;
        match &self.with_measurement {
            Some(MeasurementMatch::Name(n)) => write!(f, " WITH MEASUREMENT = {}", quote_ident(n))?,
            Some(MeasurementMatch::Regex(r)) => write!(f, " WITH MEASUREMENT =~ {r}")?,
            None => {}
        }
        opt_clause(f, "WHERE", &self.condition)?;
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)
    }
}

impl Display for ShowTagKeys {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SHOW TAG KEYS")?;
        on_clause(f, &self.database)?;
        from_clause(f, &self.from)?;
        opt_clause(f, "WHERE", &self.condition)?;
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)
    }
}

impl Display for ShowTagValues {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SHOW TAG VALUES")?;
        on_clause(f, &self.database)?;
        from_clause(f, &self.from)?;
        write!(f, " WITH KEY {}", self.key)?;
        opt_clause(f, "WHERE", &self.condition)?;
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)
    }
}

impl Display for ShowFieldKeys {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SHOW FIELD KEYS")?;
        on_clause(f, &self.database)?;
        from_clause(f, &self.from)?;
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)
    }
}

impl Display for ShowSeries {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SHOW SERIES")?;
        on_clause(f, &self.database)?;
        from_clause(f, &self.from)?;
        opt_clause(f, "WHERE", &self.condition)?;
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)
    }
}

impl Display for CreateDatabase {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "CREATE DATABASE {}", quote_ident(&self.name))?;
        if let Some(rp) = &self.retention_policy {
            f.write_str(" WITH")?;
            opt_clause(f, "DURATION", &rp.duration)?;
            opt_clause(f, "REPLICATION", &rp.replication)?;
            opt_clause(f, "SHARD DURATION", &rp.shard_duration.map(format_duration))?;
            opt_clause(f, "NAME", &rp.name.as_deref().map(quote_ident))?;
        }
        Ok(())
    }
}

impl Display for CreateRetentionPolicy {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CREATE RETENTION POLICY {} ON {} DURATION {} REPLICATION {}",
            quote_ident(&self.name),
            quote_ident(&self.database),
            self.duration,
            self.replication
        )?;
        opt_clause(
            f,
            "SHARD DURATION",
            &self.shard_duration.map(format_duration),
        )?;
        if self.default {
            f.write_str(" DEFAULT")?;
        }
        Ok(())
    }
}

impl Display for AlterRetentionPolicy {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ALTER RETENTION POLICY {} ON {}",
            quote_ident(&self.name),
            quote_ident(&self.database)
        )?;
        opt_clause(f, "DURATION", &self.duration)?;
        opt_clause(f, "REPLICATION", &self.replication)?;
        opt_clause(
            f,
            "SHARD DURATION",
            &self.shard_duration.map(format_duration),
        )?;
        if self.default {
            f.write_str(" DEFAULT")?;
        }
        Ok(())
    }
}

impl Display for CreateContinuousQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CREATE CONTINUOUS QUERY {} ON {} ",
            quote_ident(&self.name),
            quote_ident(&self.database)
        )?;
        if self.resample_every.is_some() || self.resample_for.is_some() {
            f.write_str("RESAMPLE ")?;
            if let Some(d) = self.resample_every {
                write!(f, "EVERY {} ", format_duration(d))?;
            }
            if let Some(d) = self.resample_for {
                write!(f, "FOR {} ", format_duration(d))?;
            }
        }
        write!(f, "BEGIN {} END", self.select)
    }
}

impl Display for ShowCardinality {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let what = match self.of {
            CardinalityOf::Series => "SERIES",
            CardinalityOf::Measurements => "MEASUREMENT",
            CardinalityOf::TagKeys => "TAG KEY",
            CardinalityOf::TagValues(_) => "TAG VALUES",
            CardinalityOf::FieldKeys => "FIELD KEY",
        };
        let exact = if self.exact { " EXACT" } else { "" };
        write!(f, "SHOW {what}{exact} CARDINALITY")?;
        on_clause(f, &self.database)?;
        from_clause(f, &self.from)?;
        if let CardinalityOf::TagValues(key) = &self.of {
            write!(f, " WITH KEY {key}")?;
        }
        opt_clause(f, "WHERE", &self.condition)?;
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)
    }
}

impl Display for SelectStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SELECT ")?;
        list(f, &self.fields)?;
        opt_clause(f, "INTO", &self.into)?;
        f.write_str(" FROM ")?;
        list(f, &self.from)?;
        opt_clause(f, "WHERE", &self.condition)?;
        if !self.group_by.is_empty() {
            f.write_str(" GROUP BY ")?;
            list(f, &self.group_by)?;
        }
        if let Some(fill) = &self.fill {
            write!(f, " {fill}")?;
        }
        match self.order_by {
            Some(SortOrder::Ascending) => f.write_str(" ORDER BY time ASC")?,
            Some(SortOrder::Descending) => f.write_str(" ORDER BY time DESC")?,
            None => {}
        }
        opt_clause(f, "LIMIT", &self.limit)?;
        opt_clause(f, "OFFSET", &self.offset)?;
        opt_clause(f, "SLIMIT", &self.slimit)?;
        opt_clause(f, "SOFFSET", &self.soffset)?;
        if let Some(tz) = &self.timezone {
            write!(f, " tz({})", quote_string(tz))?;
        }
        Ok(())
    }
}

impl Display for Field {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.expr)?;
        opt_clause(f, "AS", &self.alias.as_deref().map(quote_ident))
    }
}

impl Display for IntoClause {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let measurement = match &self.measurement {
            Some(m) => quote_ident(m),
            None => ":MEASUREMENT".to_string(),
        };
        match (&self.database, &self.retention_policy) {
            (Some(db), Some(rp)) => write!(f, "{}.{}.", quote_ident(db), quote_ident(rp))?,
            (Some(db), None) => write!(f, "{}..", quote_ident(db))?,
            (None, Some(rp)) => write!(f, "{}.", quote_ident(rp))?,
            (None, None) => {}
        }
        f.write_str(&measurement)
    }
}

impl Display for Source {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Source::Measurement(m) => write!(f, "{m}"),
            Source::Subquery(s) => write!(f, "({s})"),
        }
    }
}

impl Display for MeasurementName {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match (&self.database, &self.retention_policy) {
            (Some(db), Some(rp)) => write!(f, "{}.{}.", quote_ident(db), quote_ident(rp))?,
            (Some(db), None) => write!(f, "{}..", quote_ident(db))?,
            (None, Some(rp)) => write!(f, "{}.", quote_ident(rp))?,
            (None, None) => {}
        }
        write!(f, "{}", self.name)
    }
}

impl Display for MeasurementMatch {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            MeasurementMatch::Name(n) => f.write_str(&quote_ident(n)),
            MeasurementMatch::Regex(r) => write!(f, "{r}"),
        }
    }
}

impl Display for Regex {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('/')?;
        for c in self.0.chars() {
            if c == '/' {
                f.write_char('\\')?;
            }
            f.write_char(c)?;
        }
        f.write_char('/')
    }
}

impl Display for Dimension {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Dimension::Time { interval, offset } => {
                write!(f, "time({}", format_duration(*interval))?;
                match offset {
                    Some(TimeOffset::Duration(d)) => write!(f, ", {}", format_duration(*d))?,
                    Some(TimeOffset::Now) => f.write_str(", now()")?,
                    None => {}
                }
                f.write_char(')')
            }
            Dimension::Tag(t) => f.write_str(&quote_ident(t)),
            Dimension::Wildcard => f.write_char('*'),
            Dimension::Regex(r) => write!(f, "{r}"),
        }
    }
}

impl Display for Fill {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Fill::Null => f.write_str("fill(null)"),
            Fill::None => f.write_str("fill(none)"),
            Fill::Previous => f.write_str("fill(previous)"),
            Fill::Linear => f.write_str("fill(linear)"),
            Fill::Integer(v) => write!(f, "fill({v})"),
            Fill::Float(v) => write!(f, "fill({})", FloatText(*v)),
        }
    }
}

impl Display for RetentionDuration {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            RetentionDuration::Infinite => f.write_str("INF"),
            RetentionDuration::Nanos(n) => f.write_str(&format_duration(*n)),
        }
    }
}

impl Display for TagKeyMatch {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            TagKeyMatch::Eq(k) => write!(f, "= {}", quote_ident(k)),
            TagKeyMatch::NotEq(k) => write!(f, "!= {}", quote_ident(k)),
            TagKeyMatch::Regex(r) => write!(f, "=~ {r}"),
            TagKeyMatch::NotRegex(r) => write!(f, "!~ {r}"),
            TagKeyMatch::In(keys) => {
                let keys: Vec<String> = keys.iter().map(|k| quote_ident(k)).collect();
                write!(f, "IN ({})", keys.join(", "))
            }
        }
    }
}

/// A float that reads back as a float: Rust's shortest round-trip digits
/// (never an exponent, which InfluxQL lacks) with `.0` added to integral
/// values.
struct FloatText(f64);

impl Display for FloatText {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        if text.contains(['.', 'N', 'i']) {
            f.write_str(&text)
        } else {
            write!(f, "{text}.0")
        }
    }
}

impl Display for Literal {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Integer(v) => write!(f, "{v}"),
            Literal::Unsigned(v) => write!(f, "{v}"),
            Literal::Float(v) => write!(f, "{}", FloatText(*v)),
            Literal::String(s) => f.write_str(&quote_string(s)),
            Literal::Boolean(b) => f.write_str(if *b { "true" } else { "false" }),
            Literal::Duration(d) => f.write_str(&format_duration(*d)),
        }
    }
}

impl Display for DataType {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataType::Field => "field",
            DataType::Tag => "tag",
            DataType::Float => "float",
            DataType::Integer => "integer",
            DataType::Unsigned => "unsigned",
            DataType::String => "string",
            DataType::Boolean => "boolean",
        })
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Expr::VarRef(v) => {
                f.write_str(&quote_ident(&v.name))?;
                match v.data_type {
                    Some(t) => write!(f, "::{t}"),
                    None => Ok(()),
                }
            }
            Expr::Wildcard(None) => f.write_char('*'),
            Expr::Wildcard(Some(t)) => write!(f, "*::{t}"),
            Expr::Regex(r) => write!(f, "{r}"),
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Call(c) => {
                write!(f, "{}(", c.name)?;
                list(f, &c.args)?;
                f.write_char(')')
            }
            Expr::Binary { op, lhs, rhs } => {
                operand(f, lhs, *op, false)?;
                write!(f, " {} ", op.symbol())?;
                operand(f, rhs, *op, true)
            }
        }
    }
}

/// Writes one side of a binary expression, parenthesised when the tree's
/// shape differs from what precedence and left-associativity would give.
fn operand(f: &mut Formatter<'_>, side: &Expr, parent: BinaryOp, right: bool) -> fmt::Result {
    let needs_parens = match side {
        Expr::Binary { op, .. } => {
            op.precedence() < parent.precedence()
                || (right && op.precedence() == parent.precedence())
        }
        _ => false,
    };
    if needs_parens {
        write!(f, "({side})")
    } else {
        write!(f, "{side}")
    }
}

impl Display for Privilege {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Display for UserStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let on = |db: &Option<Ident>| match db {
            Some(db) => format!(" ON {}", quote_ident(db)),
            None => String::new(),
        };
        match self {
            UserStatement::Create {
                name,
                password,
                admin,
            } => {
                write!(
                    f,
                    "CREATE USER {} WITH PASSWORD {}",
                    quote_ident(name),
                    quote_string(password)
                )?;
                if *admin {
                    f.write_str(" WITH ALL PRIVILEGES")?;
                }
                Ok(())
            }
            UserStatement::Drop { name } => write!(f, "DROP USER {}", quote_ident(name)),
            UserStatement::SetPassword { name, password } => write!(
                f,
                "SET PASSWORD FOR {} = {}",
                quote_ident(name),
                quote_string(password)
            ),
            UserStatement::ShowUsers => f.write_str("SHOW USERS"),
            UserStatement::ShowGrants { name } => {
                write!(f, "SHOW GRANTS FOR {}", quote_ident(name))
            }
            UserStatement::Grant {
                privilege,
                database,
                user,
            } => write!(
                f,
                "GRANT {privilege}{} TO {}",
                on(database),
                quote_ident(user)
            ),
            UserStatement::Revoke {
                privilege,
                database,
                user,
            } => write!(
                f,
                "REVOKE {privilege}{} FROM {}",
                on(database),
                quote_ident(user)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_their_largest_unit() {
        assert_eq!(format_duration(0), "0s");
        assert_eq!(format_duration(3_600_000_000_000), "1h");
        assert_eq!(format_duration(90_000_000_000), "90s");
        assert_eq!(format_duration(1_500), "1500ns");
        assert_eq!(format_duration(2_000), "2u");
        assert_eq!(format_duration(-604_800_000_000_000), "-1w");
        assert_eq!(
            format_duration(1_795_385_275_890_000_000),
            "1795385275890ms"
        );
    }

    #[test]
    fn identifiers_are_quoted_only_when_needed() {
        assert_eq!(quote_ident("cpu"), "cpu");
        assert_eq!(quote_ident("_x1"), "_x1");
        assert_eq!(quote_ident("select"), "\"select\"");
        assert_eq!(quote_ident("1h"), "\"1h\"");
        assert_eq!(quote_ident("a \"b\""), "\"a \\\"b\\\"\"");
        assert_eq!(quote_ident(""), "\"\"");
        assert_eq!(quote_string("it's a\\b"), "'it\\'s a\\\\b'");
    }

    #[test]
    fn floats_stay_floats() {
        assert_eq!(Literal::Float(1.0).to_string(), "1.0");
        assert_eq!(Literal::Float(0.25).to_string(), "0.25");
        assert_eq!(Literal::Float(-3.5).to_string(), "-3.5");
    }
}
