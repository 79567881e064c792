//! `auth-type: basic` with `auth-secret`, `auth-secret-type` and `auth-realm`: HTTP
//! basic authentication by NGINX's `auth_basic` (401 without valid credentials),
//! from the users of a Secret in the Ingress's namespace. The build checks the
//! Secret (`htpasswd_users`); the renderer writes it to a file named after the
//! Secret alone, so that no other Ingress can read or replace it (CVE-2020-8553:
//! ingress-nginx named the file after the Ingress, and names collided).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Key, Risk, Scope::*};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "basic auth",
    keys: &[
        security(
            "auth-type",
            Risk::Low,
            "basic: HTTP basic authentication (digest is refused)",
        ),
        security(
            "auth-secret",
            Risk::Medium,
            "Secret of the Ingress's namespace with the users",
        ),
        security(
            "auth-secret-type",
            Risk::Low,
            "auth-file (key `auth`, htpasswd lines) or auth-map (user: hash)",
        ),
        security("auth-realm", Risk::Medium, "realm shown by the browser"),
    ],
};

const fn security(name: &'static str, risk: Risk, doc: &'static str) -> Key {
    Key {
        name,
        scope: Location,
        risk,
        security: true,
        supported: true,
        doc,
    }
}

/// How the Secret holds its users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecretType {
    /// Key `auth`: htpasswd lines (`user:hash`).
    #[default]
    AuthFile,
    /// Each key is a user, its value the hash.
    AuthMap,
}

/// The annotations as an Ingress sets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuthAnnotations {
    /// `auth-secret`: `name` or `namespace/name` as written.
    pub secret: String,
    /// `auth-secret-type`.
    pub secret_type: SecretType,
    /// `auth-realm`.
    pub realm: String,
}

/// Basic authentication of a location, as the model holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BasicAuth {
    /// The realm.
    pub realm: String,
    /// `namespace/name` of the Secret: the renderer names the users' file after it.
    pub secret: String,
    /// The users, as htpasswd lines (checked, one per line, comments dropped).
    pub users: String,
}

/// The realm when `auth-realm` is absent.
pub const DEFAULT_REALM: &str = "Authentication Required";

/// The most users' bytes one Secret may hold.
pub const MAX_USERS_BYTES: usize = 64 * 1024;

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let kind = r.parse("auth-type", |v| match v {
        "basic" => Ok(()),
        "digest" => {
            Err("digest needs a module this NGINX lacks (auth-digest); use basic".to_owned())
        }
        _ => Err("expected \"basic\"".to_owned()),
    })?;
    let secret = r.parse("auth-secret", value::secret_ref)?;
    let secret_type = r.parse("auth-secret-type", |v| match v {
        "auth-file" => Ok(SecretType::AuthFile),
        "auth-map" => Ok(SecretType::AuthMap),
        _ => Err("expected \"auth-file\" or \"auth-map\"".to_owned()),
    })?;
    let realm = r.parse("auth-realm", |v| {
        // Any text a person reads (the emitter quotes it); no control characters.
        if v.chars().any(char::is_control) {
            return Err("control characters are not allowed".to_owned());
        }
        let v = v.to_owned();
        if v.len() > 256 {
            return Err("longer than 256 bytes".to_owned());
        }
        // NGINX reads the realm "off" as authentication switched off.
        if v.eq_ignore_ascii_case("off") {
            return Err("\"off\" would switch authentication off".to_owned());
        }
        Ok(v)
    })?;
    // Any part without `auth-type: basic` would be a restriction the user expects
    // and that is not there: refused, not ignored.
    match (kind, secret) {
        (Some(()), Some(secret)) => {
            out.basic_auth = Some(BasicAuthAnnotations {
                secret,
                secret_type: secret_type.unwrap_or_default(),
                realm: realm.unwrap_or_else(|| DEFAULT_REALM.to_owned()),
            });
            Ok(())
        }
        (Some(()), None) => Err(r.invalid("auth-type", "auth-secret is required with auth-type")),
        (None, _) if secret_type.is_some() || realm.is_some() || r.get("auth-secret").is_some() => {
            Err(r.invalid(
                "auth-secret",
                "without auth-type: basic, nothing would be checked",
            ))
        }
        (None, _) => Ok(()),
    }
}

/// Checks htpasswd `lines` (`auth-file`) and returns them as NGINX reads them:
/// one `user:hash` per line, comments and blank lines dropped. Errors name the
/// line number, never the hash.
pub fn htpasswd_users<'a>(lines: impl Iterator<Item = &'a str>) -> Result<String, String> {
    let mut out = String::new();
    for (i, line) in lines.enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (user, hash) = line
            .split_once(':')
            .ok_or_else(|| format!("line {}: expected user:hash", i + 1))?;
        user_ok(user).map_err(|e| format!("line {}: {e}", i + 1))?;
        // NGINX ignores what follows a second colon (htpasswd comments).
        let hash = hash.split(':').next().unwrap_or_default();
        hash_ok(hash).map_err(|e| format!("line {} (user {user:?}): {e}", i + 1))?;
        out.push_str(user);
        out.push(':');
        out.push_str(hash);
        out.push('\n');
    }
    if out.is_empty() {
        return Err("no users".to_owned());
    }
    if out.len() > MAX_USERS_BYTES {
        return Err(format!("more than {MAX_USERS_BYTES} bytes of users"));
    }
    Ok(out)
}

fn user_ok(user: &str) -> Result<(), String> {
    if user.is_empty() || user.len() > 256 {
        return Err("a user name is 1 to 256 bytes".to_owned());
    }
    if user
        .chars()
        .any(|c| c.is_control() || c == ':' || c.is_whitespace())
    {
        return Err(format!(
            "user {user:?}: no spaces, colons or control characters"
        ));
    }
    Ok(())
}

/// The hash formats this NGINX's `auth_basic` verifies (glibc crypt with
/// libxcrypt, and NGINX's own schemes); each is checked against a real NGINX by
/// the integration tests.
fn hash_ok(hash: &str) -> Result<(), String> {
    let unknown = || {
        "the hash is not one of $apr1$, $1$, $5$, $6$, $2y$ (bcrypt), $y$ (yescrypt), \
         {SHA}, {SSHA}, {PLAIN} (htpasswd -B or openssl passwd -apr1 make one)"
            .to_owned()
    };
    const CRYPT: &[&str] = &["$apr1$", "$1$", "$5$", "$6$", "$2a$", "$2b$", "$2y$", "$y$"];
    const SCHEMES: &[&str] = &["{SHA}", "{SSHA}", "{PLAIN}"];
    let printable = hash.chars().all(|c| c.is_ascii_graphic());
    let Some(prefix) = CRYPT.iter().chain(SCHEMES).find(|p| hash.starts_with(**p)) else {
        return Err(unknown());
    };
    if !printable || hash.len() > 512 {
        return Err(unknown());
    }
    if hash.len() <= prefix.len() {
        return Err("the hash is incomplete".to_owned());
    }
    Ok(())
}

/// The users of an `auth-map` Secret: each key a user, its value the hash.
pub fn map_users<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> Result<String, String> {
    let lines: Vec<String> = entries
        .map(|(user, hash)| format!("{user}:{}", hash.trim()))
        .collect();
    htpasswd_users(lines.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn htpasswd_lines() {
        let check = |text: &str, want: Result<&str, &str>| {
            let got = htpasswd_users(text.lines());
            match (&got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{text:?}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "{text:?}: {g}"),
                _ => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        };
        check("a:$apr1$x$y\n", Ok("a:$apr1$x$y\n"));
        check(
            "# users\n\na:{PLAIN}p:comment\r\nb:$2y$05$abc\n",
            Ok("a:{PLAIN}p\nb:$2y$05$abc\n"),
        );
        check(
            "a:$6$salt$hash\nb:{SSHA}abc",
            Ok("a:$6$salt$hash\nb:{SSHA}abc\n"),
        );
        check("", Err("no users"));
        check("# only\n", Err("no users"));
        check("nocolon", Err("line 1: expected user:hash"));
        check(":{PLAIN}x", Err("line 1: a user name is 1 to 256 bytes"));
        check("a b:{PLAIN}x", Err("line 1: user \"a b\""));
        check(
            "a:abcdefghijklm",
            Err("line 1 (user \"a\"): the hash is not one of"),
        );
        check("a:$apr1$", Err("incomplete"));
        check("a:{SHA}", Err("incomplete"));
        check("a:$6$x y", Err("the hash is not one of"));
        check("ok:{PLAIN}x\nbad:plain", Err("line 2 (user \"bad\")"));
    }

    #[test]
    fn auth_maps() {
        let m = [("alice", "$apr1$s$h"), ("bob", " {SHA}abc ")];
        assert_eq!(
            map_users(m.into_iter()).unwrap(),
            "alice:$apr1$s$h\nbob:{SHA}abc\n"
        );
        assert!(map_users([("a:b", "{PLAIN}x")].into_iter()).is_err());
    }
}
