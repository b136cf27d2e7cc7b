//! Differential tests: the fast parser against the reference parser, the
//! standard library's float parser and itself with layout slots.

use super::generator::{random_line, Rng};
use crate::lineproto::*;
use OwnedFieldValue::*;

/// Debug text compares floats bit for bit (`-0.0` differs from `0.0`).
fn outcome(r: &Result<OwnedPoint>) -> std::string::String {
    format!("{r:?}")
}

#[test]
fn fast_parser_agrees_with_the_reference_parser() {
    let mut rng = Rng(2024);
    let mut accepted = 0;
    let mut rejected = 0;
    for _ in 0..200_000 {
        let line = random_line(&mut rng);
        let got = parse_line(&line);
        let want = crate::lineproto::reference::parse_line(&line);
        assert_eq!(
            outcome(&got),
            outcome(&want),
            "line {:?}",
            std::string::String::from_utf8_lossy(&line)
        );
        match got {
            Ok(_) => accepted += 1,
            Err(_) => rejected += 1,
        }
    }
    // The generator must reach both outcomes often, or the test proves little.
    assert!(
        accepted > 20_000 && rejected > 20_000,
        "{accepted} accepted, {rejected} rejected"
    );
}

#[test]
fn plain_decimals_agree_with_the_standard_parser() {
    let mut rng = Rng(99);
    for _ in 0..100_000 {
        let digits = rng.next() % 10u64.pow(1 + rng.below(17) as u32);
        let s = digits.to_string();
        let dot = rng.below(s.len() + 2);
        let mut v = if dot <= s.len() {
            format!("{}.{}", &s[..dot], &s[dot..])
        } else {
            s
        };
        match rng.below(3) {
            0 => v.insert(0, '-'),
            1 => v.insert(0, '+'),
            _ => {}
        }
        let line = format!("m v={v},w={v} 1");
        let want: f64 = v.parse().unwrap();
        let p = parse_line(line.as_bytes()).unwrap();
        for (_, got) in &p.fields {
            match got {
                Float(f) => assert_eq!(f.to_bits(), want.to_bits(), "{v}"),
                other => panic!("{v} parsed as {other:?}"),
            }
        }
    }
}

#[test]
fn line_iteration_agrees_with_the_reference() {
    let mut rng = Rng(7);
    const PIECES: &[&str] = &[
        "cpu v=1", "\n", "\r\n", "\r", " ", "\t", "#c", "", "\n\n", "x",
    ];
    for _ in 0..20_000 {
        let mut body = std::string::String::new();
        for _ in 0..rng.below(8) {
            body.push_str(rng.pick(PIECES));
        }
        let got: Vec<_> = lines(body.as_bytes()).collect();
        let want: Vec<_> = crate::lineproto::reference::lines(body.as_bytes()).collect();
        assert_eq!(got, want, "body {body:?}");
    }
}

#[test]
fn fuzz_corpus_parses_like_the_reference() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/lineproto");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        let got = format!("{:?}", parse_body(&body));
        let want = format!("{:?}", crate::lineproto::reference::parse_body(&body));
        assert_eq!(got, want, "{}", path.display());
        n += 1;
    }
    assert!(n >= 16, "corpus of {n} files");
}

/// Everything a parse tells its caller, as text (floats bit for bit).
fn parsed_text(r: Result<Fields<'_>>) -> std::string::String {
    match r {
        Ok(f) => format!("{:?} {:?}", f.iter().collect::<Vec<_>>(), f.timestamp),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn layout_slots_never_change_what_a_line_parses_to() {
    let mut rng = Rng(31);
    let mut with_layouts = FieldParser::default();
    let mut plain = FieldParser::default();
    // Lines come back often (as a series' lines do) with other values, so
    // the remembered keys are hit, missed, and half hit.
    let mut pool: Vec<Vec<u8>> = (0..6).map(|_| random_line(&mut rng)).collect();
    let mut repeated = 0;
    let mut previous: Vec<Option<std::string::String>> = vec![None; 4];
    for _ in 0..200_000 {
        let line = match rng.below(10) {
            0 => {
                let at = rng.below(pool.len());
                pool[at] = random_line(&mut rng);
                pool[at].clone()
            }
            1 => {
                let mut l = pool[rng.below(pool.len())].clone();
                if !l.is_empty() {
                    let at = rng.below(l.len());
                    l[at] = b" ,=\\\"1.ia"[rng.below(9)];
                }
                l
            }
            _ => pool[rng.below(pool.len())].clone(),
        };
        let Ok((_, rest)) = split_series(&line) else {
            continue;
        };
        let slot = rng.below(4);
        let want = parsed_text(plain.parse(rest));
        let got = parsed_text(with_layouts.parse_in_layout(rest, slot));
        assert_eq!(
            got,
            want,
            "line {:?}",
            std::string::String::from_utf8_lossy(&line)
        );
        if want.starts_with('[') {
            let keys: Vec<_> = plain
                .parse(rest)
                .map(|f| f.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>())
                .unwrap();
            let keys = format!("{keys:?}");
            if previous[slot].as_ref() == Some(&keys) {
                repeated += 1;
            }
            previous[slot] = Some(keys);
        }
    }
    assert!(
        repeated > 20_000,
        "only {repeated} lines repeated their slot's keys"
    );
}
