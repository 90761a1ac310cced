//! Bearer-token authentication with per-namespace permissions.
//!
//! With no tokens configured the API is open (what `lakestream dev` runs). With tokens, every
//! `/v1` request must carry `Authorization: Bearer <token>`, and the token must grant the
//! permission the operation needs on the namespace it touches:
//!
//! | operation | permission |
//! |---|---|
//! | list namespaces, create a namespace | `read` / `admin` on `*` |
//! | get or list streams, fetch, offsets | `read` on the namespace |
//! | produce, soft trim | `write` on the namespace |
//! | create or drop a stream, add partitions | `admin` on the namespace |
//!
//! `admin` implies `write`, which implies `read`. A grant on `*` applies to every namespace.
//! A grant names the namespace itself (`"team a%"`), never its URL encoding: HTTP requests are
//! checked against the percent-decoded `{ns}` the handlers use, gRPC calls against the
//! request's `namespace` field. Health, readiness and metrics need no token. Tokens are compared in constant time and never
//! printed (their `Debug` is masked).

use std::collections::BTreeMap;

use serde::Deserialize;

/// What a token may do on a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read streams and their entries.
    Read,
    /// Also produce and trim.
    Write,
    /// Also create and drop streams and partitions.
    Admin,
}

/// One bearer token and its grants.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// A name for logs (the token itself is never logged).
    pub name: String,
    /// The token. Prefer `token_env` so the secret stays out of files.
    #[serde(default)]
    pub token: Option<String>,
    /// The environment variable holding the token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Namespace (or `*`) → permission.
    pub namespaces: BTreeMap<String, Permission>,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_env", &self.token_env)
            .field("namespaces", &self.namespaces)
            .finish()
    }
}

/// The `[auth]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The accepted tokens; empty means the API is open.
    pub tokens: Vec<TokenConfig>,
}

/// A resolved token.
#[derive(Clone)]
struct Grant {
    name: String,
    secret: Vec<u8>,
    namespaces: BTreeMap<String, Permission>,
}

/// The tokens a service accepts, resolved at start.
#[derive(Clone, Default)]
pub struct Authenticator {
    grants: Vec<Grant>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.grants.iter().map(|g| &g.name).collect::<Vec<_>>())
            .finish()
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No token, or an unknown one (401).
    Unauthenticated,
    /// The token lacks the permission (403); names what was needed.
    Forbidden(String),
}

impl Authenticator {
    /// Resolves the configured tokens, reading `token_env` variables through `var`. Errors
    /// name the token and what is wrong.
    pub fn from_config(config: &AuthConfig, var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut grants = Vec::new();
        for t in &config.tokens {
            let secret = match (&t.token, &t.token_env) {
                (Some(s), None) => s.clone(),
                (None, Some(v)) => var(v)
                    .ok_or_else(|| format!("auth token {:?}: environment variable {v} is not set", t.name))?,
                _ => {
                    return Err(format!(
                        "auth token {:?}: give exactly one of `token` and `token_env`",
                        t.name
                    ));
                }
            };
            if secret.len() < 16 {
                return Err(format!("auth token {:?}: a token needs at least 16 characters", t.name));
            }
            if t.namespaces.is_empty() {
                return Err(format!("auth token {:?}: grants nothing (`namespaces` is empty)", t.name));
            }
            grants.push(Grant {
                name: t.name.clone(),
                secret: secret.into_bytes(),
                namespaces: t.namespaces.clone(),
            });
        }
        Ok(Authenticator { grants })
    }

    /// Whether any token is configured (else the API is open).
    pub fn enabled(&self) -> bool {
        !self.grants.is_empty()
    }

    /// Checks `authorization` (the header's value) for `needed` on `namespace` (`None` for
    /// deployment-wide operations, which need a grant on `*`). Returns the token's name.
    pub fn check(
        &self,
        authorization: Option<&str>,
        namespace: Option<&str>,
        needed: Permission,
    ) -> Result<String, Denied> {
        let presented = authorization
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .ok_or(Denied::Unauthenticated)?;
        let grant = self
            .grants
            .iter()
            .find(|g| constant_time_eq(&g.secret, presented.as_bytes()))
            .ok_or(Denied::Unauthenticated)?;
        let granted = namespace
            .and_then(|ns| grant.namespaces.get(ns))
            .into_iter()
            .chain(grant.namespaces.get("*"))
            .max()
            .copied();
        match granted {
            Some(p) if p >= needed => Ok(grant.name.clone()),
            _ => Err(Denied::Forbidden(format!(
                "token {:?} lacks {needed:?} permission on {}",
                grant.name,
                namespace.map_or("every namespace (*)".to_string(), |ns| format!("namespace {ns:?}"))
            ))),
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The permission a request needs, from its method and the pattern of the route it matched
/// (`/v1/namespaces/{ns}/streams/{stream}`, as registered with the router); `None` for routes
/// outside `/v1`, which need no token. The namespace is not read from the path here: the
/// caller takes the router's decoded `{ns}` parameter, the value the handlers use (a route
/// without one needs a grant on `*`).
pub fn required(method: &http::Method, route: &str) -> Option<Permission> {
    let parts: Vec<&str> = route.trim_matches('/').split('/').collect();
    if parts.first() != Some(&"v1") || parts.get(1) != Some(&"namespaces") {
        return None;
    }
    let read_or = |p: Permission| if method == http::Method::GET { Permission::Read } else { p };
    let permission = match (parts.get(3), parts.get(5), parts.get(7)) {
        // …/groups…: consumers list groups, read and commit their offsets with read access.
        (Some(&"groups"), _, _) => Permission::Read,
        // …/partitions/{p}/entries|offsets|trim|events: produce and trim write; reads read.
        (Some(&"streams"), Some(&"partitions"), Some(&"trim")) => Permission::Write,
        (Some(&"streams"), Some(&"partitions"), Some(_)) => read_or(Permission::Write),
        // …/streams/{stream}/events: CloudEvents ingest writes.
        (Some(&"streams"), Some(&"events"), None) => read_or(Permission::Write),
        // Namespaces and streams: create, drop and add partitions are admin; reads are read.
        _ => read_or(Permission::Admin),
    };
    Some(permission)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        let config: AuthConfig = toml::from_str(
            r#"
            [[tokens]]
            name = "ingest"
            token = "ingest-token-0123456789"
            namespaces = { default = "write" }
            [[tokens]]
            name = "ops"
            token_env = "OPS_TOKEN"
            namespaces = { "*" = "admin" }
            "#,
        )
        .unwrap();
        Authenticator::from_config(&config, |v| (v == "OPS_TOKEN").then(|| "ops-token-0123456789".into()))
            .unwrap()
    }

    #[test]
    fn permissions_are_checked_per_namespace() {
        let a = auth();
        let ingest = Some("Bearer ingest-token-0123456789");
        assert!(a.check(ingest, Some("default"), Permission::Write).is_ok());
        assert!(a.check(ingest, Some("default"), Permission::Read).is_ok());
        assert!(matches!(a.check(ingest, Some("default"), Permission::Admin), Err(Denied::Forbidden(_))));
        assert!(matches!(a.check(ingest, Some("other"), Permission::Read), Err(Denied::Forbidden(_))));
        assert!(matches!(a.check(ingest, None, Permission::Read), Err(Denied::Forbidden(_))));
        let ops = Some("Bearer ops-token-0123456789");
        assert!(a.check(ops, Some("anything"), Permission::Admin).is_ok());
        assert!(a.check(ops, None, Permission::Admin).is_ok());
        assert_eq!(a.check(None, Some("default"), Permission::Read), Err(Denied::Unauthenticated));
        assert_eq!(
            a.check(Some("Bearer nope-nope-nope-nope"), Some("default"), Permission::Read),
            Err(Denied::Unauthenticated)
        );
        assert_eq!(
            a.check(Some("Basic abc"), Some("default"), Permission::Read),
            Err(Denied::Unauthenticated)
        );
    }

    #[test]
    fn routes_map_to_permissions() {
        use http::Method;
        let r = |m: Method, p: &str| required(&m, p);
        assert_eq!(r(Method::GET, "/healthz"), None);
        assert_eq!(r(Method::GET, "/metrics"), None);
        assert_eq!(r(Method::POST, "/v1/namespaces"), Some(Permission::Admin));
        assert_eq!(r(Method::GET, "/v1/namespaces"), Some(Permission::Read));
        assert_eq!(r(Method::POST, "/v1/namespaces/{ns}/streams"), Some(Permission::Admin));
        assert_eq!(r(Method::GET, "/v1/namespaces/{ns}/streams"), Some(Permission::Read));
        assert_eq!(r(Method::DELETE, "/v1/namespaces/{ns}/streams/{stream}"), Some(Permission::Admin));
        assert_eq!(
            r(Method::POST, "/v1/namespaces/{ns}/streams/{stream}/partitions"),
            Some(Permission::Admin)
        );
        let partition = "/v1/namespaces/{ns}/streams/{stream}/partitions/{p}";
        assert_eq!(r(Method::POST, &format!("{partition}/entries")), Some(Permission::Write));
        assert_eq!(r(Method::GET, &format!("{partition}/entries")), Some(Permission::Read));
        assert_eq!(r(Method::POST, &format!("{partition}/trim")), Some(Permission::Write));
        assert_eq!(r(Method::GET, &format!("{partition}/offsets")), Some(Permission::Read));
        assert_eq!(r(Method::GET, &format!("{partition}/events")), Some(Permission::Read));
        assert_eq!(r(Method::POST, "/v1/namespaces/{ns}/streams/{stream}/events"), Some(Permission::Write));
    }

    #[test]
    fn bad_token_configs_are_named() {
        let short: AuthConfig =
            toml::from_str("[[tokens]]\nname = \"x\"\ntoken = \"short\"\nnamespaces = { a = \"read\" }\n")
                .unwrap();
        assert!(Authenticator::from_config(&short, |_| None).unwrap_err().contains("\"x\""));
        let missing_env: AuthConfig =
            toml::from_str("[[tokens]]\nname = \"y\"\ntoken_env = \"NOPE\"\nnamespaces = { a = \"read\" }\n")
                .unwrap();
        assert!(Authenticator::from_config(&missing_env, |_| None).unwrap_err().contains("NOPE"));
        let t = TokenConfig {
            name: "n".into(),
            token: Some("secret-secret-secret".into()),
            token_env: None,
            namespaces: BTreeMap::new(),
        };
        assert!(!format!("{t:?}").contains("secret-secret"), "tokens are never printed");
    }
}
