//! `series_id`: the stable 64-bit identity of a series.
//!
//! It is a storage key (fact tables are ordered by it and shards are chosen
//! from it), so the algorithm is frozen: see `docs/series_id.md` and the test
//! vectors below. Changing a single byte of the canonical key changes where
//! existing data lives.
//!
//! Algorithm: XXH3-64 (seed 0) over the canonical series key, which is the
//! measurement followed by `,key=value` for every tag in ascending byte order
//! of the key, escaped as in line protocol (measurement: `,` and space;
//! tag keys and values: `,`, `=` and space, each preceded by `\`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use xxhash_rust::xxh3::xxh3_64;

/// Hasher for keys that are already hashes (a `series_id`, an XXH3 of raw
/// series bytes): SipHash of every id costs more than the lookup at 1M
/// series, and the ids are uniform already.
#[derive(Default)]
pub struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are meant; fold anything else in for safety.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A set of `series_id`s (or other hashes) hashed as they are.
pub type IdSet = HashSet<u64, BuildHasherDefault<IdentityHasher>>;
/// A map keyed by `series_id`s (or other hashes) hashed as they are.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// Appends `s` to `out` with the bytes of `specials` escaped by a backslash.
#[inline]
fn push_escaped<const N: usize>(out: &mut Vec<u8>, s: &[u8], specials: [u8; N]) {
    // Most names need no escape: check a word at a time, then copy at once.
    if crate::scan::find_any(s, 0, specials) == s.len() {
        out.extend_from_slice(s);
        return;
    }
    for &b in s {
        if specials.contains(&b) {
            out.push(b'\\');
        }
        out.push(b);
    }
}

/// Writes the canonical series key of `measurement` and `tags` into `out`
/// (cleared first). `tags` must already be sorted by key and free of
/// duplicate keys; the line protocol parser guarantees both.
pub fn canonical_key_into<'a, I>(out: &mut Vec<u8>, measurement: &[u8], tags: I)
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    out.clear();
    push_escaped(out, measurement, [b',', b' ']);
    for (k, v) in tags {
        out.push(b',');
        push_escaped(out, k, [b',', b'=', b' ']);
        out.push(b'=');
        push_escaped(out, v, [b',', b'=', b' ']);
    }
}

/// The canonical series key for unsorted tags (sorts a copy). Convenience for
/// callers off the hot path.
pub fn canonical_key(measurement: &str, tags: &[(&str, &str)]) -> Vec<u8> {
    let mut sorted: Vec<(&[u8], &[u8])> = tags
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(64);
    canonical_key_into(&mut out, measurement.as_bytes(), sorted);
    out
}

/// `series_id` of an already canonical key.
#[inline]
pub fn series_id_of_key(canonical_key: &[u8]) -> u64 {
    xxh3_64(canonical_key)
}

/// `series_id` of a measurement and tags in any order.
pub fn series_id(measurement: &str, tags: &[(&str, &str)]) -> u64 {
    series_id_of_key(&canonical_key(measurement, tags))
}

/// One tag, key and value, unescaped.
pub type TagPair = (Vec<u8>, Vec<u8>);

/// Splits a canonical series key back into its measurement and tags
/// (unescaped, in key order): the inverse of [`canonical_key_into`]. Nodes
/// use it to index a series' tags. `None` for a key that is not canonical
/// (a tag without `=`).
pub fn parse_canonical_key(key: &[u8]) -> Option<(Vec<u8>, Vec<TagPair>)> {
    // Reads up to the first unescaped byte of `stops`; `escapes` are the
    // bytes a backslash escapes in this part (any other backslash is itself).
    fn part(key: &[u8], mut i: usize, stops: &[u8], escapes: &[u8]) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        while i < key.len() {
            let b = key[i];
            if b == b'\\' && i + 1 < key.len() && escapes.contains(&key[i + 1]) {
                out.push(key[i + 1]);
                i += 2;
                continue;
            }
            if stops.contains(&b) {
                break;
            }
            out.push(b);
            i += 1;
        }
        (out, i)
    }
    let (measurement, mut i) = part(key, 0, b",", b", ");
    let mut tags = Vec::new();
    while i < key.len() {
        // key[i] is the `,` before a tag.
        let (k, j) = part(key, i + 1, b"=", b",= ");
        if key.get(j) != Some(&b'=') {
            return None;
        }
        let (v, j) = part(key, j + 1, b",", b",= ");
        tags.push((k, v));
        i = j;
    }
    Some((measurement, tags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_keys_parse_back() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("cpu", &[]),
            ("cpu", &[("host", "a"), ("region", "eu")]),
            ("disk free", &[("path", "/var,log"), ("k=v", "x y")]),
            ("m,x", &[("a\\b", "c\\")]),
        ];
        for (m, tags) in cases {
            let key = canonical_key(m, tags);
            let (pm, pt) = parse_canonical_key(&key).unwrap();
            assert_eq!(pm, m.as_bytes());
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = tags
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect();
            want.sort();
            assert_eq!(pt, want, "{}", String::from_utf8_lossy(&key));
        }
        assert_eq!(parse_canonical_key(b"cpu,novalue"), None);
    }

    /// Frozen vectors, cross-checked against Python's `xxhash.xxh3_64` of the
    /// canonical key. If one of these fails, the change broke every stored
    /// shard: revert it.
    type Vector = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static str,
        u64,
    );
    const VECTORS: &[Vector] = &[
        ("cpu", &[], "cpu", 0xecaa9c725d358abe),
        (
            "cpu",
            &[("host", "a"), ("region", "eu")],
            "cpu,host=a,region=eu",
            0xe3a4297a000be2a6,
        ),
        (
            "disk free",
            &[("path", "/var,log"), ("k=v", "x y")],
            "disk\\ free,k\\=v=x\\ y,path=/var\\,log",
            0x0cb6819c17ffda86,
        ),
        (
            "mem",
            &[("host", "server-01")],
            "mem,host=server-01",
            0x56549ad2f0b7c659,
        ),
    ];

    #[test]
    fn canonical_keys_match_vectors() {
        for (m, tags, key, _) in VECTORS {
            assert_eq!(
                String::from_utf8(canonical_key(m, tags)).unwrap(),
                *key,
                "canonical key of {m} {tags:?}"
            );
        }
    }

    #[test]
    fn series_ids_match_vectors() {
        for (m, tags, _, id) in VECTORS {
            assert_eq!(series_id(m, tags), *id, "series_id of {m} {tags:?}");
        }
    }

    #[test]
    fn escaping_matches_the_byte_by_byte_rule() {
        // The word-at-a-time "nothing to escape" test must never skip an
        // escape: compare with the plain rule on strings full of specials.
        let mut x: u64 = 3;
        let alphabet = b"ab ,=\\\xc3\xbc_0";
        for _ in 0..50_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (x >> 59) as usize;
            let s: Vec<u8> = (0..len)
                .map(|i| alphabet[((x >> (i * 3 % 56)) % alphabet.len() as u64) as usize])
                .collect();
            for specials in [&b", "[..], &b",= "[..]] {
                let mut want = Vec::new();
                for &b in &s {
                    if specials.contains(&b) {
                        want.push(b'\\');
                    }
                    want.push(b);
                }
                let mut got = Vec::new();
                if specials.len() == 2 {
                    push_escaped(&mut got, &s, [b',', b' ']);
                } else {
                    push_escaped(&mut got, &s, [b',', b'=', b' ']);
                }
                assert_eq!(got, want, "{s:?}");
            }
        }
    }

    #[test]
    fn tag_order_does_not_matter() {
        let a = series_id("cpu", &[("host", "a"), ("region", "eu"), ("az", "1")]);
        let b = series_id("cpu", &[("az", "1"), ("region", "eu"), ("host", "a")]);
        assert_eq!(a, b);
        assert_ne!(a, series_id("cpu", &[("host", "a"), ("region", "eu")]));
    }
}
