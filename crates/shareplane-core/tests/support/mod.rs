//! A small deterministic world for the core's tests: Regions, their coordinators, and records
//! delivered by hand. It is not the simulator; it only saves each test the set-up.

#![allow(dead_code)]

use shareplane_core::*;
use std::sync::Arc;

pub fn deployment(n: usize, policy: SilentPolicy, design: Design) -> Arc<Deployment> {
    let names = ["A", "B", "C", "D", "E", "F", "G", "H"];
    Arc::new(
        Deployment::try_new(Deployment {
            regions: names[..n].iter().map(|s| s.to_string()).collect(),
            limits: vec![LimitSpec {
                id: "k-big".into(),
                version: 1,
                rate: Room::rps(10_000),
                burst_ms: 2_000,
                floor: Room::rps(500),
                step_cap: Room::rps(1_000),
                kind: LimitKind::Capacity,
                shadow: false,
            }],
            design,
            policy,
            fence: Fence::OwnUnhealthy,
            silent_after: 3,
            period_ms: 5_000,
        })
        .expect("valid test deployment"),
    )
}

pub fn rid(i: usize) -> RegionId {
    RegionId::new(i).expect("region index")
}

/// Records at version 1 with the given shares and published demands (requests per second).
pub fn initial_records(d: &Deployment, shares: &[u64], demands: &[u64]) -> Vec<RegionRecord> {
    (0..d.n())
        .map(|i| {
            let mut r = RegionRecord::genesis(d, rid(i)).into_parts();
            r.version = 1;
            let l = &mut r.limits[0];
            l.share = Room::rps(shares[i]);
            l.target = l.share;
            l.demand = Room::rps(demands[i]);
            RegionRecord::from_parts(r)
        })
        .collect()
}

pub struct World {
    pub d: Arc<Deployment>,
    pub coords: Vec<Coordinator>,
    pub health: PerRegion<Health>,
    /// Every record each Region wrote (a commit counts as a durable write here).
    pub written: Vec<Vec<Arc<RegionRecord>>>,
    /// Regions that are lost: their daemon and gateways are gone (the audit counts their room as
    /// an estate, not as live room).
    pub lost: Vec<bool>,
}

impl World {
    pub fn new(d: Arc<Deployment>, records: Vec<RegionRecord>) -> World {
        let mut coords: Vec<Coordinator> = records
            .iter()
            .enumerate()
            .map(|(i, r)| Coordinator::new(d.clone(), rid(i), r.clone()))
            .collect();
        for c in coords.iter_mut() {
            for r in &records {
                if r.region() != c.me() {
                    c.observe(Arc::new(r.clone()))
                        .expect("valid initial record");
                }
            }
        }
        let mut health = PerRegion::default();
        for r in regions(d.n()) {
            health[r] = Health::Healthy;
        }
        let written = records.iter().map(|r| vec![Arc::new(r.clone())]).collect();
        let lost = vec![false; records.len()];
        World {
            d,
            coords,
            health,
            written,
            lost,
        }
    }

    /// Region `i` is lost: it stops, and its room is an estate for the audit.
    pub fn lose(&mut self, i: usize) {
        self.lost[i] = true;
    }

    /// Region `i`'s daemon starts again from its last record after `down_ms` (a new epoch if
    /// that is past the resume window) with the limits `limits`, and reads every peer's latest
    /// record. It is running again for the audit.
    pub fn restart(&mut self, i: usize, down_ms: u64, limits: Vec<LimitSpec>) {
        let own = self.coords[i].own().clone();
        let mut c = Coordinator::restart(self.d.clone(), rid(i), Some(own), down_ms);
        c.set_limits(limits).expect("valid limits");
        for (j, peer) in self.coords.iter().enumerate() {
            if j != i {
                c.observe(Arc::new(peer.own().clone()))
                    .expect("valid record");
            }
        }
        self.coords[i] = c;
        self.lost[i] = false;
    }

    /// Room the running Regions hold (share + pool − debt of each committed record): what their
    /// gateways enforce now or may raise to without a grant.
    pub fn live_room(&self) -> Delta {
        (0..self.coords.len())
            .filter(|&i| !self.lost[i])
            .map(|i| self.coords[i].own().limits()[0].held())
            .sum()
    }

    /// Region `i` rebalances with `demand_rps`, commits, and returns the decision.
    pub fn rebalance(&mut self, i: usize, demand_rps: f64) -> Decision {
        let demand = [Room::from_rps(demand_rps).expect("demand")];
        let decision = self.coords[i].rebalance(&Inputs {
            now_ms: 0,
            demand: &demand,
            health: &self.health,
            explain: true,
        });
        assert_eq!(
            decision.alarms.not_conserved,
            vec![],
            "Region {i}: a step changed the room it moves"
        );
        self.coords[i].commit(&decision);
        self.written[i].push(Arc::new(decision.record.clone()));
        decision
    }

    /// Makes Region `from`'s committed record visible to Region `to`.
    pub fn deliver(&mut self, from: usize, to: usize) {
        let rec = Arc::new(self.coords[from].own().clone());
        self.coords[to].observe(rec).expect("valid record");
    }

    /// Makes Region `from`'s record visible to every other Region.
    pub fn publish(&mut self, from: usize) {
        for to in 0..self.coords.len() {
            if to != from {
                self.deliver(from, to);
            }
        }
    }

    pub fn share(&self, i: usize) -> Room {
        self.coords[i].own().limits()[0].share()
    }

    pub fn sum_shares(&self) -> Room {
        (0..self.coords.len()).map(|i| self.share(i)).sum()
    }

    /// The physical audit over everything written and every Region that is not lost.
    pub fn conservation(&self) -> Audit {
        let truth: Vec<Truth<'_>> = self
            .coords
            .iter()
            .enumerate()
            .map(|(i, c)| Truth {
                written: &self.written[i],
                running: (!self.lost[i]).then(|| c.own()),
            })
            .collect();
        audit(&self.d, 0, &truth)
    }
}

/// Whole requests per second, rounded, for readable expectations.
pub fn rps(r: Room) -> f64 {
    (r.as_rps() * 10.0).round() / 10.0
}
