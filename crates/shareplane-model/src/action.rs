//! What can happen next in the model: the actions the checker explores, and Regions by index.

use shareplane_core::RegionId;

/// Region `i` of the model's deployment.
pub(crate) fn rid(i: usize) -> RegionId {
    RegionId::new(i).expect("region index")
}

/// One step of the model: a Region rebalances, a record is delivered, or a fault.
#[derive(Clone, Copy, Debug)]
pub enum Action {
    Rebalance(usize),
    Deliver(usize, usize),
    DeliverNewest(usize, usize),
    Lose(usize),
    Restore(usize),
    Restart(usize),
    /// A daemon restart that resumes its epoch from its durable record: explored only while no
    /// peer can have counted the Region silent (every peer saw its last write change its record).
    Resume(usize),
    Cut(usize),
    /// Records written by the first Region stop reaching the second (the other way still works).
    OneWayCut(usize, usize),
    Heal,
    Flip(usize),
    /// Region `i`'s daemon runs the next limit version (a change rolled out Region by Region).
    Adopt(usize),
    /// Region `i`'s daemon dies while its gateways live on, enforcing its last written record
    /// under their lease ([`crate::world::Daemon`]).
    Die(usize),
    /// The lease of a dead daemon's gateways runs out: they enforce nothing. Before it, no peer
    /// that saw the daemon's last write (or the one before) can count it silent, and no health
    /// check calls it unhealthy (docs/PROTOCOL.md, risk 5).
    LeaseOut(usize),
    /// The resume window after a dead daemon's last write closes: a restart from now on starts a
    /// new epoch.
    WindowEnds(usize),
    /// A dead daemon starts again from its last written record: within the resume window the
    /// core resumes its epoch unconfirmed (`Coordinator::restart`), after it a new epoch.
    RestartDaemon(usize),
}
