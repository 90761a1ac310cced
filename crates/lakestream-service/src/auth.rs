//! Bearer-token authentication with per-namespace permissions: who a caller is
//! ([`Caller`], resolved once per request by [`crate::Api::admit`]) and what each operation
//! needs (every operation of [`crate::Api`] checks its own permission, so a front end cannot
//! get it wrong).
//!
//! With no tokens configured the API is open (what `lakestream dev` runs). With tokens, every
//! request must carry `Authorization: Bearer <token>` (HTTP header, gRPC metadata), and the
//! token must grant the permission the operation needs on the namespace it touches:
//!
//! | operation | permission |
//! |---|---|
//! | list namespaces, create a namespace | `read` / `admin` on `*` |
//! | get or list streams, fetch, offsets, read sessions, consume events | `read` on the namespace |
//! | consumer groups: list, committed offsets, commit | `read` on the namespace |
//! | produce, soft trim, ingest events | `write` on the namespace |
//! | create, change or drop a stream, add partitions, delete a namespace | `admin` on the namespace |
//!
//! `admin` implies `write`, which implies `read`. A grant on `*` applies to every namespace.
//! A grant names the namespace itself (`"team a%"`), never its URL encoding: HTTP requests are
//! checked against the percent-decoded `{ns}` the handlers use, gRPC calls against the
//! request's `namespace` field. Health, readiness and metrics need no token. Tokens are
//! compared in constant time and never printed (their `Debug` is masked).

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

/// A resolved token: its name and what it grants.
#[derive(Clone)]
pub struct Grant {
    name: String,
    secret: Vec<u8>,
    namespaces: BTreeMap<String, Permission>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant").field("name", &self.name).field("namespaces", &self.namespaces).finish()
    }
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

    /// The grant of the token `authorization` (the header's value, `Bearer …`) presents.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<&Grant, Denied> {
        let presented = authorization
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .ok_or(Denied::Unauthenticated)?;
        self.grants
            .iter()
            .find(|g| constant_time_eq(&g.secret, presented.as_bytes()))
            .ok_or(Denied::Unauthenticated)
    }

    /// Checks `authorization` (the header's value) for `needed` on `namespace` (`None` for
    /// deployment-wide operations, which need a grant on `*`). Returns the token's name.
    pub fn check(
        &self,
        authorization: Option<&str>,
        namespace: Option<&str>,
        needed: Permission,
    ) -> Result<String, Denied> {
        let grant = self.authenticate(authorization)?;
        grant.permits(namespace, needed)?;
        Ok(grant.name.clone())
    }
}

impl Grant {
    /// The token's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this grant gives `needed` on `namespace` (`None`: every namespace, which needs a
    /// grant on `*`); the refusal names what was needed.
    pub fn permits(&self, namespace: Option<&str>, needed: Permission) -> Result<(), Denied> {
        let granted = namespace
            .and_then(|ns| self.namespaces.get(ns))
            .into_iter()
            .chain(self.namespaces.get("*"))
            .max()
            .copied();
        match granted {
            Some(p) if p >= needed => Ok(()),
            _ => Err(Denied::Forbidden(format!(
                "token {:?} lacks {needed:?} permission on {}",
                self.name,
                namespace.map_or("every namespace (*)".to_string(), |ns| format!("namespace {ns:?}"))
            ))),
        }
    }
}

/// The operations of the API, each with the permission it needs: the one table of
/// permissions. Every operation of [`crate::Api`] checks its own; a transport may check one
/// before it decodes a request's body ([`crate::Api::authorize_operation`]), so that a caller
/// without the permission learns nothing about what its request would have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// List namespaces (every namespace: a grant on `*`).
    ListNamespaces,
    /// Create a namespace (a grant on `*`).
    CreateNamespace,
    /// Delete a namespace.
    DeleteNamespace,
    /// List a namespace's streams.
    ListStreams,
    /// Describe a stream.
    GetStream,
    /// Create a stream.
    CreateStream,
    /// Change a stream's properties.
    UpdateStream,
    /// Drop a stream.
    DropStream,
    /// Add partitions to a stream.
    AddPartitions,
    /// Append entries (plain, conditional, idempotent, in sessions).
    Produce,
    /// Read entries (fetches and read sessions).
    Fetch,
    /// A partition's offsets.
    Offsets,
    /// Soft-trim a partition.
    Trim,
    /// List a namespace's consumer groups.
    ListGroups,
    /// A group's committed offsets and lag.
    GroupOffsets,
    /// Commit a group's offset.
    CommitOffset,
    /// Ingest CloudEvents.
    IngestEvents,
    /// Consume a partition as CloudEvents.
    ConsumeEvents,
    /// Take a Kafka producer id, to produce into a namespace.
    NewProducerId,
}

impl Operation {
    /// The permission the operation needs on the namespace it touches.
    pub fn permission(self) -> Permission {
        match self {
            Operation::ListNamespaces
            | Operation::ListStreams
            | Operation::GetStream
            | Operation::Fetch
            | Operation::Offsets
            | Operation::ConsumeEvents
            // Consumers list groups, read and commit their offsets with read access.
            | Operation::ListGroups
            | Operation::GroupOffsets
            | Operation::CommitOffset => Permission::Read,
            Operation::Produce | Operation::Trim | Operation::IngestEvents | Operation::NewProducerId => {
                Permission::Write
            }
            Operation::CreateNamespace
            | Operation::DeleteNamespace
            | Operation::CreateStream
            | Operation::UpdateStream
            | Operation::DropStream
            | Operation::AddPartitions => Permission::Admin,
        }
    }
}

/// Who calls an operation: the principal a front end presented, as [`crate::Api::admit`]
/// resolved it (front ends cannot make one otherwise). Every operation checks its permission
/// against it.
#[derive(Clone)]
pub struct Caller {
    principal: Principal,
}

#[derive(Clone)]
enum Principal {
    /// No token is configured: every caller may do everything.
    Open,
    /// A caller that presented no valid credentials where they are needed: refused
    /// everything.
    Anonymous,
    /// A token's grants.
    Token(std::sync::Arc<Grant>),
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.principal {
            Principal::Open => f.write_str("Caller(open)"),
            Principal::Anonymous => f.write_str("Caller(anonymous)"),
            Principal::Token(g) => write!(f, "Caller(token {:?})", g.name),
        }
    }
}

impl Caller {
    /// A caller of an open API (no tokens configured).
    pub(crate) fn open() -> Caller {
        Caller { principal: Principal::Open }
    }

    /// A caller that presented no valid credentials: every operation refuses it as
    /// unauthenticated. For front ends whose connections are refused request by request (a
    /// Kafka client without credentials where tokens are configured).
    pub fn anonymous() -> Caller {
        Caller { principal: Principal::Anonymous }
    }

    /// A caller presenting a token with `grant`.
    pub(crate) fn token(grant: &Grant) -> Caller {
        Caller { principal: Principal::Token(std::sync::Arc::new(grant.clone())) }
    }

    /// The token's name, when the caller presented one.
    pub fn token_name(&self) -> Option<&str> {
        match &self.principal {
            Principal::Open | Principal::Anonymous => None,
            Principal::Token(g) => Some(&g.name),
        }
    }

    /// Whether the caller may do what needs `needed` on `namespace` (`None`: every namespace).
    pub fn permits(&self, namespace: Option<&str>, needed: Permission) -> Result<(), Denied> {
        match &self.principal {
            Principal::Open => Ok(()),
            Principal::Anonymous => Err(Denied::Unauthenticated),
            Principal::Token(grant) => grant.permits(namespace, needed),
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
