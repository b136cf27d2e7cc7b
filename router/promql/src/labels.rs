//! A series' label set, kept sorted by name as Prometheus keeps it, so
//! equality, hashing and the JSON order are the same as Prometheus's.

use std::fmt;

pub const METRIC_NAME: &str = "__name__";

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// Builds a label set from pairs in any order; empty values are
    /// dropped (in Prometheus an empty label is an absent label).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut v: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        Labels(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn get(&self, name: &str) -> &str {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
            Ok(i) => &self.0[i].1,
            Err(_) => "",
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Sets `name` to `value`; an empty value removes the label.
    pub fn set(&mut self, name: &str, value: &str) {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
            Ok(i) if value.is_empty() => {
                self.0.remove(i);
            }
            Ok(i) => self.0[i].1 = value.to_string(),
            Err(_) if value.is_empty() => {}
            Err(i) => self.0.insert(i, (name.to_string(), value.to_string())),
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.set(name, "");
    }

    pub fn without_name(&self) -> Labels {
        let mut l = self.clone();
        l.remove(METRIC_NAME);
        l
    }

    /// Only the listed labels.
    pub fn keep(&self, names: &[String]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| names.iter().any(|n| n == k))
                .cloned()
                .collect(),
        )
    }

    /// All but the listed labels.
    pub fn drop_names(&self, names: &[String]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| !names.iter().any(|n| n == k))
                .cloned()
                .collect(),
        )
    }

    /// The key Prometheus matches and groups on: the values of `names`
    /// (`on`/`by`) or of every label but `names` and `__name__`
    /// (`ignoring`/`without`, and no modifier at all).
    pub fn signature(&self, names: &[String], include: bool) -> String {
        let mut key = String::new();
        for (k, v) in &self.0 {
            let listed = names.iter().any(|n| n == k);
            let take = if include {
                listed
            } else {
                !listed && k != METRIC_NAME
            };
            if take {
                key.push_str(k);
                key.push('\u{ff}');
                key.push_str(v);
                key.push('\u{ff}');
            }
        }
        key
    }

    /// A key over every label, name included.
    pub fn full_key(&self) -> String {
        let mut key = String::new();
        for (k, v) in &self.0 {
            key.push_str(k);
            key.push('\u{ff}');
            key.push_str(v);
            key.push('\u{ff}');
        }
        key
    }
}

impl fmt::Display for Labels {
    /// `{a="1", b="2"}`, the form Prometheus prints in its error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_and_empty_values_dropped() {
        let l = Labels::from_pairs([("b", "2"), ("a", "1"), ("c", "")]);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![("a", "1"), ("b", "2")]);
        assert_eq!(l.get("c"), "");
    }

    #[test]
    fn signature_ignores_name_unless_listed() {
        let a = Labels::from_pairs([("__name__", "x"), ("job", "j")]);
        let b = Labels::from_pairs([("__name__", "y"), ("job", "j")]);
        assert_eq!(a.signature(&[], false), b.signature(&[], false));
        let on = vec!["__name__".to_string()];
        assert_ne!(a.signature(&on, true), b.signature(&on, true));
    }
}
