//! Layered options, shared by the router and the node: serde defaults ->
//! TOML file -> env vars and flags (clap merges env under flags) ->
//! validate. Each binary keeps its own options struct and error; this is
//! the merge.

use serde::de::DeserializeOwned;
use std::path::Path;

/// A config file that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
#[error("config file {path}: {reason}")]
pub struct ConfigFileError {
    pub path: String,
    pub reason: String,
}

/// The options in the TOML file at `path` (unknown keys are errors when
/// `T` denies them), or `T::default()` without a file.
pub fn from_file<T: DeserializeOwned + Default>(path: Option<&Path>) -> Result<T, ConfigFileError> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let err = |reason: String| ConfigFileError {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    toml::from_str(&text).map_err(|e| err(e.to_string()))
}

/// Lays each flag given (`Some`) over the option of the same name:
/// `overlay!(options, flags; a, b; optional: c)` sets `options.a = v` for
/// `flags.a == Some(v)`, and `options.c = flags.c` when that is `Some`
/// (options that stay optional after merging).
#[macro_export]
macro_rules! overlay {
    ($opts:expr, $flags:expr; $($f:ident),* $(,)? $(; optional: $($o:ident),* $(,)?)?) => {{
        $( if let Some(v) = $flags.$f { $opts.$f = v; } )*
        $($( if $flags.$o.is_some() { $opts.$o = $flags.$o; } )*)?
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Opts {
        port: u16,
        name: String,
        cert: Option<String>,
    }

    struct Flags {
        port: Option<u16>,
        name: Option<String>,
        cert: Option<String>,
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("o.toml");
        std::fs::write(&file, "port = 7\nname = \"file\"\n").unwrap();
        let mut o: Opts = from_file(Some(&file)).unwrap();
        assert_eq!((o.port, o.name.as_str()), (7, "file"));
        let flags = Flags {
            port: None,
            name: Some("flag".into()),
            cert: Some("c.pem".into()),
        };
        overlay!(o, flags; port, name; optional: cert);
        assert_eq!(
            o,
            Opts {
                port: 7,
                name: "flag".into(),
                cert: Some("c.pem".into())
            }
        );
        assert_eq!(from_file::<Opts>(None).unwrap(), Opts::default());
    }

    #[test]
    fn unreadable_and_unknown_keys_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.toml");
        let e = from_file::<Opts>(Some(&missing)).unwrap_err();
        assert!(e.to_string().starts_with("config file "), "{e}");
        assert!(e.path.ends_with("missing.toml"));
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "colour = 1\n").unwrap();
        let e = from_file::<Opts>(Some(&bad)).unwrap_err();
        assert!(e.reason.contains("colour"), "{e}");
    }
}
