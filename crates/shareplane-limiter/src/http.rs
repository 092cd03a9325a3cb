//! What the watcher and the reporter share about talking to the daemon.

/// The largest rules body read (bytes): a rule set of [`crate::rules::MAX_LIMITS`] limits takes
/// about 9 MB.
pub const MAX_RULES_BODY: usize = 16 << 20;
/// The largest demand answer read (bytes).
pub const MAX_ANSWER_BODY: usize = 64 << 10;

/// A transport failure or an oversized body.
///
/// A transport failure reads with its causes ("error sending request for url (…): client error
/// (Connect): tcp connect error: Connection refused"), because reqwest's own message stops at
/// "error sending request" and an operator needs the last part.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("HTTP: {}", with_causes(.0))]
    Transport(reqwest::Error),
    #[error("response body above {0} bytes")]
    TooLarge(usize),
}

impl From<reqwest::Error> for HttpError {
    fn from(e: reqwest::Error) -> Self {
        HttpError::Transport(e)
    }
}

/// `e` and each of its sources, joined with ": " (a source whose text is already in the line is
/// left out).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

/// The path segments after the base that name the daemon's endpoints: a URL whose path has one
/// of them is an endpoint, not a base.
const ENDPOINT_SEGMENTS: [&str; 5] = ["v1", "healthz", "readyz", "metrics", "dashboard"];

/// The daemon's base URL from what an operator gave: the base itself (`http://host:8080`, or
/// `http://host:8080/regions/A` for one Region of the demo) or its rules endpoint
/// (`http://host:8080/v1/rules`, which the infra publishes as `rulesUrl`), trailing slashes
/// allowed. Anything else that cannot be a daemon's base (another endpoint such as `/v1/demand`,
/// a query, not http(s)) is refused with the reason, so that a mis-wired gateway stops at
/// start-up instead of never loading a rule set.
pub fn daemon_base_url(given: &str) -> Result<String, String> {
    let mut url = reqwest::Url::parse(given.trim())
        .map_err(|e| format!("{given:?} is not a URL ({e}); give the daemon's base URL, e.g. http://shareplane.internal:8080"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "{given:?} is not an http:// or https:// URL with a host"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{given:?} has a query or fragment; give the daemon's base URL (or …/v1/rules) without one"
        ));
    }
    let path = url.path().trim_end_matches('/');
    let path = path
        .strip_suffix("/v1/rules")
        .unwrap_or(path)
        .trim_end_matches('/')
        .to_owned();
    if let Some(seg) = path.split('/').find(|s| ENDPOINT_SEGMENTS.contains(s)) {
        return Err(format!(
            "{given:?} names a daemon endpoint (path segment {seg:?}), not the daemon's base; give \
             the base URL (http://host:port, as `shareplane run` listens) or its …/v1/rules"
        ));
    }
    url.set_path(&path);
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// [`daemon_base_url`] where no error can be returned: the base of a URL that names the rules
/// endpoint, or the URL without trailing slashes (its fetches then fail with the reason).
pub fn lenient_base_url(given: &str) -> String {
    daemon_base_url(given).unwrap_or_else(|_| given.trim_end_matches('/').to_owned())
}

/// An HTTP client for the daemon. This crate builds reqwest without TLS (loopback and in-VPC HTTP);
/// a gateway that talks to its daemon over TLS enables reqwest's `rustls-tls` feature.
pub fn client() -> Result<reqwest::Client, HttpError> {
    Ok(reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .pool_idle_timeout(std::time::Duration::from_secs(60))
        .build()?)
}

/// Reads a response body, refusing more than `cap` bytes.
pub async fn read_capped(mut resp: reqwest::Response, cap: usize) -> Result<Vec<u8>, HttpError> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(HttpError::TooLarge(cap));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Err(HttpError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_and_the_rules_endpoint_both_give_the_base() {
        for (given, base) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/v1/rules", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/v1/rules/", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080//v1/rules//", "http://127.0.0.1:8080"),
            (
                "https://api.a.example.com/v1/rules",
                "https://api.a.example.com",
            ),
            (
                "http://127.0.0.1:8080/regions/A",
                "http://127.0.0.1:8080/regions/A",
            ),
            (
                "http://127.0.0.1:8080/regions/A/v1/rules/",
                "http://127.0.0.1:8080/regions/A",
            ),
            (" http://h:1/v1/rules ", "http://h:1"),
        ] {
            assert_eq!(daemon_base_url(given).as_deref(), Ok(base), "{given:?}");
        }
    }

    #[test]
    fn what_cannot_be_a_daemon_is_refused_with_the_reason() {
        for (given, why) in [
            ("http://h:8080/v1/demand", "\"v1\""),
            ("http://h:8080/v1/state", "\"v1\""),
            ("http://h:8080/v1/rules/v1/rules", "\"v1\""),
            ("http://h:8080/v1/rules?after=3", "query"),
            ("http://h:8080/healthz", "\"healthz\""),
            ("http://h:8080/metrics/", "\"metrics\""),
            ("h:8080", "not an http"),
            ("redis://h:6379/", "not an http"),
            ("", "not a URL"),
        ] {
            let e = daemon_base_url(given).err().unwrap_or_default();
            assert!(e.contains(why), "{given:?}: {e:?}");
        }
        assert_eq!(lenient_base_url("http://h/v1/rules/"), "http://h");
        assert_eq!(
            lenient_base_url("http://h/v1/demand/"),
            "http://h/v1/demand"
        );
    }
}
