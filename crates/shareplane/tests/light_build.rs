//! The README's first command, `cargo run -p shareplane --no-default-features -- demo`, builds
//! no AWS crate (issue 34: with the AWS SDK a first run took 16 min 51 s on a busy 2-core
//! machine), while a build with the default features (every production build: infra/Dockerfile,
//! tests/run-all.sh, tests/e2e) keeps the SDK. A binary built without it validates a DynamoDB
//! configuration with a note and refuses to run it, or to reach its table, at once (exit 2).
//!
//! tests/run-all.sh runs this file in both builds (`--no-default-features` too).

use std::collections::BTreeSet;
use std::process::Command;

/// The README's first command: the demo, built without the `aws` feature.
const DEMO: &str = "cargo run -p shareplane --no-default-features -- demo";

/// The packages `cargo tree` lists for the `shareplane` package with `flags`: what
/// `cargo build -p shareplane FLAGS` compiles (normal and build dependencies, this platform).
fn packages(flags: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "-p", "shareplane", "-e", "normal,build"])
        .args([
            "--prefix",
            "none",
            "--format",
            "{p}",
            "--locked",
            "--offline",
        ])
        .args(flags)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot start cargo tree: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo tree {flags:?}: {stderr}");
    // Lines are "name v1.2.3 (path)" and, for a package shown before, "name v1.2.3 (*)".
    (stdout.lines())
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn is_aws(package: &str) -> bool {
    package.starts_with("aws-") || package == "shareplane-aws"
}

#[test]
fn the_readme_demo_builds_no_aws_crate_and_production_builds_keep_them() {
    let readme = include_str!("../../../README.md");
    let first = readme.lines().find(|l| l.starts_with("cargo "));
    assert_eq!(first, Some(DEMO), "the README's first command");

    let light = packages(&["--no-default-features"]);
    let aws: Vec<&String> = light.iter().filter(|p| is_aws(p)).collect();
    assert!(aws.is_empty(), "{DEMO} builds {aws:?}");
    // The tree is the demo's real one: what the demo and the gateway run on is in it.
    for p in [
        "shareplane",
        "shareplane-store",
        "shareplane-gateway",
        "tokio",
        "axum",
    ] {
        assert!(light.contains(p), "{p} missing from {light:?}");
    }

    let production = packages(&[]);
    for p in [
        "shareplane-aws",
        "aws-sdk-dynamodb",
        "aws-sdk-cloudwatch",
        "aws-config",
    ] {
        assert!(production.contains(p), "the default build lacks {p}");
    }
}

fn shareplane() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_shareplane"));
    for var in [
        "SHAREPLANE_CONFIG_TOML",
        "SHAREPLANE_REGION",
        "SHAREPLANE_API_TOKEN",
        "SHAREPLANE_AWS_ENDPOINT",
    ] {
        c.env_remove(var);
    }
    c
}

/// Exit code, stdout and stderr of `shareplane ARGS`.
fn output(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = shareplane()
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot start shareplane: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// With AWS built in (the default) `validate` accepts a DynamoDB configuration as it is; built
/// without it, `validate` accepts it with a note, and `run` and `limits show` refuse it with
/// exit 2 before they start anything (no listener, no log set-up), saying how to build AWS in.
#[test]
fn a_build_without_aws_refuses_a_dynamodb_configuration_at_once_and_says_why() {
    let dir = std::env::temp_dir().join(format!("shareplane-light-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("a.toml");
    let text = "region = \"A\"\nstore = \"dynamodb\"\ntable = \"t\"\nlisten = \"127.0.0.1:0\"\n\
                api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\n\
                health_check_id = \"hc-a\"\n[[limits]]\nid = \"k\"\nrate = 100\n";
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
    let f = file.as_os_str();
    let why = "needs AWS support";

    let (code, stdout, stderr) = output(&["validate".as_ref(), f]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("configuration is valid"), "{stdout}");
    assert_eq!(stdout.contains(why), !shareplane::WITH_AWS, "{stdout}");
    if shareplane::WITH_AWS {
        // Running it reaches AWS: tests/dynamodb.rs and tests/e2e do that against moto.
        return;
    }
    for args in [
        vec!["run".as_ref(), "--config".as_ref(), f],
        vec!["limits".as_ref(), "show".as_ref(), "--config".as_ref(), f],
    ] {
        let (code, stdout, stderr) = output(&args);
        assert_eq!(code, Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
        assert!(stderr.contains("--no-default-features"), "{stderr}");
        assert!(stderr.contains("cargo build -p shareplane"), "{stderr}");
        assert!(!stderr.contains("serving"), "{args:?} started: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
