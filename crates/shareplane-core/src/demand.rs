//! The demand deadband: which demand a Region publishes (and targets with) at a rebalance.
//!
//! A Region's target is `floor + rest × demand_i / Σ demand`, so every wobble of a measured
//! demand moves every Region's target, share and rule set a little, and every gateway refetches
//! the whole rule set for nothing. So a Region keeps the demand it last published until the
//! measured demand leaves a band around it:
//!
//! `|measured − published| ≤ max(published × 1%, rate × 0.1%)` → keep `published`.
//!
//! The band acts on the demand *input* of the target only. Everything after it is unchanged: a
//! target below the share still lowers the share at once, and a lowered share is still pushed
//! before the record is written, so the band never delays a lowering that a target asks for.
//! Conservation and `Σ shares ≤ L` hold for any demand, so the band cannot weaken them. What it
//! costs is accuracy: the published demand is within the band of the measured one (1%, or 0.1%
//! of the rate for small demands), so a target's demand-proportional part can be off by about
//! twice that (this Region's demand held high while a peer's is held low). docs/PROTOCOL.md
//! ("Demand") states it for operators.
//!
//! Pure arithmetic: no clock, no state. It filters *measurement* noise, so the daemon applies it
//! to the demand it measured before it hands that demand to [`crate::Coordinator::rebalance`],
//! with the demand of the Region's last committed record as `previous`. The simulator does not:
//! its fluid demand has no noise, and its liveness check (every share within 1% of the exact
//! target) would otherwise have to allow for the band.

use crate::room::Room;

/// The band relative to the published demand, in per mille (10 ‰ = 1%).
pub const DEMAND_BAND_PERMILLE: u64 = 10;
/// The least band, in per mille of the limit's rate: demands that are tiny against the rate
/// (an idle limit's stray requests) do not move targets either.
pub const DEMAND_BAND_MIN_PERMILLE_OF_RATE: u64 = 1;

/// The demand to publish: `previous` (the demand in the Region's last record) while `measured`
/// stays within the band around it, else `measured`.
pub fn published_demand(previous: Room, measured: Room, rate: Room) -> Room {
    if measured.milli().abs_diff(previous.milli()) <= band(previous, rate).milli() {
        previous
    } else {
        measured
    }
}

/// The half-width of the band around `published` for a limit of `rate`.
pub fn band(published: Room, rate: Room) -> Room {
    let rel = published.mul_div(DEMAND_BAND_PERMILLE, 1_000);
    let min = rate.mul_div(DEMAND_BAND_MIN_PERMILLE_OF_RATE, 1_000);
    if rel > min {
        rel
    } else {
        min
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Room = Room::from_milli(10_000_000); // 10,000/s

    #[test]
    fn noise_within_one_percent_keeps_the_published_demand() {
        let p = Room::rps(7_200);
        for m in [7_200, 7_130, 7_272, 7_128] {
            assert_eq!(published_demand(p, Room::rps(m), L), p, "measured {m}");
        }
    }

    #[test]
    fn a_change_beyond_the_band_is_published_either_way() {
        let p = Room::rps(7_200);
        assert_eq!(published_demand(p, Room::rps(7_273), L), Room::rps(7_273));
        assert_eq!(published_demand(p, Room::rps(7_127), L), Room::rps(7_127));
        assert_eq!(published_demand(p, Room::ZERO, L), Room::ZERO);
    }

    #[test]
    fn small_demands_move_only_beyond_a_thousandth_of_the_rate() {
        // 0.1% of 10,000/s is 10/s.
        assert_eq!(published_demand(Room::ZERO, Room::rps(10), L), Room::ZERO);
        assert_eq!(
            published_demand(Room::ZERO, Room::rps(11), L),
            Room::rps(11)
        );
        assert_eq!(
            published_demand(Room::rps(50), Room::rps(41), L),
            Room::rps(50)
        );
        assert_eq!(
            published_demand(Room::rps(50), Room::rps(39), L),
            Room::rps(39)
        );
    }

    #[test]
    fn the_published_demand_is_always_within_the_band_of_the_measured_one() {
        // Slow drift: each step is small, but the published value never falls behind the band.
        let mut p = Room::rps(1_000);
        for step in 0..400u64 {
            let m = Room::from_milli(1_000_000 + step * 2_500); // +2.5/s per rebalance
            p = published_demand(p, m, L);
            assert!(
                m.milli().abs_diff(p.milli()) <= band(p, L).milli(),
                "step {step}: {p} vs {m}"
            );
        }
    }

    #[test]
    fn arithmetic_does_not_overflow_at_the_largest_rates() {
        let max = Room::from_milli(u64::MAX);
        assert_eq!(published_demand(max, Room::ZERO, max), Room::ZERO);
        assert_eq!(
            published_demand(max, Room::from_milli(u64::MAX - 1), max),
            max
        );
        assert_eq!(published_demand(Room::ZERO, max, L), max);
    }
}
