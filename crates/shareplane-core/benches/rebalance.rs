//! Rebalance throughput and state size: `cargo bench -p shareplane-core --bench rebalance`.
//!
//! Prints limit-rebalances per second (one Region rebalancing every limit it has, with every peer
//! record visible) for 3 and 8 Regions at 100,000 limits, and the bytes of core state per limit.
//! Asserts nothing: the figures are for people to read.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_core::*;
use std::sync::Arc;
use std::time::Instant;

const LIMITS: usize = 100_000;

fn deployment(n: usize) -> Arc<Deployment> {
    let names = ["A", "B", "C", "D", "E", "F", "G", "H"];
    let limits = (0..LIMITS)
        .map(|i| LimitSpec {
            id: format!("partner-{i}"),
            version: 1,
            rate: Room::rps(1_000 + (i as u64 % 97) * 100),
            burst_ms: 2_000,
            floor: Room::rps(10),
            step_cap: Room::rps(100),
            kind: LimitKind::Capacity,
            shadow: false,
        })
        .collect();
    Arc::new(
        Deployment::try_new(Deployment {
            regions: names[..n].iter().map(|s| s.to_string()).collect(),
            limits,
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: Fence::OwnUnhealthy,
            silent_after: 3,
            period_ms: 5_000,
        })
        .expect("valid"),
    )
}

fn run(n: usize) {
    let d = deployment(n);
    let mut coords: Vec<Coordinator> = (0..n)
        .map(|i| Coordinator::genesis(d.clone(), RegionId::new(i).expect("id")))
        .collect();
    let mut health = PerRegion::default();
    for r in regions(n) {
        health[r] = Health::Healthy;
    }
    // Demands differ per Region and limit, so shares move and grants flow.
    let demands: Vec<Vec<Room>> = (0..n)
        .map(|r| {
            (0..LIMITS)
                .map(|l| Room::rps(((l * 7 + r * 13) % 50) as u64 * 40))
                .collect()
        })
        .collect();
    let rounds = 6;
    let mut elapsed = 0.0;
    let mut done = 0u64;
    for _ in 0..rounds {
        for i in 0..n {
            let t = Instant::now();
            let decision = coords[i].rebalance(&Inputs {
                now_ms: 0,
                demand: &demands[i],
                health: &health,
                explain: false,
            });
            coords[i].commit(&decision);
            elapsed += t.elapsed().as_secs_f64();
            done += LIMITS as u64;
            let rec = Arc::new(coords[i].own().clone());
            for (j, c) in coords.iter_mut().enumerate() {
                if j != i {
                    c.observe(rec.clone()).expect("valid record");
                }
            }
        }
    }
    let per_limit_record = std::mem::size_of::<LimitRecord>();
    println!(
        "{n} Regions x {LIMITS} limits: {:.2} M limit-rebalances/s on one core ({:.1} ms per Region rebalance)",
        done as f64 / elapsed / 1e6,
        elapsed * 1e3 / (rounds * n) as f64
    );
    println!(
        "  state: {per_limit_record} bytes per limit in a Region's record; a daemon holds its own and {} peers' records: {} bytes per limit per daemon",
        n - 1,
        per_limit_record * n
    );
}

fn main() {
    run(3);
    run(8);
}
