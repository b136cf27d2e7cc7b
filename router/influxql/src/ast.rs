//! The typed syntax tree: plain data, no behaviour beyond small
//! constructors. `Display` (in `display.rs`) prints canonical InfluxQL that
//! parses back to an equal tree.

/// An identifier as written, unquoted and unescaped.
pub type Ident = String;

/// One or more statements separated by `;`.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub statements: Vec<Statement>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    Select(Box<SelectStatement>),
    /// `EXPLAIN [ANALYZE] SELECT ...`.
    Explain {
        analyze: bool,
        statement: Box<SelectStatement>,
    },
    ShowDatabases,
    ShowMeasurements(ShowMeasurements),
    ShowTagKeys(ShowTagKeys),
    ShowTagValues(ShowTagValues),
    ShowFieldKeys(ShowFieldKeys),
    ShowSeries(ShowSeries),
    ShowRetentionPolicies {
        database: Option<Ident>,
    },
    ShowCardinality(ShowCardinality),
    CreateDatabase(CreateDatabase),
    DropDatabase {
        name: Ident,
    },
    DropMeasurement {
        name: Ident,
    },
    /// `DROP SERIES [FROM ...] [WHERE ...]` (at least one of the two).
    DropSeries(SeriesFilter),
    /// `DELETE [FROM ...] [WHERE ...]` (at least one of the two).
    Delete(SeriesFilter),
    /// `CREATE CONTINUOUS QUERY name ON db [RESAMPLE [EVERY d] [FOR d]]
    /// BEGIN SELECT ... INTO ... GROUP BY time(..) END`.
    CreateContinuousQuery(CreateContinuousQuery),
    ShowContinuousQueries,
    DropContinuousQuery {
        name: Ident,
        database: Ident,
    },
    CreateRetentionPolicy(CreateRetentionPolicy),
    AlterRetentionPolicy(AlterRetentionPolicy),
    DropRetentionPolicy {
        name: Ident,
        database: Ident,
    },
    /// Users and privileges (`users.rs`).
    User(UserStatement),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SelectStatement {
    pub fields: Vec<Field>,
    pub into: Option<IntoClause>,
    pub from: Vec<Source>,
    pub condition: Option<Expr>,
    /// Empty when there is no `GROUP BY`.
    pub group_by: Vec<Dimension>,
    pub fill: Option<Fill>,
    /// `ORDER BY time [ASC|DESC]`; `None` when absent (ascending).
    pub order_by: Option<SortOrder>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
    pub slimit: Option<u64>,
    pub soffset: Option<u64>,
    /// `tz('Europe/Paris')`: the IANA name as written (not validated here).
    pub timezone: Option<String>,
}

/// A projected expression and its `AS` alias.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub expr: Expr,
    pub alias: Option<Ident>,
}

/// `INTO [db.][rp.](measurement | :MEASUREMENT)`.
#[derive(Debug, Clone, PartialEq)]
pub struct IntoClause {
    pub database: Option<Ident>,
    pub retention_policy: Option<Ident>,
    /// `None` for the `:MEASUREMENT` back-reference.
    pub measurement: Option<Ident>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Measurement(MeasurementName),
    Subquery(Box<SelectStatement>),
}

/// `m`, `rp.m`, `db.rp.m`, `db..m`, or any of those ending in `/regex/`.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasurementName {
    pub database: Option<Ident>,
    pub retention_policy: Option<Ident>,
    pub name: MeasurementMatch,
}

#[derive(Debug, Clone, PartialEq)]
pub enum MeasurementMatch {
    Name(Ident),
    Regex(Regex),
}

/// A regex literal's pattern (as the regex engine sees it: `\/` already
/// turned into `/`). Validated by the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regex(pub String);

#[derive(Debug, Clone, PartialEq)]
pub enum Dimension {
    /// `time(interval[, offset])`, nanoseconds.
    Time {
        interval: i64,
        offset: Option<TimeOffset>,
    },
    Tag(Ident),
    /// `GROUP BY *`.
    Wildcard,
    Regex(Regex),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOffset {
    /// Nanoseconds, may be negative.
    Duration(i64),
    /// `now()`: align buckets to the query's `now`.
    Now,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fill {
    Null,
    None,
    Previous,
    Linear,
    Integer(i64),
    Float(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortOrder {
    Ascending,
    Descending,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    VarRef(VarRef),
    /// `*`, `*::field`, `*::tag`.
    Wildcard(Option<DataType>),
    /// A `/regex/` in a field list or compared with `=~`/`!~`.
    Regex(Regex),
    Literal(Literal),
    /// A function call; `name` is lower case. `now()` is a call too.
    Call(Call),
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}

/// A field or tag reference with an optional `::type` cast.
#[derive(Debug, Clone, PartialEq)]
pub struct VarRef {
    pub name: Ident,
    pub data_type: Option<DataType>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Field,
    Tag,
    Float,
    Integer,
    Unsigned,
    String,
    Boolean,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub name: String,
    pub args: Vec<Expr>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Integer(i64),
    /// Integers above `i64::MAX`.
    Unsigned(u64),
    Float(f64),
    /// A single-quoted string; compared with `time` it is a time literal.
    String(String),
    Boolean(bool),
    /// Nanoseconds. Compared with `time` it counts from the Unix epoch
    /// (Grafana's `time >= 1795385275890ms`).
    Duration(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    EqRegex,
    NotEqRegex,
    And,
    Or,
}

impl BinaryOp {
    /// Binding strength: higher binds tighter (InfluxDB's order).
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::NotEq
            | BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Gt
            | BinaryOp::GtEq
            | BinaryOp::EqRegex
            | BinaryOp::NotEqRegex => 4,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::BitOr | BinaryOp::BitXor => 5,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod | BinaryOp::BitAnd => 6,
        }
    }

    pub fn is_comparison(self) -> bool {
        self.precedence() == 4
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
            BinaryOp::Eq => "=",
            BinaryOp::NotEq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::EqRegex => "=~",
            BinaryOp::NotEqRegex => "!~",
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
        }
    }
}

/// `FROM` and `WHERE` of `DROP SERIES` and `DELETE`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeriesFilter {
    pub from: Vec<MeasurementName>,
    pub condition: Option<Expr>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShowMeasurements {
    pub database: Option<Ident>,
    pub with_measurement: Option<MeasurementMatch>,
    pub condition: Option<Expr>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShowTagKeys {
    pub database: Option<Ident>,
    pub from: Vec<MeasurementName>,
    pub condition: Option<Expr>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ShowTagValues {
    pub database: Option<Ident>,
    pub from: Vec<MeasurementName>,
    pub key: TagKeyMatch,
    pub condition: Option<Expr>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

/// `WITH KEY = k | != k | =~ /re/ | !~ /re/ | IN (a, b)`.
#[derive(Debug, Clone, PartialEq)]
pub enum TagKeyMatch {
    Eq(Ident),
    NotEq(Ident),
    Regex(Regex),
    NotRegex(Regex),
    In(Vec<Ident>),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShowFieldKeys {
    pub database: Option<Ident>,
    pub from: Vec<MeasurementName>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShowSeries {
    pub database: Option<Ident>,
    pub from: Vec<MeasurementName>,
    pub condition: Option<Expr>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

/// `SHOW <what> [EXACT] CARDINALITY [ON db] [FROM ...] [WITH KEY ...]
/// [WHERE ...] [LIMIT n] [OFFSET n]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowCardinality {
    pub of: CardinalityOf,
    pub exact: bool,
    pub database: Option<Ident>,
    pub from: Vec<MeasurementName>,
    pub condition: Option<Expr>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CardinalityOf {
    Series,
    Measurements,
    TagKeys,
    TagValues(TagKeyMatch),
    FieldKeys,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionDuration {
    /// `INF` (InfluxDB also reads a zero duration as infinite; we keep the
    /// two apart so printing is faithful).
    Infinite,
    Nanos(i64),
}

/// `CREATE DATABASE name [WITH [DURATION d] [REPLICATION n]
/// [SHARD DURATION d] [NAME rp]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateDatabase {
    pub name: Ident,
    /// `Some` when `WITH` is present (then at least one option is).
    pub retention_policy: Option<RetentionPolicyOptions>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct RetentionPolicyOptions {
    pub duration: Option<RetentionDuration>,
    pub replication: Option<u64>,
    pub shard_duration: Option<i64>,
    pub name: Option<Ident>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateContinuousQuery {
    pub name: Ident,
    pub database: Ident,
    /// `RESAMPLE EVERY`: how often it runs (default: its `GROUP BY time`).
    pub resample_every: Option<i64>,
    /// `RESAMPLE FOR`: how far back each run recomputes (default: one
    /// `GROUP BY time` interval).
    pub resample_for: Option<i64>,
    pub select: Box<SelectStatement>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateRetentionPolicy {
    pub name: Ident,
    pub database: Ident,
    pub duration: RetentionDuration,
    pub replication: u64,
    pub shard_duration: Option<i64>,
    pub default: bool,
}

/// At least one option is set.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterRetentionPolicy {
    pub name: Ident,
    pub database: Ident,
    pub duration: Option<RetentionDuration>,
    pub replication: Option<u64>,
    pub shard_duration: Option<i64>,
    pub default: bool,
}

// Small constructors, for the planner and for tests that build trees.
impl Expr {
    pub fn var(name: &str) -> Expr {
        Expr::VarRef(VarRef {
            name: name.to_string(),
            data_type: None,
        })
    }

    pub fn typed_var(name: &str, data_type: DataType) -> Expr {
        Expr::VarRef(VarRef {
            name: name.to_string(),
            data_type: Some(data_type),
        })
    }

    pub fn int(value: i64) -> Expr {
        Expr::Literal(Literal::Integer(value))
    }

    pub fn float(value: f64) -> Expr {
        Expr::Literal(Literal::Float(value))
    }

    pub fn string(value: &str) -> Expr {
        Expr::Literal(Literal::String(value.to_string()))
    }

    pub fn duration(nanos: i64) -> Expr {
        Expr::Literal(Literal::Duration(nanos))
    }

    pub fn regex(pattern: &str) -> Expr {
        Expr::Regex(Regex(pattern.to_string()))
    }

    pub fn call(name: &str, args: Vec<Expr>) -> Expr {
        Expr::Call(Call {
            name: name.to_string(),
            args,
        })
    }

    pub fn now() -> Expr {
        Expr::call("now", Vec::new())
    }

    pub fn binary(op: BinaryOp, lhs: Expr, rhs: Expr) -> Expr {
        Expr::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        }
    }

    /// `lhs AND rhs`, or whichever side exists.
    pub fn and(lhs: Option<Expr>, rhs: Option<Expr>) -> Option<Expr> {
        match (lhs, rhs) {
            (Some(l), Some(r)) => Some(Expr::binary(BinaryOp::And, l, r)),
            (l, r) => l.or(r),
        }
    }
}

impl MeasurementName {
    pub fn named(name: &str) -> Self {
        MeasurementName {
            database: None,
            retention_policy: None,
            name: MeasurementMatch::Name(name.to_string()),
        }
    }
}

impl Field {
    pub fn new(expr: Expr) -> Self {
        Field { expr, alias: None }
    }
}

// --- Users and privileges (parsed in users.rs) ---

/// A privilege as InfluxDB names it. `None` is only ever shown (a user
/// whose grant on a database was revoked), never parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    None,
    Read,
    Write,
    All,
}

impl Privilege {
    /// InfluxDB's text in `SHOW GRANTS` and in statements.
    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::None => "NO PRIVILEGES",
            Privilege::Read => "READ",
            Privilege::Write => "WRITE",
            Privilege::All => "ALL PRIVILEGES",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum UserStatement {
    /// `CREATE USER name WITH PASSWORD 'x' [WITH ALL PRIVILEGES]`.
    Create {
        name: Ident,
        password: String,
        admin: bool,
    },
    Drop {
        name: Ident,
    },
    /// `SET PASSWORD FOR name = 'x'`.
    SetPassword {
        name: Ident,
        password: String,
    },
    ShowUsers,
    ShowGrants {
        name: Ident,
    },
    /// `GRANT p ON db TO u`, or `GRANT ALL [PRIVILEGES] TO u` (admin) when
    /// `database` is `None`.
    Grant {
        privilege: Privilege,
        database: Option<Ident>,
        user: Ident,
    },
    /// `REVOKE p ON db FROM u`, or `REVOKE ALL [PRIVILEGES] FROM u`.
    Revoke {
        privilege: Privilege,
        database: Option<Ident>,
        user: Ident,
    },
}

impl UserStatement {
    /// Whether the statement carries a password (kept out of logs).
    pub fn has_password(&self) -> bool {
        matches!(
            self,
            UserStatement::Create { .. } | UserStatement::SetPassword { .. }
        )
    }
}
