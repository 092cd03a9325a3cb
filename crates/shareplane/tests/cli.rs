//! The command line: `validate` accepts the example configuration and reports every problem of
//! a bad one at once, with its field, without touching the network.

use std::process::Command;

fn shareplane() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_shareplane"));
    c.env_remove("SHAREPLANE_CONFIG_TOML")
        .env_remove("SHAREPLANE_REGION")
        .env_remove("SHAREPLANE_API_TOKEN");
    c
}

#[test]
fn validate_accepts_the_example_configuration() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml");
    let out = shareplane()
        .args(["validate", example])
        .env("SHAREPLANE_API_TOKEN", "an-api-token-of-enough-length")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("region us-east-1, 3 Regions, 2 limits"),
        "{stdout}"
    );
    assert!(
        stdout.contains("gateway lease 7300 ms (reclaim possible after 10000 ms, margin 2700 ms)"),
        "{stdout}"
    );
}

#[test]
fn validate_and_run_refuse_a_period_too_short_for_a_gateway_lease() {
    let text = "region = \"A\"\nperiod_ms = 200\nstore = \"memory\"\n\
                api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\n\
                [[limits]]\nid = \"k\"\nrate = 100\n";
    for cmd in ["validate", "run"] {
        let out = shareplane()
            .args([cmd])
            .env("SHAREPLANE_CONFIG_TOML", text)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(
            stderr.contains("period_ms: is 200 ms: gateways would get a lease of")
                && stderr.contains("use at least 211 ms"),
            "{cmd}: {stderr}"
        );
    }
}

#[test]
fn validate_reports_every_problem_with_its_field() {
    let bad = "region = \"nowhere\"\nperiod_ms = 10\n[[regions]]\nname = \"A\"\n[[limits]]\nid = \"x\"\nrate = 1e300\n";
    let out = shareplane()
        .args(["validate"])
        .env("SHAREPLANE_CONFIG_TOML", bad)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for field in [
        "region:",
        "period_ms:",
        "table:",
        "api_token:",
        "limits[0].rate:",
        "regions[0].health_check_id:",
    ] {
        assert!(stderr.contains(field), "{field} missing in:\n{stderr}");
    }
}

#[test]
fn run_refuses_an_invalid_configuration_the_same_way() {
    let out = shareplane()
        .args(["run"])
        .env("SHAREPLANE_CONFIG_TOML", "region = 3\n")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid configuration"), "{stderr}");
}
