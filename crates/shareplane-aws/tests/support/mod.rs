//! Shared test fixtures: deployments, valid records, and the local AWS endpoint (moto).

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)
#![allow(dead_code)]

use shareplane_aws::client::{self, CallLimits, Endpoint};
use shareplane_core::{
    Deployment, Design, Fence, LimitKind, LimitRecordParts, LimitSpec, ReclaimMarkParts, RegionId,
    RegionRecord, RegionRecordParts, Room, SilentPolicy,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const REGIONS: [&str; 3] = ["us-east-1", "eu-west-1", "ap-southeast-2"];

/// A deployment of three Regions and `limits` capacity limits (`tenant-00042/api`…).
pub fn deployment(limits: usize) -> Arc<Deployment> {
    let limits = (0..limits)
        .map(|i| LimitSpec {
            id: format!("tenant-{i:05}/api"),
            version: 1 + (i as u64 % 3),
            rate: Room::rps(1_000 + i as u64),
            burst_ms: 1_000,
            floor: Room::rps(1),
            step_cap: Room::rps(100),
            kind: LimitKind::Capacity,
            shadow: false,
        })
        .collect();
    let d = Deployment {
        regions: REGIONS.iter().map(|s| s.to_string()).collect(),
        limits,
        design: Design::NamedGrants,
        policy: SilentPolicy::TwoSignals,
        fence: Fence::OwnUnhealthy,
        silent_after: 3,
        period_ms: 5_000,
    };
    Arc::new(Deployment::try_new(d).expect("test deployment is invalid"))
}

pub fn rid(i: usize) -> RegionId {
    RegionId::new(i).unwrap_or_else(|| panic!("Region index {i}"))
}

/// A record of `region` at `version` that passes validation, with varied amounts in every field
/// (every 7th limit unadopted) so that a lossy codec cannot round-trip it by accident.
pub fn record(d: &Deployment, region: usize, version: u64) -> RegionRecord {
    RegionRecord::from_parts(parts(d, region, version))
}

/// The parts of [`record`], for a test to change before it builds the record.
pub fn parts(d: &Deployment, region: usize, version: u64) -> RegionRecordParts {
    let me = rid(region);
    let mut r = RegionRecord::genesis(d, me).into_parts();
    r.epoch = 2 + region as u64;
    r.version = version;
    r.written_at_ms = 1_700_000_000_000 + version * 5_000;
    r.fenced = version % 2 == 1;
    for p in 0..d.n() {
        r.peer_epochs.0[p] = 1 + ((p + region) as u64 % 2);
        r.account_epochs.0[p] = 1 + ((p * 3 + region) as u64 % 2);
    }
    let victim = (region + 1) % d.n();
    r.reclaims.0[victim] = Some(ReclaimMarkParts {
        epoch: 1,
        version: 40 + version,
        by: 1,
    });
    for (i, (l, spec)) in r.limits.iter_mut().zip(&d.limits).enumerate() {
        if i % 7 == 3 {
            *l = LimitRecordParts::default();
            continue;
        }
        let k = (i as u64 * 7919 + version * 104_729 + region as u64 * 31) % 1_000_003;
        let rate = spec.rate.milli();
        l.limit_version = spec.version;
        l.rate = spec.rate;
        l.demand = Room::from_milli(k * 3 + version);
        l.share = Room::from_milli(k % (rate / 2));
        l.target = Room::from_milli((k * 13) % rate);
        l.unmet = Room::from_milli(l.target.milli().saturating_sub(l.share.milli()));
        l.pool = Room::from_milli((k * 5) % 10_000);
        l.debt = Room::from_milli(if i % 11 == 0 { k % 500 } else { 0 });
        for p in 0..d.n() {
            if p != region {
                l.granted.0[p] = Room::from_milli(k * (p as u64 + 1) + version * 1_000_000);
                l.taken.0[p] = Room::from_milli(k / (p as u64 + 2));
                l.reclaimed.0[p] = Room::from_milli(if p == victim { k % 77 } else { 0 });
                l.debt_taken.0[p] = Room::from_milli(if p == victim { k % 13 } else { 0 });
                l.left.0[p] = Room::from_milli(if p == victim { k % 31 } else { 0 });
            }
        }
    }
    r
}

/// Moves `r` to `epoch`, keeping every account in an epoch its writer had.
pub fn set_epoch(r: &mut RegionRecordParts, epoch: u64) {
    r.epoch = epoch;
    for e in r.account_epochs.0.iter_mut().filter(|e| **e > epoch) {
        *e = epoch;
    }
}

/// Region 0's record at `version` in `epoch`, whose previous epoch ended at `prev_final`.
pub fn owner_at(d: &Deployment, epoch: u64, version: u64, prev_final: u64) -> RegionRecord {
    let mut r = parts(d, 0, version);
    set_epoch(&mut r, epoch);
    r.prev_final = prev_final;
    RegionRecord::from_parts(r)
}

/// Heir `region`'s record at `version`: it accounts with Region 0's epoch `acct` and marks its
/// epoch `mark` (at version `at`) as closed.
pub fn heir_at(
    d: &Deployment,
    region: usize,
    version: u64,
    acct: u64,
    mark: (u64, u64),
) -> RegionRecord {
    let mut r = parts(d, region, version);
    r.peer_epochs.0[0] = acct;
    r.reclaims.0[0] = Some(ReclaimMarkParts {
        epoch: mark.0,
        version: mark.1,
        by: r.epoch,
    });
    RegionRecord::from_parts(r)
}

/// The moto endpoint, or `None` (after saying so) when it is not configured and not required.
pub fn moto_url(test: &str) -> Option<String> {
    match std::env::var("SHAREPLANE_TEST_MOTO_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!(
                    "{test}: SHAREPLANE_TEST_MOTO_URL is not set but SHAREPLANE_REQUIRE_SERVICES=1; \
                     run tests/run-all.sh, or start moto_server and export its URL"
                );
            }
            eprintln!("{test}: SHAREPLANE_TEST_MOTO_URL is not set; this test did nothing");
            None
        }
    }
}

/// SDK configuration for moto, with short bounds.
pub async fn moto_config(url: &str) -> aws_config::SdkConfig {
    let limits = CallLimits {
        operation_timeout: std::time::Duration::from_secs(30),
        ..CallLimits::default()
    };
    client::sdk_config(
        &Endpoint::Local {
            url: url.to_string(),
            region: "eu-west-1".into(),
        },
        limits,
    )
    .await
}

/// A name no other test (or earlier run against the same server) uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
