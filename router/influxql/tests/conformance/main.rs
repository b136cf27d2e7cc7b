//! InfluxQL conformance: tables of valid statements with their canonical
//! text, invalid ones with the error and its position, hand-built trees for
//! the forms Grafana sends, bind parameters, and random inputs that must
//! never panic.

mod ast_cases;
mod error_cases;
mod meta_cases;
mod random;
mod select_cases;

use shardhouse_influxql::{parse, Query};

/// `(input, canonical Display of the parsed query)`.
pub type Valid = (&'static str, &'static str);

/// `(input, fragment of the error message, line, column)`.
pub type Invalid = (&'static str, &'static str, usize, usize);

pub fn all_valid() -> Vec<Valid> {
    let mut all = select_cases::VALID.to_vec();
    all.extend_from_slice(meta_cases::VALID);
    all
}

pub fn all_invalid() -> Vec<Invalid> {
    let mut all = error_cases::INVALID.to_vec();
    all.extend_from_slice(meta_cases::INVALID);
    all
}

/// Parses `text`, prints it, and parses the print again: the two trees
/// must be equal and the print must be a fixed point.
pub fn round_trip(text: &str) -> Result<(Query, String), String> {
    let query = parse(text).map_err(|e| format!("{text:?}: {e}"))?;
    let printed = query.to_string();
    let again = parse(&printed).map_err(|e| format!("reparse of {printed:?}: {e}"))?;
    if again != query {
        return Err(format!(
            "round trip changed the tree:\n  input   {text:?}\n  printed {printed:?}\n  {query:?}\n  {again:?}"
        ));
    }
    if again.to_string() != printed {
        return Err(format!("printing is not a fixed point for {printed:?}"));
    }
    Ok((query, printed))
}

#[test]
fn the_table_is_large_enough() {
    let total = all_valid().len() + all_invalid().len();
    assert!(total >= 150, "conformance table has {total} cases");
}

#[test]
fn valid_statements_parse_to_their_canonical_form_and_round_trip() {
    let mut failures = Vec::new();
    for (input, canonical) in all_valid() {
        match round_trip(input) {
            Ok((_, printed)) if printed == canonical => {}
            Ok((_, printed)) => failures.push(format!(
                "{input:?}\n    expected {canonical:?}\n    printed  {printed:?}"
            )),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn invalid_statements_fail_with_message_and_position() {
    let mut failures = Vec::new();
    for (input, fragment, line, column) in all_invalid() {
        match parse(input) {
            Ok(q) => failures.push(format!("{input:?} parsed as {q}")),
            Err(e) => {
                let message = e.to_string();
                let at = (e.position.line, e.position.column);
                if !message.contains(fragment) || at != (line, column) {
                    failures.push(format!(
                        "{input:?}\n    expected {fragment:?} at {line}:{column}\n    got      {message:?} at {}:{}",
                        at.0, at.1
                    ));
                }
                let suffix = format!(" at line {}, char {}", at.0, at.1);
                if !message.ends_with(&suffix) {
                    failures.push(format!("{message:?} does not end with {suffix:?}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
