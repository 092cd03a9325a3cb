//! The binary layouts inside the items: the header blob `h`, the shard blob `d` and their
//! LEB128 varints (see the module doc of [`crate::codec`]).

use super::{blob, malformed, number, Item, MAX_SHARDS};
use shareplane_core::{
    Deployment, LimitRecord, LimitRecordParts, PerRegion, ReclaimMarkParts, RecordError, RegionId,
    Room, MAX_REGIONS,
};
use shareplane_store::Rejection;
use std::collections::HashMap;

pub(super) struct Header {
    pub(super) version: u64,
    pub(super) epoch: u64,
    pub(super) written_at_ms: u64,
    pub(super) prev_final: u64,
    pub(super) peer_epochs: PerRegion<u64>,
    pub(super) account_epochs: PerRegion<u64>,
    pub(super) reclaims: PerRegion<Option<ReclaimMarkParts>>,
    /// For each of the writer's Regions, this reader's index of it (None: not configured here).
    pub(super) columns: Vec<Option<RegionId>>,
    pub(super) shard_versions: Vec<u64>,
}

pub(super) fn parse_header(d: &Deployment, item: &Item) -> Result<Header, Rejection> {
    let version = number(item, "ver")?;
    let schema = number(item, "sv")?;
    let mut r = Reader::new(blob(item, "h")?);
    let columns = read_columns(d, &mut r)?;
    let epoch = r.varint()?;
    let written_at_ms = r.varint()?;
    let prev_final = if schema >= 2 {
        r.varint()?
    } else if epoch <= 1 {
        0
    } else {
        return Err(malformed(
            "a schema-1 record of a later epoch does not name its previous epoch's last version",
        ));
    };
    let mut peer_epochs = PerRegion::default();
    for col in &columns {
        let e = r.varint()?;
        place(&mut peer_epochs, *col, e, 0)?;
    }
    let reclaims = read_marks(&mut r, &columns, epoch)?;
    let account_epochs = if schema >= 3 {
        let mut account_epochs = PerRegion::default();
        for col in &columns {
            let e = r.varint()?;
            place(&mut account_epochs, *col, e, 0)?;
        }
        account_epochs
    } else {
        schema_2_accounts(epoch, &peer_epochs, &reclaims)
    };
    let shards = r.count(MAX_SHARDS, "shards")?;
    let mut shard_versions = Vec::with_capacity(shards);
    for _ in 0..shards {
        let v = r.varint()?;
        if v > version {
            return Err(malformed("a shard is newer than its header"));
        }
        shard_versions.push(v);
    }
    r.end()?;
    Ok(Header {
        version,
        epoch,
        written_at_ms,
        prev_final,
        peer_epochs,
        account_epochs,
        reclaims,
        columns,
        shard_versions,
    })
}

/// The writer's Region names, mapped to this reader's Regions (None: not configured here).
fn read_columns(d: &Deployment, r: &mut Reader<'_>) -> Result<Vec<Option<RegionId>>, Rejection> {
    let n = r.count(MAX_REGIONS, "Regions")?;
    let mut columns = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string(64)?;
        let col = d.region_id(name);
        if col.is_some() && columns.contains(&col) {
            return Err(malformed(format!(
                "Region {name} appears twice in the header"
            )));
        }
        columns.push(col);
    }
    Ok(columns)
}

/// The reclaim marks, one per column: tag 0 none, 1 (schema 1: closed by the writer's epoch),
/// 2 with the closing epoch.
fn read_marks(
    r: &mut Reader<'_>,
    columns: &[Option<RegionId>],
    epoch: u64,
) -> Result<PerRegion<Option<ReclaimMarkParts>>, Rejection> {
    let mut reclaims = PerRegion([None; MAX_REGIONS]);
    for col in columns {
        let mark = match r.varint()? {
            0 => None,
            1 => Some(ReclaimMarkParts {
                epoch: r.varint()?,
                version: r.varint()?,
                by: epoch,
            }),
            2 => Some(ReclaimMarkParts {
                epoch: r.varint()?,
                version: r.varint()?,
                by: r.varint()?,
            }),
            t => return Err(malformed(format!("reclaim tag {t}"))),
        };
        place(&mut reclaims, *col, mark, None)?;
    }
    Ok(reclaims)
}

/// Before schema 3 a new epoch zeroed every open account and kept a closed one with the epoch
/// that closed it: the own epoch each account belongs to, derived.
fn schema_2_accounts(
    epoch: u64,
    peer_epochs: &PerRegion<u64>,
    reclaims: &PerRegion<Option<ReclaimMarkParts>>,
) -> PerRegion<u64> {
    let mut account_epochs = PerRegion::default();
    for i in 0..MAX_REGIONS {
        if peer_epochs.0[i] != 0 {
            account_epochs.0[i] = match reclaims.0[i] {
                Some(m) if m.epoch == peer_epochs.0[i] => m.by,
                _ => epoch,
            };
        }
    }
    account_epochs
}

/// Stores a per-Region value in this reader's column; a Region unknown here must hold `zero`.
pub(super) fn place<T: PartialEq>(
    row: &mut PerRegion<T>,
    col: Option<RegionId>,
    value: T,
    zero: T,
) -> Result<(), Rejection> {
    match col {
        Some(c) => row[c] = value,
        None if value == zero => {}
        None => {
            return Err(Rejection::Invalid(RecordError::Contradiction {
                limit: None,
                what: "names a Region that is not configured",
            }))
        }
    }
    Ok(())
}

pub(super) fn decode_shard(
    index: &HashMap<&str, usize>,
    columns: &[Option<RegionId>],
    blob: &[u8],
    schema: u64,
    limits: &mut [LimitRecordParts],
    seen: &mut [bool],
) -> Result<(), Rejection> {
    let mut r = Reader::new(blob);
    // Each entry takes at least 9 bytes, which bounds the count by the blob itself.
    let count = r.count(blob.len() / 9 + 1, "limits")?;
    for _ in 0..count {
        let id = r.string(128)?;
        let l = read_limit(&mut r, columns, schema)?;
        if let Some(&i) = index.get(id) {
            // `seen` and `limits` both have one slot per configured limit.
            if seen.get(i).copied().unwrap_or(true) {
                return Err(malformed(format!("limit {id:?} appears twice")));
            }
            seen[i] = true;
            limits[i] = l;
        }
    }
    r.end()
}

pub(super) fn read_limit(
    r: &mut Reader<'_>,
    columns: &[Option<RegionId>],
    schema: u64,
) -> Result<LimitRecordParts, Rejection> {
    let mut l = LimitRecordParts {
        limit_version: r.varint()?,
        rate: Room::from_milli(r.varint()?),
        demand: Room::from_milli(r.varint()?),
        share: Room::from_milli(r.varint()?),
        pool: Room::from_milli(r.varint()?),
        target: Room::from_milli(r.varint()?),
        unmet: Room::from_milli(r.varint()?),
        debt: Room::from_milli(r.varint()?),
        ..LimitRecordParts::default()
    };
    for row in [&mut l.granted, &mut l.taken, &mut l.reclaimed] {
        for col in columns {
            let v = Room::from_milli(r.varint()?);
            place(row, *col, v, Room::ZERO)?;
        }
    }
    // Schema 3 added the debt each heir took on from an estate (none was ever taken before).
    if schema >= 3 {
        for col in columns {
            let v = Room::from_milli(r.varint()?);
            place(&mut l.debt_taken, *col, v, Room::ZERO)?;
        }
    }
    // Schema 4 added what the writer took of each switched-past estate's grants (`left`); an
    // older record reads as zero (docs/PROTOCOL.md, "Upgrading to schema 4").
    if schema >= 4 {
        for col in columns {
            let v = Room::from_milli(r.varint()?);
            place(&mut l.left, *col, v, Room::ZERO)?;
        }
    }
    Ok(l)
}

pub(super) fn put_limit(out: &mut Vec<u8>, id: &str, l: &LimitRecord, n: usize) {
    put_varint(out, id.len() as u64);
    out.extend_from_slice(id.as_bytes());
    for v in [
        l.limit_version(),
        l.rate().milli(),
        l.demand().milli(),
        l.share().milli(),
        l.pool().milli(),
        l.target().milli(),
        l.unmet().milli(),
        l.debt().milli(),
    ] {
        put_varint(out, v);
    }
    for row in [
        l.granted(),
        l.taken(),
        l.reclaimed(),
        l.debt_taken(),
        l.left(),
    ] {
        for v in &row.0[..n] {
            put_varint(out, v.milli());
        }
    }
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A bounds-checked reader over a blob: every read names what went wrong instead of panicking.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub(super) fn varint(&mut self) -> Result<u64, Rejection> {
        let mut v: u64 = 0;
        for (i, b) in self.buf.iter().enumerate().take(10) {
            let low = u64::from(b & 0x7f);
            if i == 9 && *b > 1 {
                return Err(malformed("a varint overflows 64 bits"));
            }
            v |= low << (7 * i);
            if b & 0x80 == 0 {
                self.buf = &self.buf[i + 1..];
                return Ok(v);
            }
        }
        Err(malformed("a varint is cut short"))
    }

    pub(super) fn count(&mut self, max: usize, what: &str) -> Result<usize, Rejection> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|c| *c <= max)
            .ok_or_else(|| malformed(format!("{v} {what}, more than {max}")))
    }

    pub(super) fn string(&mut self, max: usize) -> Result<&'a str, Rejection> {
        let len = self.count(max, "bytes of text")?;
        if len > self.buf.len() {
            return Err(malformed("a string is cut short"));
        }
        let (s, rest) = self.buf.split_at(len);
        self.buf = rest;
        std::str::from_utf8(s).map_err(|_| malformed("a string is not UTF-8"))
    }

    pub(super) fn end(&self) -> Result<(), Rejection> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!("{} bytes left over", self.buf.len())))
        }
    }
}
