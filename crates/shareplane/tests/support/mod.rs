//! What more than one test file needs: the local AWS endpoint.

/// The moto server tests/run-all.sh started (`SHAREPLANE_TEST_MOTO_URL`); `None` when there is
/// none, which fails the test instead where `SHAREPLANE_REQUIRE_SERVICES=1` (as in CI).
pub fn moto_url() -> Option<String> {
    match std::env::var("SHAREPLANE_TEST_MOTO_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() == Ok("1") => {
            panic!("SHAREPLANE_TEST_MOTO_URL is not set but SHAREPLANE_REQUIRE_SERVICES=1: start moto (tests/run-all.sh does)")
        }
        _ => None,
    }
}
