//! The daemon's two bearer tokens, checked at load and at each request.
//!
//! - The **API token** (`SHAREPLANE_API_TOKEN` or `api_token`): every gateway of the Region holds
//!   it, so it authorizes only what a gateway does, `POST /v1/demand`. `run` refuses to start
//!   without one; `validate` only says that it will be needed.
//! - The **admin token** (`SHAREPLANE_ADMIN_TOKEN` or `admin_token`, optional): the operator's.
//!   It alone authorizes what changes state beyond demand, `POST /v1/peers/{region}/abandon`.
//!   Without one, those endpoints answer 403 (closed), and the daemon says so once at start.
//!
//! Both are at least [`MIN_TOKEN_CHARS`] characters without spaces or control characters, and
//! they must differ: an admin token equal to the one every gateway holds protects nothing.

use axum::http::{header, HeaderMap};
use shareplane_core::ConfigError;

/// The environment variable that holds the admin token (preferred to `admin_token`).
pub const ENV_ADMIN_TOKEN: &str = "SHAREPLANE_ADMIN_TOKEN";
/// The shortest API or admin token accepted: anything shorter is guessable.
pub const MIN_TOKEN_CHARS: usize = 16;

fn problem(field: &str, what: String) -> ConfigError {
    ConfigError {
        field: field.to_owned(),
        problem: what,
    }
}

/// Why a token is not acceptable (`None`: it is).
fn flaw(t: &str) -> Option<String> {
    if t.chars().count() < MIN_TOKEN_CHARS {
        Some(format!("must be at least {MIN_TOKEN_CHARS} characters"))
    } else if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("must not contain spaces or control characters".to_string())
    } else {
        None
    }
}

/// The API token: optional in a file (`validate` and `limits` need none), required by `run`
/// ([`crate::config::require_api_token`]); when given, it must be a good one.
pub fn check_api_token(given: Option<&str>, errors: &mut Vec<ConfigError>) -> Option<String> {
    let token = given.filter(|t| !t.is_empty())?;
    match flaw(token) {
        Some(why) => {
            errors.push(problem("api_token", why));
            None
        }
        None => Some(token.to_string()),
    }
}

/// The admin token, optional; never equal to the API token as given.
pub fn check_admin_token(
    given: Option<&str>,
    api_token: Option<&str>,
    errors: &mut Vec<ConfigError>,
) -> Option<String> {
    let token = given.filter(|t| !t.is_empty())?;
    let why = match flaw(token) {
        Some(why) => why,
        None if api_token == Some(token) => format!(
            "must differ from the API token: every gateway holds that one, and the admin token \
             guards what gateways must not do (set {ENV_ADMIN_TOKEN} to a token of its own)"
        ),
        None => return Some(token.to_string()),
    };
    errors.push(problem("admin_token", why));
    None
}

/// The bearer token of a request (`Authorization: Bearer <token>`), if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Whether `got` is `want`, in time independent of where they differ.
pub fn same(got: &str, want: &str) -> bool {
    let (a, b) = (got.as_bytes(), want.as_bytes());
    let mut diff = a.len() ^ b.len();
    for (i, &x) in b.iter().enumerate() {
        diff |= usize::from(x ^ a.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(errors: &[ConfigError]) -> Vec<String> {
        errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn the_admin_token_is_optional_long_and_not_the_api_token() {
        let api = "0123456789abcdef";
        let mut errors = Vec::new();
        assert_eq!(check_admin_token(None, Some(api), &mut errors), None);
        assert_eq!(check_admin_token(Some(""), Some(api), &mut errors), None);
        let ok = check_admin_token(Some("fedcba9876543210"), Some(api), &mut errors);
        assert_eq!(ok.as_deref(), Some("fedcba9876543210"));
        assert!(errors.is_empty(), "{:?}", fields(&errors));
        for (given, why) in [
            ("short", "at least 16 characters"),
            ("fedcba98 76543210", "spaces"),
            (api, "must differ from the API token"),
        ] {
            let mut errors = Vec::new();
            assert_eq!(check_admin_token(Some(given), Some(api), &mut errors), None);
            let e = fields(&errors);
            assert!(
                e.len() == 1 && e[0].starts_with("admin_token: ") && e[0].contains(why),
                "{given:?}: {e:?}"
            );
        }
    }

    const FILE: &str = "region = \"A\"\nstore = \"memory\"\napi_token = \"0123456789abcdef\"\n\
                        [[regions]]\nname = \"A\"\n[[regions]]\nname = \"B\"\n\
                        [[limits]]\nid = \"k\"\nrate = 100\n";

    #[test]
    fn the_admin_token_comes_from_the_environment_first_and_is_reported_with_the_other_problems() {
        use std::collections::BTreeMap;
        let env = |v: &str| BTreeMap::from([(ENV_ADMIN_TOKEN.to_string(), v.to_string())]);
        let c = crate::config::parse(FILE, &BTreeMap::new()).map(|c| c.admin_token);
        assert_eq!(c.ok(), Some(None), "optional");
        let file = format!("admin_token = \"from-the-file-0000\"\n{FILE}");
        let c = crate::config::parse(&file, &env("from-the-env-00000")).map(|c| c.admin_token);
        assert_eq!(c.ok(), Some(Some("from-the-env-00000".to_string())));
        // Equal to the API token, next to another problem: both are reported.
        let bad = format!("period_ms = 1\n{FILE}");
        let e = crate::config::parse(&bad, &env("0123456789abcdef"))
            .err()
            .map(|e| e.0.into_iter().map(|p| p.field).collect::<Vec<_>>())
            .unwrap_or_default();
        assert!(
            e.iter().any(|f| f == "admin_token") && e.iter().any(|f| f == "period_ms"),
            "{e:?}"
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same("0123456789abcdef", "0123456789abcdef"));
        assert!(!same("0123456789abcde", "0123456789abcdef"));
        assert!(!same("0123456789abcdefX", "0123456789abcdef"));
        assert!(!same("", "0123456789abcdef"));
    }
}
