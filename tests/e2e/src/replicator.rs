//! A global table made of real parts: one moto server per Region (each daemon talks only to its
//! own, as in AWS) and this replicator, which copies every item written in one Region's table to
//! the others after a delay, through the DynamoDB API (Scan what changed, PutItem or DeleteItem
//! elsewhere), never through shared memory. Links between any two Regions can be cut and healed,
//! one way or both; what a cut link holds back is delivered, in order, when it heals (a global
//! table's replication resumes after an outage rather than losing writes).
//!
//! **What counts as a local write.** A scan of Region `i`'s table that finds an item (or the lack
//! of one) different from what the replicator itself last applied there is a write of `i`'s own
//! daemon; only those are replicated. So an item is never forwarded from `j` to `k` through `i`: a
//! cut between `j` and `k` holds even while both reach `i`, as in AWS, where each replica ships
//! its own writes.
//!
//! **Last writer wins, by the time of the write.** DynamoDB global tables resolve concurrent
//! writes to one item by the write's timestamp, not by anything in the item, so this replicator
//! does the same: a write is stamped when a scan first sees it in its origin (one clock, this
//! process's, plus a sequence number for ties), and a delivery is applied only if its stamp is
//! newer than the stamp of what the destination holds. We do not compare the record's `version`
//! or `epoch` attributes: the daemons do not rely on conflict resolution at all (each Region
//! writes only items under its own name, so two Regions never write one item), and a rule that
//! read the protocol's own counters would hide exactly the delivery orders a real table allows.
//! The rule matters for a backlog delivered after a heal (older stamps than the item a healed
//! link already carried are dropped) and keeps the replicator honest if a test ever writes one
//! item in two Regions.

use aws_sdk_dynamodb::types::AttributeValue;
use shareplane_aws::client::{self, CallLimits, Endpoint};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Item = HashMap<String, AttributeValue>;
/// `(pk, sk)`, the table's key.
type Key = (String, String);
/// When a write was first seen in its origin: (Unix ms, sequence).
type Stamp = (u64, u64);

/// The longest one scan or write may take before the replicator gives up on it for this round.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A bound on what one cut link may hold back (items; a Region writes a few per period).
const MAX_BACKLOG: usize = 100_000;

/// Which directed links carry writes: `up[from][to]`.
#[derive(Clone, Debug)]
pub struct Links(Arc<Mutex<Vec<Vec<bool>>>>);

impl Links {
    pub fn all_up(n: usize) -> Links {
        Links(Arc::new(Mutex::new(vec![vec![true; n]; n])))
    }

    /// Cuts (`up = false`) or heals the link `from → to`.
    pub fn set(&self, from: usize, to: usize, up: bool) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = l.get_mut(from).and_then(|r| r.get_mut(to)) {
            *x = up;
        }
    }

    /// Cuts or heals both directions between `a` and `b`.
    pub fn set_both(&self, a: usize, b: usize, up: bool) {
        self.set(a, b, up);
        self.set(b, a, up);
    }

    pub fn heal_all(&self) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for row in l.iter_mut() {
            row.iter_mut().for_each(|x| *x = true);
        }
    }

    pub fn is_up(&self, from: usize, to: usize) -> bool {
        let l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.get(from)
            .and_then(|r| r.get(to))
            .copied()
            .unwrap_or(false)
    }

    pub fn all_healed(&self) -> bool {
        let l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().all(|r| r.iter().all(|x| *x))
    }
}

/// What the replicator did, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicationStats {
    pub scans: u64,
    pub local_writes: u64,
    pub delivered: u64,
    /// Deliveries dropped because the destination held a newer write of the item.
    pub superseded: u64,
    pub failed_calls: u64,
    /// The longest any link's backlog grew.
    pub max_backlog: usize,
}

/// One write on its way from its origin to one destination.
#[derive(Clone, Debug)]
struct InFlight {
    due_ms: u64,
    key: Key,
    /// `None`: the item was deleted.
    item: Option<Item>,
    stamp: Stamp,
}

/// What the replicator knows of one Region's table.
#[derive(Default)]
struct Replica {
    /// The table at the last scan.
    seen: HashMap<Key, Item>,
    /// What the replicator itself last put (`Some`) or deleted (`None`) there, by key.
    applied: HashMap<Key, Option<Item>>,
    /// The stamp of the write each key's current state in this table came from.
    stamps: HashMap<Key, Stamp>,
}

/// The replicator: call [`Replicator::run`] in a task; cut and heal through [`Replicator::links`].
pub struct Replicator {
    clients: Vec<aws_sdk_dynamodb::Client>,
    table: String,
    delay: Duration,
    scan_every: Duration,
    links: Links,
    stats: Arc<Mutex<ReplicationStats>>,
}

impl Replicator {
    /// A replicator between the tables `table` on the moto servers `urls` (one per Region, by
    /// index), delivering each write `delay` after a scan (every `scan_every`) first saw it.
    pub async fn new(urls: &[String], table: &str, delay: Duration, scan_every: Duration) -> Self {
        let mut clients = Vec::new();
        for url in urls {
            let at = Endpoint::Local {
                url: url.clone(),
                region: crate::local_aws::LOCAL_AWS_REGION.to_string(),
            };
            let limits = CallLimits {
                operation_timeout: CALL_TIMEOUT,
                ..CallLimits::default()
            };
            clients.push(client::dynamodb(&client::sdk_config(&at, limits).await));
        }
        Replicator {
            links: Links::all_up(urls.len()),
            clients,
            table: table.to_string(),
            delay,
            scan_every,
            stats: Arc::default(),
        }
    }

    pub fn links(&self) -> Links {
        self.links.clone()
    }

    /// A handle on the running replicator's counters.
    pub fn stats(&self) -> Arc<Mutex<ReplicationStats>> {
        self.stats.clone()
    }

    /// Replicates until `until` (Unix ms).
    pub async fn run(self, until_unix_ms: u64) {
        let n = self.clients.len();
        let mut replicas: Vec<Replica> = (0..n).map(|_| Replica::default()).collect();
        let mut queues: BTreeMap<(usize, usize), VecDeque<InFlight>> = BTreeMap::new();
        let mut seq = 0u64;
        let mut tick = tokio::time::interval(self.scan_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while now_ms() < until_unix_ms {
            tick.tick().await;
            for (i, replica) in replicas.iter_mut().enumerate() {
                let Some(table) = self.scan(i).await else {
                    continue;
                };
                let writes = local_writes(replica, table, &mut seq);
                self.bump(|s| {
                    s.scans += 1;
                    s.local_writes += writes.len() as u64;
                });
                for (key, item, stamp) in writes {
                    for j in (0..n).filter(|j| *j != i) {
                        let q = queues.entry((i, j)).or_default();
                        if q.len() < MAX_BACKLOG {
                            q.push_back(InFlight {
                                due_ms: stamp.0 + self.delay.as_millis() as u64,
                                key: key.clone(),
                                item: item.clone(),
                                stamp,
                            });
                        }
                    }
                }
            }
            for (&(i, j), q) in queues.iter_mut() {
                self.bump(|s| s.max_backlog = s.max_backlog.max(q.len()));
                if self.links.is_up(i, j) {
                    self.deliver(q, j, &mut replicas[j]).await;
                }
            }
        }
    }

    fn bump(&self, f: impl FnOnce(&mut ReplicationStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Every item of Region `i`'s table, or `None` if a page failed.
    async fn scan(&self, i: usize) -> Option<HashMap<Key, Item>> {
        let mut out = HashMap::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self.clients[i]
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await;
            let Ok(page) = page else {
                self.bump(|s| s.failed_calls += 1);
                return None;
            };
            for item in page.items.unwrap_or_default() {
                if let Some(k) = key_of(&item) {
                    out.insert(k, item);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Some(out),
            }
        }
    }

    /// Applies the writes of `q` that are due, in order, to Region `j` (last writer wins).
    async fn deliver(&self, q: &mut VecDeque<InFlight>, j: usize, dest: &mut Replica) {
        let now = now_ms();
        while q.front().is_some_and(|w| w.due_ms <= now) {
            let Some(w) = q.pop_front() else { break };
            if dest.stamps.get(&w.key).is_some_and(|s| *s >= w.stamp) {
                self.bump(|s| s.superseded += 1);
                continue;
            }
            if !self.apply(j, &w).await {
                // Retried at the next round, still in order.
                q.push_front(w);
                self.bump(|s| s.failed_calls += 1);
                return;
            }
            dest.applied.insert(w.key.clone(), w.item.clone());
            dest.stamps.insert(w.key.clone(), w.stamp);
            match &w.item {
                Some(item) => dest.seen.insert(w.key.clone(), item.clone()),
                None => dest.seen.remove(&w.key),
            };
            self.bump(|s| s.delivered += 1);
        }
    }

    async fn apply(&self, j: usize, w: &InFlight) -> bool {
        let c = &self.clients[j];
        match &w.item {
            Some(item) => c
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .send()
                .await
                .is_ok(),
            None => c
                .delete_item()
                .table_name(&self.table)
                .key("pk", AttributeValue::S(w.key.0.clone()))
                .key("sk", AttributeValue::S(w.key.1.clone()))
                .send()
                .await
                .is_ok(),
        }
    }
}

/// The writes of Region `r`'s own daemon that a scan found (`table`): every key whose item (or
/// absence) differs from the last scan and from what the replicator applied there. Updates `r`.
fn local_writes(
    r: &mut Replica,
    table: HashMap<Key, Item>,
    seq: &mut u64,
) -> Vec<(Key, Option<Item>, Stamp)> {
    let mut changed: Vec<(Key, Option<Item>)> = Vec::new();
    for (k, item) in &table {
        if r.seen.get(k) != Some(item) {
            changed.push((k.clone(), Some(item.clone())));
        }
    }
    for k in r.seen.keys() {
        if !table.contains_key(k) {
            changed.push((k.clone(), None));
        }
    }
    changed.sort_by(|a, b| a.0.cmp(&b.0));
    r.seen = table;
    let now = now_ms();
    let mut out = Vec::new();
    for (k, item) in changed {
        let ours = r.applied.get(&k).is_some_and(|a| *a == item);
        if ours {
            continue;
        }
        *seq += 1;
        let stamp = (now, *seq);
        r.stamps.insert(k.clone(), stamp);
        r.applied.remove(&k);
        out.push((k, item, stamp));
    }
    out
}

fn key_of(item: &Item) -> Option<Key> {
    let s = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    };
    Some((s("pk")?, s("sk")?))
}

fn now_ms() -> u64 {
    shareplane_limiter::loadgen::unix_ms_now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pk: &str, sk: &str, v: &str) -> (Key, Item) {
        let mut i = Item::new();
        i.insert("pk".into(), AttributeValue::S(pk.into()));
        i.insert("sk".into(), AttributeValue::S(sk.into()));
        i.insert("v".into(), AttributeValue::S(v.into()));
        ((pk.into(), sk.into()), i)
    }

    #[test]
    fn only_the_own_daemons_writes_are_local() {
        let mut r = Replica::default();
        let mut seq = 0;
        let (ka, a1) = item("A", "rec", "1");
        let (kb, b1) = item("B", "rec", "1");
        // B's record arrived by replication: not a local write of this Region.
        r.applied.insert(kb.clone(), Some(b1.clone()));
        let table: HashMap<Key, Item> = [(ka.clone(), a1.clone()), (kb.clone(), b1)].into();
        let w = local_writes(&mut r, table.clone(), &mut seq);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].0, ka);
        // Nothing changed: nothing to replicate.
        assert!(local_writes(&mut r, table.clone(), &mut seq).is_empty());
        // A deleted its shard: a local delete.
        let mut t2 = table;
        t2.remove(&ka);
        let w = local_writes(&mut r, t2, &mut seq);
        assert_eq!(w.len(), 1);
        assert!(w[0].1.is_none());
    }

    #[test]
    fn links_cut_one_way_or_both_and_heal() {
        let l = Links::all_up(3);
        l.set(0, 1, false);
        assert!(!l.is_up(0, 1) && l.is_up(1, 0) && !l.all_healed());
        l.set_both(1, 2, false);
        assert!(!l.is_up(1, 2) && !l.is_up(2, 1));
        l.heal_all();
        assert!(l.all_healed());
    }
}
