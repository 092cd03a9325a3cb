//! The conservation check: `Σ shares + Σ pools + Σ granted-not-taken = L`, exactly.
//!
//! Only an observer that sees every Region's true state (the simulator, a test, the model checker)
//! can run it; a Region alone cannot. The daemon uses the weaker "sum of shares it sees" alarm.

use crate::config::{Deployment, LimitKind, LimitSpec};
use crate::record::RegionRecord;

/// The room that should exist and the room that does, in milli-requests per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conservation {
    pub expected: i128,
    pub actual: i128,
}

impl Conservation {
    pub fn holds(&self) -> bool {
        self.expected == self.actual
    }
}

/// Checks conservation for limit `li`.
///
/// `estates` holds one record per `(Region, epoch)` whose room may still exist: every Region's
/// current record, and for an epoch that ended (the Region came back in a newer one, or is lost)
/// the record that the survivors act on (the version their reclaim marks name; before any
/// reclaim, the last one written). A record counts its share + pool − debt, less the portions
/// that other records say they reclaimed from it, plus the grants in flight between records whose
/// epochs name each other and whose account neither side has closed.
///
/// `expected` is the sum of each Region's static part of the rate at the limit version its
/// newest record has adopted, so the check also holds while a limit change is under way.
pub fn conservation(d: &Deployment, li: usize, estates: &[&RegionRecord]) -> Conservation {
    let n = d.n();
    let mut expected: i128 = 0;
    for r in crate::region::regions(n) {
        let newest = estates
            .iter()
            .filter(|e| e.region == r)
            .max_by_key(|e| (e.epoch, e.version));
        if let Some(rec) = newest {
            let Some(l) = rec.limits.get(li) else {
                continue;
            };
            let part = match d.limits.get(li).map(|s| s.kind) {
                Some(LimitKind::Security { .. }) => d
                    .limits
                    .get(li)
                    .map_or(crate::Room::ZERO, |s| s.security_share(n, r)),
                _ => LimitSpec::static_part(l.rate, n, r),
            };
            expected += part.0 as i128;
        }
    }
    let actual = estates.iter().map(|rec| remaining(li, rec, estates)).sum();
    Conservation { expected, actual }
}

/// The room one estate still accounts for: its share + pool − debt, less what others marked as
/// reclaimed from it, plus the grants it made that are in flight. Once the estate's epoch has
/// ended, this is 0 and every mark names its final version, nothing can change it any more and an
/// observer may stop listing it.
pub fn remaining(li: usize, rec: &RegionRecord, estates: &[&RegionRecord]) -> i128 {
    let Some(l) = rec.limits.get(li) else {
        return 0;
    };
    let mut room = l.held();
    for other in estates {
        if other.region == rec.region {
            continue;
        }
        if other.reclaims[rec.region].is_some_and(|m| m.epoch == rec.epoch) {
            room -= other
                .limits
                .get(li)
                .map_or(0, |o| o.reclaimed[rec.region].0 as i128);
        }
        room += in_flight(rec, other, li);
    }
    room
}

/// Room granted by `g` to `r` and not yet taken, when the two records belong to each other's
/// epochs and neither has closed the account by a reclaim.
pub fn in_flight(g: &RegionRecord, r: &RegionRecord, li: usize) -> i128 {
    if g.peer_epochs[r.region] != r.epoch || r.peer_epochs[g.region] != g.epoch {
        return 0;
    }
    if g.reclaims[r.region].is_some_and(|m| m.epoch == r.epoch)
        || r.reclaims[g.region].is_some_and(|m| m.epoch == g.epoch)
    {
        return 0;
    }
    let granted = g
        .limits
        .get(li)
        .map_or(0, |l| l.granted[r.region].0 as i128);
    let taken = r.limits.get(li).map_or(0, |l| l.taken[g.region].0 as i128);
    granted - taken
}
