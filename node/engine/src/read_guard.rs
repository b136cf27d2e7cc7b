//! What a user's query may do. Pure checks over the engine's own parse of
//! the statement (`EXPLAIN AST`), so quoting tricks that fool a hand-written
//! lexer cannot hide anything.
//!
//! Queries run on connections with `readonly = 1` (no writes, DDL, `SET`,
//! `SETTINGS` or `SYSTEM`; most table functions refused), and, because
//! `readonly` alone still lets `SELECT file('/etc/passwd')` read a file and
//! `INTO OUTFILE` write one (verified on chDB 26.9), also:
//! - the text is one statement: `formatQuerySingleLine` (the engine's parser)
//!   refuses several, and the formatted text is what runs;
//! - the statement is a `SELECT` (union/intersect/except included) with no
//!   `INTO OUTFILE` or `FORMAT` clause: its AST root has exactly one child;
//! - no `SETTINGS` clause, in any (sub)query (a `Set` node): `readonly`
//!   lets one through that repeats the session's own value, which changes
//!   nothing but would make the refusal depend on the readers' settings;
//! - no function that reaches outside the shard's data is called anywhere
//!   ([`DENIED_FUNCTION_PREFIXES`]).

/// Functions a query may not call, by case-insensitive name prefix: table
/// functions that read files, URLs, object stores, other servers or
/// processes, other databases (`merge`, `cluster`), and the scalar `file`.
/// Prefixes also catch their `...Cluster` and engine-specific variants.
pub const DENIED_FUNCTION_PREFIXES: &[&str] = &[
    "file",
    "url",
    "s3",
    "gcs",
    "oss",
    "cosn",
    "hdfs",
    "azure",
    "remote",
    "cluster",
    "executable",
    "input",
    "jdbc",
    "odbc",
    "mysql",
    "postgres",
    "sqlite",
    "mongo",
    "redis",
    "dictionary",
    "deltalake",
    "iceberg",
    "hudi",
    "arrowflight",
    "ytsaurus",
    "merge",
    "loop",
    "paimon",
];

/// Why a query was refused; the text is shown to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// Checks the `EXPLAIN AST` lines of a formatted statement.
pub fn check_ast(lines: &[String]) -> Result<(), Refusal> {
    let root = lines.first().map(|l| l.trim()).unwrap_or("");
    let kind = root.split_whitespace().next().unwrap_or("");
    if kind != "SelectWithUnionQuery" {
        return Err(Refusal(format!(
            "only SELECT (or WITH ... SELECT) statements are allowed, this is a {}",
            if kind.is_empty() {
                "empty statement"
            } else {
                kind
            }
        )));
    }
    if root != "SelectWithUnionQuery (children 1)" {
        return Err(Refusal(
            "INTO OUTFILE, FORMAT and SETTINGS clauses are not allowed: results are returned as Arrow, on the server's settings".into(),
        ));
    }
    if lines.iter().any(|l| l.trim() == "Set") {
        return Err(Refusal(
            "SETTINGS clauses are not allowed: queries run on the server's settings".into(),
        ));
    }
    for line in lines {
        let Some(rest) = line.trim_start().strip_prefix("Function ") else {
            continue;
        };
        let name = rest.split_whitespace().next().unwrap_or("");
        if let Some(p) = denied(name) {
            return Err(Refusal(format!(
                "function `{name}` is not allowed: queries read only the shard's own tables ({p}* functions reach files, URLs, other servers or other databases)"
            )));
        }
    }
    Ok(())
}

fn denied(function: &str) -> Option<&'static str> {
    let lower = function.to_ascii_lowercase();
    DENIED_FUNCTION_PREFIXES
        .iter()
        .copied()
        .find(|p| lower.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn plain_selects_pass() {
        let ast = lines(
            "SelectWithUnionQuery (children 1)\n ExpressionList (children 1)\n  SelectQuery (children 2)\n   ExpressionList (children 1)\n    Function count (children 1)\n",
        );
        assert_eq!(check_ast(&ast), Ok(()));
    }

    #[test]
    fn outside_functions_are_refused_anywhere_in_any_case() {
        for f in [
            "file",
            "FILE",
            "url",
            "s3Cluster",
            "remoteSecure",
            "executable",
            "mysql",
            "merge",
            "fileCluster",
            "icebergS3",
        ] {
            let ast = lines(&format!(
                "SelectWithUnionQuery (children 1)\n  SelectQuery (children 2)\n      Function {f} (alias u) (children 1)\n"
            ));
            let e = check_ast(&ast).unwrap_err();
            assert!(e.0.contains(&format!("`{f}`")), "{f}: {}", e.0);
        }
    }

    #[test]
    fn non_selects_and_output_clauses_are_refused() {
        for root in [
            "ShowTables",
            "InsertQuery (children 2)",
            "SetQuery",
            "SystemQuery",
            "",
        ] {
            let e = check_ast(&lines(root)).unwrap_err();
            assert!(e.0.contains("only SELECT"), "{root}: {}", e.0);
        }
        // INTO OUTFILE 'x' FORMAT CSV adds children to the root.
        let e = check_ast(&lines("SelectWithUnionQuery (children 3)\n ExpressionList (children 1)\n Literal 'x'\n Identifier CSV")).unwrap_err();
        assert!(e.0.contains("INTO OUTFILE"), "{}", e.0);
    }

    #[test]
    fn settings_clauses_are_refused_in_subqueries_too() {
        // EXPLAIN AST of `SELECT x FROM (SELECT 1 AS x SETTINGS max_threads = 1)`.
        let ast = lines(
            "SelectWithUnionQuery (children 1)\n ExpressionList (children 1)\n  SelectQuery (children 2)\n   ExpressionList (children 1)\n    Identifier x\n   TablesInSelectQuery (children 1)\n    TablesInSelectQueryElement (children 1)\n     TableExpression (children 1)\n      Subquery (children 1)\n       SelectWithUnionQuery (children 1)\n        ExpressionList (children 1)\n         SelectQuery (children 2)\n          ExpressionList (children 1)\n           Literal UInt64_1 (alias x)\n          Set\n",
        );
        let e = check_ast(&ast).unwrap_err();
        assert!(e.0.contains("SETTINGS"), "{}", e.0);
        // A column or alias named `Set` is an identifier, not a clause.
        let ast = lines(
            "SelectWithUnionQuery (children 1)\n  SelectQuery (children 1)\n    Identifier Set\n",
        );
        assert_eq!(check_ast(&ast), Ok(()));
    }

    #[test]
    fn harmless_functions_with_similar_names_pass() {
        for f in [
            "numbers",
            "toStartOfMinute",
            "quantileExact",
            "domain",
            "dictGet",
        ] {
            let ast = lines(&format!(
                "SelectWithUnionQuery (children 1)\n    Function {f} (children 1)\n"
            ));
            assert_eq!(check_ast(&ast), Ok(()), "{f}");
        }
    }
}
