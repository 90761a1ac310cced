//! Named profiles: where a service is and how to authenticate, kept in a file so that
//! commands need no flags.
//!
//! The file is `$LAKESTREAM_CLI_CONFIG`, else `$XDG_CONFIG_HOME/lakestream/cli.toml`, else
//! `~/.config/lakestream/cli.toml`:
//!
//! ```toml
//! default_profile = "prod"
//!
//! [profiles.prod]
//! url = "https://lakestream.example.com"
//! token_env = "LAKESTREAM_PROD_TOKEN"   # or token = "..." (keep the file private)
//! ca_file = "ca.pem"                    # relative to this file
//! namespace = "payments"
//! ```
//!
//! A setting comes from the flag, else its environment variable (`LAKESTREAM_URL`,
//! `LAKESTREAM_TOKEN`, `LAKESTREAM_CA_FILE`, `LAKESTREAM_NAMESPACE`), else the profile
//! (`--profile`, `LAKESTREAM_PROFILE`, else `default_profile`), else the default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ClientError, ClientResult, Connection};

/// The URL when nothing names one: what `lakestream dev` serves.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";
/// The namespace when nothing names one.
pub const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    default_profile: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// One profile of the file.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    url: Option<String>,
    token: Option<String>,
    token_env: Option<String>,
    ca_file: Option<PathBuf>,
    namespace: Option<String>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_env", &self.token_env)
            .field("ca_file", &self.ca_file)
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// What the flags and their environment variables said (clap merges the two).
#[derive(Debug, Default, Clone)]
pub struct Given {
    /// `--url` / `LAKESTREAM_URL`.
    pub url: Option<String>,
    /// `--token` / `LAKESTREAM_TOKEN`.
    pub token: Option<String>,
    /// `--ca-file` / `LAKESTREAM_CA_FILE`.
    pub ca_file: Option<PathBuf>,
    /// `--namespace` / `LAKESTREAM_NAMESPACE`.
    pub namespace: Option<String>,
    /// `--profile` / `LAKESTREAM_PROFILE`.
    pub profile: Option<String>,
}

/// Where the profile file is looked for.
pub fn default_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("LAKESTREAM_CLI_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = env("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return Some(Path::new(&x).join("lakestream/cli.toml"));
    }
    env("HOME").map(|h| Path::new(&h).join(".config/lakestream/cli.toml"))
}

/// The connection and namespace a command uses. `file` is the profile file (absent is fine
/// unless a profile is asked for by name); `env` reads a profile's `token_env`.
pub fn resolve(
    given: Given,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> ClientResult<(Connection, String)> {
    let parsed = match file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some(toml::from_str::<ProfileFile>(&text).map_err(|e| {
                ClientError::usage(format!("{}: {}", path.display(), e.to_string().trim_end()))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ClientError::usage(format!("{}: {e}", path.display()))),
        },
        None => None,
    };
    let where_ = || file.map(|p| p.display().to_string()).unwrap_or_else(|| "(no profile file)".into());
    let profile = match (&given.profile, &parsed) {
        (Some(name), Some(f)) => Some((
            name.clone(),
            f.profiles.get(name).ok_or_else(|| {
                ClientError::usage(format!("--profile {name:?}: no such profile in {}", where_()))
            })?,
        )),
        (Some(name), None) => {
            return Err(ClientError::usage(format!("--profile {name:?}: no profile file at {}", where_())));
        }
        (None, Some(f)) => match &f.default_profile {
            Some(name) => Some((
                name.clone(),
                f.profiles.get(name).ok_or_else(|| {
                    ClientError::usage(format!("{}: default_profile {name:?} is not defined", where_()))
                })?,
            )),
            None => None,
        },
        (None, None) => None,
    };
    let base_dir = file.and_then(Path::parent).unwrap_or(Path::new("."));
    let empty = Profile::default();
    let (name, p) = match &profile {
        Some((name, p)) => (name.as_str(), *p),
        None => ("", &empty),
    };
    if p.token.is_some() && p.token_env.is_some() {
        return Err(ClientError::usage(format!("profile {name:?}: set token or token_env, not both")));
    }
    let token = match given.token {
        Some(t) => Some(t),
        None => match (&p.token, &p.token_env) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(var)) => Some(env(var).ok_or_else(|| {
                ClientError::usage(format!("profile {name:?}: token_env names {var}, which is not set"))
            })?),
            (None, None) => None,
        },
    };
    let connection = Connection {
        url: given.url.or_else(|| p.url.clone()).unwrap_or_else(|| DEFAULT_URL.to_string()),
        token,
        ca_file: given.ca_file.or_else(|| p.ca_file.as_ref().map(|f| base_dir.join(f))),
    };
    let namespace =
        given.namespace.or_else(|| p.namespace.clone()).unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    Ok((connection, namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const PROFILES: &str = r#"
default_profile = "prod"
[profiles.prod]
url = "https://prod.example:8443"
token_env = "PROD_TOKEN"
ca_file = "ca.pem"
namespace = "payments"
[profiles.local]
url = "http://127.0.0.1:9999"
"#;

    #[test]
    fn the_default_profile_fills_what_no_flag_gives() {
        let (dir, path) = file(PROFILES);
        let env = |k: &str| (k == "PROD_TOKEN").then(|| "t0k".to_string());
        let (c, ns) = resolve(Given::default(), Some(&path), &env).unwrap();
        assert_eq!(c.url, "https://prod.example:8443");
        assert_eq!(c.token.as_deref(), Some("t0k"));
        assert_eq!(c.ca_file, Some(dir.path().join("ca.pem")), "relative to the file");
        assert_eq!(ns, "payments");
    }

    #[test]
    fn flags_override_the_profile() {
        let (_dir, path) = file(PROFILES);
        let given = Given {
            url: Some("http://other:1".into()),
            token: Some("flag".into()),
            namespace: Some("ns".into()),
            profile: Some("local".into()),
            ..Given::default()
        };
        let (c, ns) = resolve(given, Some(&path), &no_env).unwrap();
        assert_eq!((c.url.as_str(), c.token.as_deref(), ns.as_str()), ("http://other:1", Some("flag"), "ns"));
    }

    #[test]
    fn no_file_means_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let (c, ns) = resolve(Given::default(), Some(&dir.path().join("absent.toml")), &no_env).unwrap();
        assert_eq!((c.url.as_str(), ns.as_str()), (DEFAULT_URL, DEFAULT_NAMESPACE));
        assert!(c.token.is_none() && c.ca_file.is_none());
    }

    #[test]
    fn mistakes_are_named() {
        let (_dir, path) = file(PROFILES);
        let unknown = Given { profile: Some("staging".into()), ..Given::default() };
        let e = resolve(unknown, Some(&path), &no_env).unwrap_err();
        assert!(e.message.contains("\"staging\"") && e.message.contains("no such profile"), "{e}");
        let e = resolve(Given::default(), Some(&path), &no_env).unwrap_err();
        assert!(e.message.contains("PROD_TOKEN"), "an unset token_env is named: {e}");
        let (_d, bad) = file("[profiles.x]\nurl = \"http://a\"\ntokn = \"t\"\n");
        let e = resolve(Given::default(), Some(&bad), &no_env).unwrap_err();
        assert!(e.message.contains("tokn"), "an unknown key is named: {e}");
        let (_d, both) = file("[profiles.x]\ntoken = \"a\"\ntoken_env = \"B\"\n");
        let e = resolve(Given { profile: Some("x".into()), ..Given::default() }, Some(&both), &no_env)
            .unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
    }

    #[test]
    fn the_file_is_found_where_users_look() {
        let env = |k: &str| match k {
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        assert_eq!(default_path(&env), Some(PathBuf::from("/home/u/.config/lakestream/cli.toml")));
        let env = |k: &str| match k {
            "LAKESTREAM_CLI_CONFIG" => Some("/etc/ls.toml".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        assert_eq!(default_path(&env), Some(PathBuf::from("/etc/ls.toml")));
    }
}
