//! Bearer tokens: who may call, and whether they may write.
//!
//! A server given tokens refuses every call without one of them
//! (UNAUTHENTICATED); a read-only token may read, and is refused anything
//! that writes (PERMISSION_DENIED). A server given none lets every caller
//! read and write, which is allowed only on a loopback address unless
//! `--insecure` says otherwise (see `ServerOptions::check`).
//!
//! Tokens come from a file (`--tokens FILE`) or the environment
//! (`MILLISCALE_TOKENS`), as entries `ROLE:TOKEN`, where ROLE is
//! `read-write` (or `rw`) or `read-only` (or `ro`). In a file, one entry a
//! line, `#` starts a comment; in the variable, entries are separated by
//! commas or whitespace. Tokens are compared in constant time.

use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;

use crate::errors::{Refusal, refuse};

/// Who is calling: the index of their token (0 when the server has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Principal(pub u32);

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// May read and write.
    ReadWrite,
    /// May only read.
    ReadOnly,
}

/// The server's tokens.
#[derive(Clone, Default)]
pub struct Tokens {
    tokens: Vec<(Vec<u8>, Role)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        let ro = self.tokens.iter().filter(|(_, r)| *r == Role::ReadOnly).count();
        write!(f, "Tokens {{ read_write: {}, read_only: {ro} }}", self.tokens.len() - ro)
    }
}

/// The smallest token accepted: shorter ones are guessable.
pub const TOKEN_BYTES_MIN: usize = 16;

impl Tokens {
    /// No tokens: every caller may read and write.
    pub fn none() -> Tokens {
        Tokens::default()
    }

    /// True when the server has no tokens (every caller may write).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Add a token.
    pub fn add(&mut self, token: &str, role: Role) -> Result<(), String> {
        if token.len() < TOKEN_BYTES_MIN {
            return Err(format!(
                "a token must have at least {TOKEN_BYTES_MIN} characters (one had {})",
                token.len()
            ));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a token may not contain whitespace or control characters".into());
        }
        if self.tokens.iter().any(|(t, _)| t == token.as_bytes()) {
            return Err("the same token is listed twice".into());
        }
        self.tokens.push((token.as_bytes().to_vec(), role));
        Ok(())
    }

    /// Parse entries `ROLE:TOKEN` (see the module docs); `#` starts a
    /// comment that runs to the end of the line.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut tokens = Tokens::none();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            for entry in line.split(|c: char| c == ',' || c.is_whitespace()) {
                if entry.is_empty() {
                    continue;
                }
                let Some((role, token)) = entry.split_once(':') else {
                    return Err(format!(
                        "line {}: an entry is ROLE:TOKEN (ROLE read-write or read-only)",
                        n + 1
                    ));
                };
                let role = match role {
                    "read-write" | "rw" => Role::ReadWrite,
                    "read-only" | "ro" => Role::ReadOnly,
                    other => {
                        return Err(format!(
                            "line {}: unknown role {other:?} (read-write or read-only)",
                            n + 1
                        ));
                    }
                };
                tokens.add(token, role).map_err(|e| format!("line {}: {e}", n + 1))?;
            }
        }
        Ok(tokens)
    }

    /// Who sent `metadata`, and what they may do.
    pub fn authorize(&self, metadata: &MetadataMap) -> Result<(Principal, Role), Refusal> {
        if self.tokens.is_empty() {
            return Ok((Principal(0), Role::ReadWrite));
        }
        let Some(header) = metadata.get("authorization") else {
            return Err(refuse::unauthenticated(
                "this server requires a bearer token (authorization: Bearer TOKEN)",
            ));
        };
        let presented = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .unwrap_or("");
        // Compare against every token, without stopping at a match.
        let mut found: Option<(Principal, Role)> = None;
        for (i, (token, role)) in self.tokens.iter().enumerate() {
            if bool::from(token.as_slice().ct_eq(presented.as_bytes())) {
                found = Some((Principal(i as u32 + 1), *role));
            }
        }
        found.ok_or_else(|| refuse::unauthenticated("the bearer token is not valid here"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(header: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", header.parse().expect("ascii"));
        m
    }

    #[test]
    fn tokens_parse_and_authorize_by_role() {
        let t = Tokens::parse(
            "# the writers\nread-write:0123456789abcdef\nro:fedcba9876543210 # the readers\n",
        )
        .expect("valid");
        assert_eq!(
            t.authorize(&with("Bearer 0123456789abcdef")).expect("known").1,
            Role::ReadWrite
        );
        assert_eq!(t.authorize(&with("Bearer fedcba9876543210")).expect("known").1, Role::ReadOnly);
        for bad in ["Bearer 0123456789abcdeX", "0123456789abcdef", "Bearer "] {
            let e = t.authorize(&with(bad)).expect_err(bad);
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad}");
        }
        assert_eq!(
            t.authorize(&MetadataMap::new()).expect_err("none").code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn bad_token_lists_are_refused_with_their_line() {
        for (text, says) in [
            ("rw:short", "at least 16"),
            ("admin:0123456789abcdef", "unknown role"),
            ("0123456789abcdef", "ROLE:TOKEN"),
            ("rw:0123456789abcdef\nro:0123456789abcdef", "twice"),
        ] {
            let e = Tokens::parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
        let env = Tokens::parse("rw:0123456789abcdef,ro:fedcba9876543210").expect("comma list");
        assert!(!env.is_empty());
        assert!(Tokens::parse("").expect("empty").is_empty());
    }
}
