//! The simulated global table: every Region's records, the delay before a record becomes visible
//! in the other Regions' replicas, and cuts. It is sans IO (no clock, no lock, no async): time is
//! an argument. The simulator drives [`Table`] tick by tick; [`store`] puts it behind the
//! daemon's [`shareplane_store::RecordStore`] on a wall clock (the daemon's tests, the demo and
//! `shareplane local`), so both meet the same replication, cuts and collection.
//!
//! A record written at tick `w` by Region W is visible to Region R from `w + visibility(W)` unless a
//! cut separated W and R at some instant in `[w, visible)`: a record not yet visible when a cut
//! starts does not cross it, nor does one written during the cut. At the heal, replication
//! resumes as a DynamoDB global table's does: W's newest record, if the cut held it back from R,
//! reaches R at `heal + visibility(W)` (the versions W wrote in between are skipped: each Region's
//! record is one item, last writer wins). This holds while W is lost too (its replica keeps what
//! it wrote, as records in flight when a Region is lost still arrive). Records written after the
//! heal cross normally. A reader's replica holds the newest record that reached it.
//!
//! Like the real table, the writer's last record of each earlier epoch is kept next to the current
//! one and travels with it: a survivor that never saw that epoch end needs it to reclaim the old
//! estate (see `Coordinator::observe`). As the real table's owner does, a writer collects such a
//! record in a write once every other Region's latest record in its replica has closed that epoch
//! for good (`shareplane_core::closed_for_good`), so every simulation exercises that rule.
//!
//! Time must not go backwards between calls. A long-lived table (a daemon's) calls
//! [`Table::compact`] after each write: it drops the entries no replica can still be handed, which
//! changes nothing any call returns (the simulator, whose runs are short, never calls it).

pub mod store;

use shareplane_core::{closed_for_good, RegionId, RegionRecord, MAX_REGIONS};
use std::sync::Arc;

struct Entry {
    record: Arc<RegionRecord>,
    visible_tick: i64,
    /// Readers (bit per Region) this record never reaches.
    blocked: u8,
    /// The writer's last record of every earlier epoch when this one was written (the real
    /// table keeps each until every heir has marked it).
    previous: Vec<Arc<RegionRecord>>,
}

/// Per (writer, reader): how far the reader's replica has been brought up to date.
#[derive(Clone, Copy, Default)]
struct Cursor {
    /// Entries before this index have been considered.
    next: usize,
    /// The newest entry that reached the reader.
    latest: Option<usize>,
    /// Whether the reader's coordinator has been handed `latest`.
    observed: bool,
}

/// What a reader finds of one writer.
pub struct Visible {
    pub previous: Vec<Arc<RegionRecord>>,
    pub latest: Arc<RegionRecord>,
}

pub struct Table {
    n: usize,
    /// Per writer, the ticks from a write (or the heal) until a record is visible elsewhere.
    delay: Vec<i64>,
    entries: Vec<Vec<Entry>>,
    cursors: Vec<[Cursor; MAX_REGIONS]>,
    /// Directed cuts: records written by a Region of `.0` do not reach a Region of `.1`.
    cuts: Vec<(u8, u8)>,
}

impl Table {
    /// A table of `delay.len()` Regions (at most [`MAX_REGIONS`]; more are not written), each
    /// writer's records visible to the others `delay` ticks after they are written.
    pub fn new(mut delay: Vec<i64>) -> Table {
        delay.truncate(MAX_REGIONS);
        let n = delay.len();
        Table {
            n,
            delay,
            entries: (0..n).map(|_| Vec::new()).collect(),
            cursors: vec![[Cursor::default(); MAX_REGIONS]; n],
            cuts: Vec::new(),
        }
    }

    /// Whether records written by `w` reach `r`.
    fn connected(&self, w: usize, r: usize) -> bool {
        self.cuts
            .iter()
            .all(|&(from, to)| !((from >> w) & 1 == 1 && (to >> r) & 1 == 1))
    }

    fn separated_from(&self, w: usize) -> u8 {
        (0..self.n)
            .filter(|&r| !self.connected(w, r))
            .fold(0, |m, r| m | 1 << r)
    }

    fn all(&self) -> u8 {
        ((1u16 << self.n) - 1) as u8
    }

    /// Writes a record of Region `w` that becomes visible at `visible_tick`.
    pub fn write(&mut self, w: usize, record: Arc<RegionRecord>, visible_tick: i64) {
        let blocked = self.separated_from(w);
        let Some(list) = self.entries.get(w) else {
            return;
        };
        let previous = match list.last() {
            Some(last) if last.record.epoch() < record.epoch() => {
                let mut p = last.previous.clone();
                p.push(last.record.clone());
                p
            }
            Some(last) => last.previous.clone(),
            None => Vec::new(),
        };
        let previous = self.uncollected(w, &record, previous);
        if let Some(list) = self.entries.get_mut(w) {
            list.push(Entry {
                record,
                visible_tick,
                blocked,
                previous,
            });
        }
    }

    /// Of the writer's last records of its ended epochs, those it keeps with a write of `record`:
    /// every one that some other Region's latest record, as the writer's replica holds it, has not
    /// closed for good (the core's rule, [`shareplane_core::closed_for_good`], by which the
    /// DynamoDB store collects them in the owner's writes).
    fn uncollected(
        &self,
        w: usize,
        record: &RegionRecord,
        previous: Vec<Arc<RegionRecord>>,
    ) -> Vec<Arc<RegionRecord>> {
        let Some(owner) = RegionId::new(w) else {
            return previous;
        };
        let latest = |r: RegionId| {
            let i = self.cursors.get(r.index())?.get(w)?.latest?;
            self.entries.get(r.index())?.get(i).map(|e| &*e.record)
        };
        previous
            .into_iter()
            .filter(|p| !closed_for_good(self.n, owner, record.epoch(), p.epoch(), latest))
            .collect()
    }

    /// A cut starts at `now`: records not yet visible never cross it.
    /// The Regions in `mask` are cut off from the others, both ways.
    pub fn cut(&mut self, mask: u8, now: i64) {
        let all = self.all();
        self.cut_one_way(mask, all & !mask, now);
        self.cut_one_way(all & !mask, mask, now);
    }

    /// Records written by the Regions in `from` stop reaching those in `to`.
    pub fn cut_one_way(&mut self, from: u8, to: u8, now: i64) {
        self.cuts.push((from, to));
        for w in 0..self.n {
            let sep = self.separated_from(w);
            for e in self.entries[w].iter_mut().rev() {
                if e.visible_tick <= now {
                    break;
                }
                e.blocked |= sep;
            }
        }
    }

    /// Every cut ends at `now`: each writer's newest record reaches, `delay` after the heal, the
    /// readers that a cut kept it from.
    pub fn heal(&mut self, now: i64) {
        self.cuts.clear();
        let all = self.all();
        for (w, list) in self.entries.iter_mut().enumerate() {
            let Some(last) = list.last() else {
                continue;
            };
            // The readers that some entry carrying the newest record reaches (it may have been
            // sent again by an earlier heal, and held back again by a later cut).
            let reached = (list.iter().rev())
                .take_while(|e| Arc::ptr_eq(&e.record, &last.record))
                .fold(0u8, |m, e| m | !e.blocked);
            let held = all & !reached & !(1 << w);
            if held == 0 {
                continue;
            }
            // The same record again, for those readers only: the cursors take entries in order,
            // and every earlier entry is visible by `now + delay`, every later one after it.
            let again = Entry {
                record: last.record.clone(),
                visible_tick: (now + self.delay[w]).max(last.visible_tick),
                blocked: all & !held,
                previous: last.previous.clone(),
            };
            list.push(again);
        }
    }

    /// How many Regions write to the table.
    pub fn regions(&self) -> usize {
        self.n
    }

    pub fn any_cut(&self) -> bool {
        !self.cuts.is_empty()
    }

    /// The reader's coordinator starts afresh (restart, restore): hand it the replica's records again.
    pub fn forget_observed(&mut self, reader: usize) {
        for cursors in self.cursors.iter_mut() {
            if let Some(c) = cursors.get_mut(reader) {
                c.observed = false;
            }
        }
    }

    /// Brings `reader`'s replica of `w` up to `now`.
    fn advance(&mut self, w: usize, reader: usize, now: i64) {
        let (Some(list), Some(c)) = (
            self.entries.get(w),
            self.cursors.get_mut(w).and_then(|c| c.get_mut(reader)),
        ) else {
            return;
        };
        while let Some(e) = list.get(c.next) {
            if e.visible_tick > now {
                break;
            }
            if e.blocked & (1 << reader) == 0 {
                c.latest = Some(c.next);
                c.observed = false;
            }
            c.next += 1;
        }
    }

    /// The newest record of `w` in `reader`'s replica at `now` that the reader's coordinator has
    /// not been handed yet, with the writer's last record of each earlier epoch.
    pub fn newly_visible(&mut self, w: usize, reader: usize, now: i64) -> Option<Visible> {
        self.advance(w, reader, now);
        let c = self.cursors.get_mut(w)?.get_mut(reader)?;
        if c.observed {
            return None;
        }
        c.observed = true;
        let i = c.latest?;
        self.entries.get(w)?.get(i).map(Entry::visible)
    }

    /// The newest record of `w` in `reader`'s replica at `now`, handed or not (a store's read
    /// returns the whole replica every time), with the writer's last record of each earlier
    /// epoch. Whether it was handed is left as it was.
    pub fn replica(&mut self, w: usize, reader: usize, now: i64) -> Option<Visible> {
        self.advance(w, reader, now);
        let i = self.cursors.get(w)?.get(reader)?.latest?;
        self.entries.get(w)?.get(i).map(Entry::visible)
    }

    /// Region `w`'s own copy: its last write, with its last record of each earlier epoch that
    /// it has not collected.
    pub fn own(&self, w: usize) -> Option<Visible> {
        self.entries.get(w)?.last().map(Entry::visible)
    }

    /// Loses the writer's kept last record of its ended epoch `epoch` everywhere, its own copy
    /// included (a test's stand-in for a record that never replicated and whose owner's copy is
    /// gone). Returns whether there was one.
    pub fn lose_previous(&mut self, w: usize, epoch: u64) -> bool {
        let mut lost = false;
        for e in self.entries.get_mut(w).into_iter().flatten() {
            let before = e.previous.len();
            e.previous.retain(|p| p.epoch() != epoch);
            lost |= e.previous.len() < before;
        }
        lost
    }

    /// Drops writer `w`'s entries that no reader can be handed any more at `now` or later (each
    /// replica brought up to `now` first): those every reader has gone past, but each reader's
    /// newest and the run of entries carrying the writer's newest record, which the heal reads.
    pub fn compact(&mut self, w: usize, now: i64) {
        let n = self.n;
        for r in 0..n {
            self.advance(w, r, now);
        }
        let (Some(list), Some(cursors)) = (self.entries.get_mut(w), self.cursors.get_mut(w)) else {
            return;
        };
        let Some(last) = list.last() else {
            return;
        };
        let run = (list.iter().rev())
            .take_while(|e| Arc::ptr_eq(&e.record, &last.record))
            .count();
        let readers = &mut cursors[..n];
        let boundary = (readers.iter().map(|c| c.next).min())
            .unwrap_or(0)
            .min(list.len() - run);
        let mut held: Vec<usize> = (readers.iter().filter_map(|c| c.latest))
            .filter(|&i| i < boundary)
            .collect();
        held.sort_unstable();
        held.dedup();
        let removed = boundary - held.len();
        if removed == 0 {
            return;
        }
        for c in readers.iter_mut() {
            c.next -= removed;
            c.latest = (c.latest).map(|i| {
                if i >= boundary {
                    i - removed
                } else {
                    held.partition_point(|&h| h < i)
                }
            });
        }
        let mut i = 0;
        list.retain(|_| {
            let keep = i >= boundary || held.binary_search(&i).is_ok();
            i += 1;
            keep
        });
    }
}

impl Entry {
    fn visible(&self) -> Visible {
        Visible {
            previous: self.previous.clone(),
            latest: self.record.clone(),
        }
    }
}

#[cfg(test)]
#[path = "../tests/support/mod.rs"]
mod support;

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(w: usize, epoch: u64, version: u64) -> Arc<RegionRecord> {
        Arc::new(support::record(w, epoch, version))
    }

    fn version(t: &mut Table, w: usize, r: usize, now: i64) -> Option<u64> {
        t.newly_visible(w, r, now).map(|v| v.latest.version())
    }

    /// A heir's record that accounts with `acct` of Region 0 and marks its epoch `mark`.
    fn heir(w: usize, acct: u64, mark: u64) -> Arc<RegionRecord> {
        let mut r = support::parts(w, 1, 1);
        r.peer_epochs.0[0] = acct;
        r.reclaims.0[0] = Some(shareplane_core::ReclaimMarkParts {
            epoch: mark,
            version: 3,
            by: 1,
        });
        Arc::new(RegionRecord::from_parts(r))
    }

    fn kept_epochs(t: &mut Table, reader: usize, now: i64) -> Vec<u64> {
        t.forget_observed(reader);
        let v = t
            .newly_visible(0, reader, now)
            .expect("a record of Region 0");
        v.previous.iter().map(|p| p.epoch()).collect()
    }

    #[test]
    fn an_ended_epoch_is_collected_once_every_heir_in_the_writers_replica_closed_it() {
        let mut t = Table::new(vec![1, 1, 1]);
        t.write(0, rec(0, 1, 3), 1);
        t.write(0, rec(0, 2, 4), 2);
        assert_eq!(kept_epochs(&mut t, 1, 2), vec![1]);
        // Only B has closed epoch 1 and marks a later one; C still accounts with epoch 1.
        t.write(1, heir(1, 2, 2), 3);
        t.write(2, heir(2, 1, 1), 3);
        let _ = (version(&mut t, 1, 0, 3), version(&mut t, 2, 0, 3));
        t.write(0, rec(0, 2, 5), 4);
        assert_eq!(kept_epochs(&mut t, 1, 4), vec![1], "C may still need it");
        // C switches past it but still marks it (it may still settle it up); the writer's
        // replica has not seen that yet.
        t.write(2, heir(2, 2, 1), 10);
        t.write(0, rec(0, 2, 6), 5);
        assert_eq!(kept_epochs(&mut t, 1, 5), vec![1]);
        let _ = version(&mut t, 2, 0, 10);
        t.write(0, rec(0, 1 + shareplane_core::KEEP_ENDED_EPOCHS, 7), 11);
        assert_eq!(
            kept_epochs(&mut t, 1, 11),
            vec![1, 2],
            "C still marks epoch 1: kept however far the owner is past it"
        );
        t.write(2, heir(2, 2, 2), 12);
        let _ = version(&mut t, 2, 0, 13);
        t.write(0, rec(0, 1 + shareplane_core::KEEP_ENDED_EPOCHS, 8), 14);
        assert_eq!(
            kept_epochs(&mut t, 1, 14),
            vec![2],
            "epoch 1 collected; epoch 2, which no heir accounts past, kept"
        );
    }

    #[test]
    fn a_record_is_visible_after_its_delay_and_handed_over_once() {
        let mut t = Table::new(vec![1, 1]);
        t.write(0, rec(0, 1, 1), 10);
        assert_eq!(version(&mut t, 0, 1, 9), None);
        assert_eq!(version(&mut t, 0, 1, 10), Some(1));
        assert_eq!(version(&mut t, 0, 1, 11), None);
        t.forget_observed(1);
        assert_eq!(version(&mut t, 0, 1, 12), Some(1));
    }

    #[test]
    fn records_held_back_by_a_cut_are_skipped_but_the_newest_arrives_after_the_heal() {
        let mut t = Table::new(vec![5, 5, 5]);
        t.write(0, rec(0, 1, 1), 5);
        t.write(0, rec(0, 1, 2), 15);
        t.cut(0b001, 10);
        t.write(0, rec(0, 1, 3), 25);
        t.write(0, rec(0, 1, 4), 35);
        assert_eq!(
            version(&mut t, 0, 1, 39),
            Some(1),
            "v2 was in flight at the cut, v3 and v4 written during it"
        );
        t.heal(40);
        assert_eq!(
            version(&mut t, 0, 1, 44),
            None,
            "replication takes the delay"
        );
        assert_eq!(version(&mut t, 0, 1, 45), Some(4), "the newest, v3 skipped");
        assert_eq!(version(&mut t, 0, 2, 45), Some(4));
        t.write(0, rec(0, 1, 5), 50);
        assert_eq!(version(&mut t, 0, 1, 50), Some(5));
    }

    #[test]
    fn a_heal_sends_nothing_again_to_readers_the_newest_record_reached() {
        let mut t = Table::new(vec![5, 5, 5]);
        t.write(0, rec(0, 1, 1), 5);
        // R2's records stop reaching R1 only; R0's v2, written during the cut, reaches everyone.
        t.cut_one_way(0b100, 0b010, 6);
        t.write(0, rec(0, 1, 2), 15);
        assert_eq!(version(&mut t, 0, 1, 15), Some(2));
        t.heal(20);
        assert_eq!(version(&mut t, 0, 1, 40), None, "nothing handed twice");
        assert_eq!(version(&mut t, 0, 2, 40), Some(2));
    }

    #[test]
    fn a_second_cut_before_the_newest_arrives_holds_it_back_until_the_second_heal() {
        let mut t = Table::new(vec![5, 5]);
        t.cut(0b01, 0);
        t.write(0, rec(0, 1, 1), 5);
        t.heal(10);
        t.cut(0b01, 12);
        assert_eq!(
            version(&mut t, 0, 1, 20),
            None,
            "in flight at the second cut"
        );
        t.heal(30);
        assert_eq!(version(&mut t, 0, 1, 35), Some(1));
        assert_eq!(version(&mut t, 0, 1, 40), None);
    }

    #[test]
    fn a_cut_separates_only_across_its_boundary() {
        let mut t = Table::new(vec![1, 1, 1]);
        t.cut(0b011, 0);
        t.write(0, rec(0, 1, 1), 1);
        assert_eq!(version(&mut t, 0, 1, 1), Some(1), "same side");
        assert_eq!(version(&mut t, 0, 2, 1), None, "other side");
    }

    #[test]
    fn the_last_record_of_the_previous_epoch_travels_with_the_current_one() {
        let mut t = Table::new(vec![1, 1]);
        t.write(0, rec(0, 1, 1), 1);
        t.write(0, rec(0, 1, 2), 2);
        t.write(0, rec(0, 2, 3), 3);
        t.write(0, rec(0, 2, 4), 4);
        let v = t.newly_visible(0, 1, 4).expect("visible");
        assert_eq!((v.latest.epoch(), v.latest.version()), (2, 4));
        let previous: Vec<_> = v
            .previous
            .iter()
            .map(|p| (p.epoch(), p.version()))
            .collect();
        assert_eq!(previous, vec![(1, 2)]);
    }

    /// What every reader is handed of every writer, tick by tick, over a seeded schedule of
    /// writes (some ending an epoch), cuts, one-way cuts and heals.
    fn handed(compact_every: Option<i64>, seed: u64) -> Vec<(i64, usize, usize, u64, Vec<u64>)> {
        let mut x = seed;
        let mut draw = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut t = Table::new(vec![3, 5, 2]);
        let mut version = [0u64; 3];
        let mut epoch = [1u64; 3];
        let mut out = Vec::new();
        for now in 0..600i64 {
            match draw(40) {
                0 => t.cut(1 << draw(3), now),
                1 => t.cut_one_way(1 << draw(3), 1 << draw(3), now),
                2 | 3 => t.heal(now),
                _ => {}
            }
            let w = draw(3) as usize;
            if draw(3) == 0 {
                epoch[w] += u64::from(draw(8) == 0);
                version[w] += 1;
                let delay = t.delay[w];
                t.write(w, rec(w, epoch[w], version[w]), now + delay);
            }
            if compact_every.is_some_and(|k| now % k == 0) {
                (0..3).for_each(|w| t.compact(w, now));
            }
            for (w, r) in (0..3).flat_map(|w| (0..3).map(move |r| (w, r))) {
                if w != r && draw(2) == 0 {
                    if let Some(v) = t.newly_visible(w, r, now) {
                        let prev = v.previous.iter().map(|p| p.epoch()).collect();
                        out.push((now, w, r, v.latest.version(), prev));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn compacting_changes_nothing_a_reader_is_handed() {
        for seed in 0..20 {
            let plain = handed(None, seed);
            assert!(plain.len() > 100, "seed {seed}: {} handed", plain.len());
            for k in [1, 7] {
                assert_eq!(handed(Some(k), seed), plain, "seed {seed}, every {k}");
            }
        }
        // Kept: what is still in flight, and what each reader holds, even one cut off for long.
        let mut t = Table::new(vec![1, 1, 1]);
        for v in 1..=200 {
            let now = v as i64;
            if v == 100 {
                t.cut(0b100, now);
            }
            t.write(0, rec(0, 1, v), now + 1);
            let _ = t.newly_visible(0, 1, now);
            t.compact(0, now);
            assert!(t.entries[0].len() <= 3, "{v}: {}", t.entries[0].len());
        }
        assert_eq!(
            version(&mut t, 0, 2, 300),
            Some(99),
            "C holds what it had at the cut"
        );
        t.heal(300);
        assert_eq!(version(&mut t, 0, 2, 301), Some(200));
    }
}
