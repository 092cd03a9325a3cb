//! Codec cost for 10,000 limits × 3 Regions: item bytes, items and write units per Region per
//! 5-second period, replicated write units, and encode/decode time. Prints figures; asserts none.
//!
//! Run: `cargo bench -p shareplane-aws --bench codec`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

#[path = "../tests/support/mod.rs"]
mod support;

use shareplane_aws::codec::{self, Item};
use shareplane_core::{Deployment, RegionRecord};
use std::time::Instant;

const LIMITS: usize = 10_000;
const REGIONS: usize = 3;
const PERIOD_S: u64 = 5;

fn wcu(bytes: usize) -> usize {
    bytes.div_ceil(1024).max(1)
}

/// The items of a full write, and the header alone.
fn items(d: &Deployment, r: &RegionRecord) -> (Vec<Item>, Item) {
    let enc = codec::encode(d, r);
    let shards = (0..enc.shards.len())
        .filter_map(|i| enc.shard_item(i, 1))
        .collect();
    let header = enc.header_item(1, &vec![r.version(); enc.shards.len()]);
    (shards, header)
}

/// Shards whose bytes differ after `changed` limits (spread evenly) change their demand.
fn changed_shards(d: &Deployment, r: &RegionRecord, changed: usize) -> usize {
    let before = codec::encode(d, r);
    let mut next = r.to_parts();
    next.version += 1;
    let step = (LIMITS / changed.max(1)).max(1);
    for i in (0..LIMITS).step_by(step).take(changed) {
        if next.limits[i].limit_version != 0 {
            next.limits[i].demand += shareplane_core::Room::from_milli(1);
        }
    }
    let after = codec::encode(d, &RegionRecord::from_parts(next));
    after
        .shards
        .iter()
        .zip(&before.shards)
        .filter(|(a, b)| a != b)
        .count()
}

fn main() {
    let d = support::deployment(LIMITS);
    let records: Vec<RegionRecord> = (0..REGIONS)
        .map(|r| support::record(&d, r, 1_000))
        .collect();
    let (shards, header) = items(&d, &records[0]);
    let shard_bytes: Vec<usize> = shards.iter().map(codec::item_bytes).collect();
    let header_bytes = codec::item_bytes(&header);
    let total_bytes: usize = shard_bytes.iter().sum::<usize>() + header_bytes;
    let item_count = shards.len() + 1;
    let avg_shard = total_bytes / item_count;
    println!(
        "codec cost, {LIMITS} limits x {REGIONS} Regions (schema {}):",
        codec::SCHEMA_VERSION
    );
    println!(
        "  item bytes per Region          {total_bytes} ({:.1} bytes per limit)",
        total_bytes as f64 / LIMITS as f64
    );
    println!(
        "  items per Region               {item_count} (1 header + {} shards of {} limits)",
        shards.len(),
        codec::LIMITS_PER_SHARD
    );
    println!(
        "  largest item                   {} bytes (limit 409600)",
        shard_bytes
            .iter()
            .max()
            .copied()
            .unwrap_or(0)
            .max(header_bytes)
    );
    println!(
        "  items per limit per Region     {:.4} (1/{:.0})",
        item_count as f64 / LIMITS as f64,
        LIMITS as f64 / item_count as f64
    );
    println!("  write units per Region per {PERIOD_S} s (1 WCU per started KB per item, transactions x2):");
    for (what, changed) in [
        ("every limit changed (busy)", LIMITS),
        ("100 limits changed", 100),
        ("10 limits changed", 10),
        ("no limit changed (quiet)", 0),
    ] {
        let shards_written = if changed == LIMITS {
            shards.len()
        } else {
            changed_shards(&d, &records[0], changed)
        };
        let units = if changed == LIMITS {
            2 * (wcu(header_bytes) + shard_bytes.iter().map(|b| wcu(*b)).sum::<usize>())
        } else {
            2 * (wcu(header_bytes) + shards_written * wcu(avg_shard))
        };
        let replicated = REGIONS * (units + (REGIONS - 1) * units / 2);
        println!(
            "    {what:<28} {shards_written:>3} shards  {units:>5} WCU in the writing Region; {replicated:>6} replicated WCU across {REGIONS} Regions ({:.0} per second)",
            replicated as f64 / PERIOD_S as f64
        );
    }
    let read_rcu = (REGIONS * total_bytes).div_ceil(4096) as f64 / 2.0;
    println!("  read units per Region per {PERIOD_S} s  {read_rcu} RCU (eventually consistent Query of all {REGIONS} Regions)");

    let iterations = 20;
    let t = Instant::now();
    let mut encoded = Vec::new();
    for _ in 0..iterations {
        encoded = records.iter().map(|r| items(&d, r)).collect::<Vec<_>>();
    }
    let encode_ms = t.elapsed().as_secs_f64() * 1e3 / iterations as f64;
    let all: Vec<Vec<Item>> = encoded
        .into_iter()
        .map(|(mut s, h)| {
            s.push(h);
            s
        })
        .collect();
    let t = Instant::now();
    let mut ok = 0;
    for _ in 0..iterations {
        for (r, items) in all.iter().enumerate() {
            let me = support::rid((r + 1) % REGIONS);
            if matches!(
                codec::decode(&d, me, support::rid(r), items),
                codec::Decoded::Record(_)
            ) {
                ok += 1;
            }
        }
    }
    let decode_ms = t.elapsed().as_secs_f64() * 1e3 / iterations as f64;
    println!("  encode, 3 Regions into items   {encode_ms:.2} ms");
    println!(
        "  decode + validate, 3 Regions   {decode_ms:.2} ms ({ok} of {} decodes gave a record)",
        iterations * REGIONS
    );
}
