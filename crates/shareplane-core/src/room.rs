//! Exact amounts of room.
//!
//! Room is counted in milli-requests per second as an unsigned integer, so that conservation
//! (`Σ shares + Σ pools + Σ grants in flight = L`) holds to the last unit rather than to within a
//! floating-point epsilon. Proportional splits use largest-remainder rounding ([`split`]), which
//! always hands out exactly the amount it was given. A difference of amounts that may rightly be
//! negative (what an estate leaves, an heir's part of a debt, the audit's pieces) is a [`Delta`].

use std::fmt;
use std::ops::{Add, AddAssign, Neg, Sub, SubAssign};

/// Units of room per request per second.
pub const MILLI_PER_RPS: u64 = 1_000;

/// The largest rate a limit may have: 10^12 requests per second keeps every sum of eight Regions'
/// cumulative counters far from `u64::MAX`.
pub const MAX_RATE_RPS: f64 = 1e12;

/// An amount of rate (or room) in milli-requests per second.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Room(u64);

/// Why a number from outside could not become [`Room`].
#[derive(Debug, Clone, PartialEq)]
pub enum RoomError {
    NotFinite,
    Negative,
    TooLarge,
}

impl fmt::Display for RoomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoomError::NotFinite => write!(f, "is not a finite number"),
            RoomError::Negative => write!(f, "is negative"),
            RoomError::TooLarge => write!(f, "is larger than {MAX_RATE_RPS} requests per second"),
        }
    }
}

impl std::error::Error for RoomError {}

impl Room {
    pub const ZERO: Room = Room(0);

    /// An exact amount in milli-requests per second (the codec's and the tests' constructor).
    pub const fn from_milli(milli: u64) -> Room {
        Room(milli)
    }

    /// Parses a rate given in requests per second, rounding to the nearest milli-request.
    pub fn from_rps(rps: f64) -> Result<Room, RoomError> {
        if !rps.is_finite() {
            return Err(RoomError::NotFinite);
        }
        if rps < 0.0 {
            return Err(RoomError::Negative);
        }
        if rps > MAX_RATE_RPS {
            return Err(RoomError::TooLarge);
        }
        Ok(Room((rps * MILLI_PER_RPS as f64).round() as u64))
    }

    /// A whole number of requests per second (for constants and tests).
    pub const fn rps(rps: u64) -> Room {
        Room(rps * MILLI_PER_RPS)
    }

    pub fn as_rps(self) -> f64 {
        self.0 as f64 / MILLI_PER_RPS as f64
    }

    /// The amount in milli-requests per second.
    pub const fn milli(self) -> u64 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// How far `self` is past `other`: `self − other`, or zero when `other` is larger.
    ///
    /// For a difference that may rightly be negative and then means "nothing": how much more a
    /// target asks than a share, how much of a peer's counter this Region has not taken yet
    /// (a peer's record may lag behind this Region's own count). Where the protocol knows that
    /// `other ≤ self`, write `self - other`, which is exact (see [`Sub`]).
    pub fn excess_over(self, other: Room) -> Room {
        Room(self.0.saturating_sub(other.0))
    }

    pub fn checked_sub(self, other: Room) -> Option<Room> {
        self.0.checked_sub(other.0).map(Room)
    }

    pub fn checked_add(self, other: Room) -> Option<Room> {
        self.0.checked_add(other.0).map(Room)
    }

    /// `self × num / den` rounded down, computed without overflow.
    pub fn mul_div(self, num: u64, den: u64) -> Room {
        if den == 0 {
            return Room::ZERO;
        }
        Room((self.0 as u128 * num as u128 / den as u128) as u64)
    }
}

// Room moves; it is never created or destroyed by rounding. The operators are exact: an overflow
// or a subtraction below zero is a bug in the protocol's arithmetic. A debug build (every test,
// the fuzzer's debug runs, the model checker) stops there, at the line that did it. A release
// build never panics on it (a daemon must not fall over on a peer's record): the result clamps,
// and the core's per-step room check (`Alarms::not_conserved`) names the step that changed the
// room, which the daemon logs as an error and the fuzzer fails on.

impl Add for Room {
    type Output = Room;
    fn add(self, other: Room) -> Room {
        debug_assert!(
            self.0.checked_add(other.0).is_some(),
            "room overflow: {self:?} + {other:?}"
        );
        Room(self.0.saturating_add(other.0))
    }
}

impl AddAssign for Room {
    fn add_assign(&mut self, other: Room) {
        *self = *self + other;
    }
}

impl Sub for Room {
    type Output = Room;
    fn sub(self, other: Room) -> Room {
        debug_assert!(other <= self, "room below zero: {self:?} - {other:?}");
        Room(self.0.saturating_sub(other.0))
    }
}

impl SubAssign for Room {
    fn sub_assign(&mut self, other: Room) {
        *self = *self - other;
    }
}

impl std::iter::Sum for Room {
    fn sum<I: Iterator<Item = Room>>(iter: I) -> Room {
        iter.fold(Room::ZERO, |a, b| a + b)
    }
}

impl fmt::Debug for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / MILLI_PER_RPS;
        let frac = self.0 % MILLI_PER_RPS;
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            write!(f, "{whole}.{frac:03}")
        }
    }
}

/// A signed amount of room in milli-requests per second: a difference of [`Room`]s that may rightly
/// be negative (what an estate leaves when it is in debt, an heir's part of that debt, the audit's
/// pieces). Its operators are exact i128 arithmetic; it becomes [`Room`] again only through
/// [`Delta::clamp_to_room`] or [`Delta::magnitude`], which say how they treat a negative amount.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Delta(i128);

impl Delta {
    pub const ZERO: Delta = Delta(0);

    /// An amount of room as a (non-negative) delta.
    pub const fn of(room: Room) -> Delta {
        Delta(room.0 as i128)
    }

    /// A signed amount in milli-requests per second (for tests and sums kept as numbers).
    pub const fn from_milli(milli: i128) -> Delta {
        Delta(milli)
    }

    /// The signed amount in milli-requests per second.
    pub const fn milli(self) -> i128 {
        self.0
    }

    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    pub const fn is_positive(self) -> bool {
        self.0 > 0
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The amount as room: zero when negative, `u64::MAX` milli when larger than room can be.
    pub fn clamp_to_room(self) -> Room {
        Room(self.0.clamp(0, u64::MAX as i128) as u64)
    }

    /// The size of the amount whatever its sign, as room (`u64::MAX` milli at most).
    pub fn magnitude(self) -> Room {
        Room(self.0.unsigned_abs().min(u64::MAX as u128) as u64)
    }

    pub fn abs(self) -> Delta {
        Delta(self.0.abs())
    }

    /// Part `index` of this amount split evenly over `n` parts, rounded toward minus infinity,
    /// the remainder units going to the lowest indices: the parts add up to the amount, and
    /// adding `k × n` units to it adds exactly `k` to every part, whatever the signs (so room
    /// moved in multiples of `n` between two amounts split this way moves every part exactly).
    pub fn even_part(self, n: usize, index: usize) -> Delta {
        if n == 0 {
            return Delta::ZERO;
        }
        let n = n as i128;
        let each = self.0.div_euclid(n);
        let extra = self.0.rem_euclid(n);
        Delta(each + i128::from((index as i128) < extra))
    }
}

impl From<Room> for Delta {
    fn from(room: Room) -> Delta {
        Delta::of(room)
    }
}

impl Add for Delta {
    type Output = Delta;
    fn add(self, other: Delta) -> Delta {
        Delta(self.0 + other.0)
    }
}

impl Add<Room> for Delta {
    type Output = Delta;
    fn add(self, other: Room) -> Delta {
        self + Delta::of(other)
    }
}

impl AddAssign for Delta {
    fn add_assign(&mut self, other: Delta) {
        *self = *self + other;
    }
}

impl AddAssign<Room> for Delta {
    fn add_assign(&mut self, other: Room) {
        *self = *self + other;
    }
}

impl Sub for Delta {
    type Output = Delta;
    fn sub(self, other: Delta) -> Delta {
        Delta(self.0 - other.0)
    }
}

impl Sub<Room> for Delta {
    type Output = Delta;
    fn sub(self, other: Room) -> Delta {
        self - Delta::of(other)
    }
}

impl SubAssign for Delta {
    fn sub_assign(&mut self, other: Delta) {
        *self = *self - other;
    }
}

impl Neg for Delta {
    type Output = Delta;
    fn neg(self) -> Delta {
        Delta(-self.0)
    }
}

impl std::iter::Sum for Delta {
    fn sum<I: Iterator<Item = Delta>>(iter: I) -> Delta {
        iter.fold(Delta::ZERO, |a, b| a + b)
    }
}

impl fmt::Debug for Delta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Delta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 0 {
            write!(f, "-")?;
        }
        let size = self.0.unsigned_abs();
        let (whole, frac) = (size / MILLI_PER_RPS as u128, size % MILLI_PER_RPS as u128);
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            write!(f, "{whole}.{frac:03}")
        }
    }
}

/// Splits `total` in proportion to `weights` with largest-remainder rounding.
///
/// The parts add up to exactly `total`. Ties in the remainders go to the lower index, so every
/// Region that computes the same split from the same inputs gets the same parts. When every weight
/// is zero the total is split evenly (the first `total mod n` parts get one unit more).
/// `out` receives one part per weight.
pub fn split(total: Room, weights: &[u64], out: &mut [Room]) {
    let n = weights.len();
    debug_assert_eq!(out.len(), n);
    if n == 0 {
        return;
    }
    let sum: u128 = weights.iter().map(|&w| w as u128).sum();
    if sum == 0 {
        let each = total.0 / n as u64;
        let extra = (total.0 % n as u64) as usize;
        for (i, part) in out.iter_mut().enumerate() {
            *part = Room(each + u64::from(i < extra));
        }
        return;
    }
    let mut given: u64 = 0;
    let mut rems = [0u128; 64];
    let tracked = n.min(rems.len());
    for i in 0..n {
        let exact = total.0 as u128 * weights[i] as u128;
        let part = (exact / sum) as u64;
        out[i] = Room(part);
        given += part;
        if i < tracked {
            rems[i] = exact % sum;
        }
    }
    let mut left = total.0 - given;
    // At most n − 1 units are left; hand them to the largest remainders, lower index first on ties.
    while left > 0 {
        let mut best = 0;
        for i in 1..tracked {
            if rems[i] > rems[best] {
                best = i;
            }
        }
        out[best].0 += 1;
        rems[best] = 0;
        left -= 1;
    }
}

/// One Region's part of `total` when it is split evenly over `n` Regions by index.
pub fn even_part(total: Room, n: usize, index: usize) -> Room {
    if n == 0 {
        return Room::ZERO;
    }
    let each = total.0 / n as u64;
    let extra = (total.0 % n as u64) as usize;
    Room(each + u64::from(index < extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_hands_out_exactly_the_total() {
        let mut out = [Room::ZERO; 3];
        split(Room(10), &[1, 1, 1], &mut out);
        assert_eq!(out, [Room(4), Room(3), Room(3)]);
        split(Room(8_500_000), &[7200, 3600, 1200], &mut out);
        assert_eq!(out, [Room(5_100_000), Room(2_550_000), Room(850_000)]);
        split(Room(7), &[0, 0, 0], &mut out);
        assert_eq!(out, [Room(3), Room(2), Room(2)]);
    }

    #[test]
    fn from_rps_rejects_nonsense() {
        assert_eq!(Room::from_rps(f64::NAN), Err(RoomError::NotFinite));
        assert_eq!(Room::from_rps(-1.0), Err(RoomError::Negative));
        assert_eq!(Room::from_rps(1e13), Err(RoomError::TooLarge));
        assert_eq!(Room::from_rps(3248.1234), Ok(Room(3_248_123)));
    }

    #[test]
    fn excess_over_clamps_and_the_operators_are_exact() {
        assert_eq!(Room(5).excess_over(Room(7)), Room::ZERO);
        assert_eq!(Room(7).excess_over(Room(5)), Room(2));
        assert_eq!(Room(7) - Room(5), Room(2));
        assert_eq!(Room(7) + Room(5), Room(12));
        let mut r = Room(7);
        r -= Room(7);
        assert_eq!(r, Room::ZERO);
    }

    #[test]
    fn a_delta_is_exact_and_says_how_it_becomes_room() {
        let d = Delta::of(Room(5)) - Room(7);
        assert_eq!(d, Delta::from_milli(-2));
        assert!(d.is_negative() && !d.is_positive());
        assert_eq!(d.clamp_to_room(), Room::ZERO);
        assert_eq!(d.magnitude(), Room(2));
        assert_eq!(-d, Delta::from_milli(2));
        assert_eq!((-d).clamp_to_room(), Room(2));
        assert_eq!(Delta::from_milli(i128::MAX).clamp_to_room(), Room(u64::MAX));
        assert_eq!(Delta::from_milli(i128::MIN + 1).magnitude(), Room(u64::MAX));
        let sum: Delta = [Delta::from_milli(3), d, Delta::of(Room(1))]
            .into_iter()
            .sum();
        assert_eq!(sum, Delta::from_milli(2));
        assert_eq!(
            format!("{:?} {}", Delta::from_milli(-1_500), Delta::of(Room(2_000))),
            "-1.500 2"
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "room below zero")]
    fn a_subtraction_below_zero_stops_a_debug_build_where_it_happens() {
        let _ = Room(5) - Room(7);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "room overflow")]
    fn an_overflow_stops_a_debug_build_where_it_happens() {
        let _ = Room(u64::MAX) + Room(1);
    }
}
