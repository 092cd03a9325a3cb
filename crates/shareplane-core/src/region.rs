//! Regions and small per-Region tables.

use std::fmt;

/// The most Regions one deployment may have. Per-Region tables are fixed arrays of this size so
/// that a rebalance allocates nothing per limit.
pub const MAX_REGIONS: usize = 8;

/// A Region's position in the deployment's Region list (the same list, in the same order, in every
/// Region's configuration). Names live in [`crate::Deployment`]; the core works with indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(u8);

impl RegionId {
    /// `None` when `index` is not below [`MAX_REGIONS`].
    pub fn new(index: usize) -> Option<RegionId> {
        (index < MAX_REGIONS).then_some(RegionId(index as u8))
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A value per Region, indexed by [`RegionId`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerRegion<T>(pub [T; MAX_REGIONS]);

impl<T: Copy + Default> Default for PerRegion<T> {
    fn default() -> Self {
        PerRegion([T::default(); MAX_REGIONS])
    }
}

impl<T> std::ops::Index<RegionId> for PerRegion<T> {
    type Output = T;
    fn index(&self, r: RegionId) -> &T {
        &self.0[r.index()]
    }
}

impl<T> std::ops::IndexMut<RegionId> for PerRegion<T> {
    fn index_mut(&mut self, r: RegionId) -> &mut T {
        &mut self.0[r.index()]
    }
}

impl<T: fmt::Debug> fmt::Debug for PerRegion<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

/// Iterates the ids of the first `n` Regions.
pub fn regions(n: usize) -> impl Iterator<Item = RegionId> {
    (0..n.min(MAX_REGIONS)).map(|i| RegionId(i as u8))
}
