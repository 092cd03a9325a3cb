//! What the watcher and the reporter share about talking to the daemon.

/// The largest rules body read (bytes): a rule set of [`crate::rules::MAX_LIMITS`] limits takes
/// about 9 MB.
pub const MAX_RULES_BODY: usize = 16 << 20;
/// The largest demand answer read (bytes).
pub const MAX_ANSWER_BODY: usize = 64 << 10;

/// A transport failure or an oversized body.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("HTTP: {0}")]
    Transport(#[from] reqwest::Error),
    #[error("response body above {0} bytes")]
    TooLarge(usize),
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
