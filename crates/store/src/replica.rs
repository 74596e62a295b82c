//! Replication of a host-local embedded store to replica hosts (seed 004
//! 4.3, "state migration"), sans-I/O: what a host sends of its own writes
//! ([`Sender`]) and the copies it keeps of other hosts' stores
//! ([`Copies`]). The caller carries [`ReplicaMsg`]s between hosts (in
//! order, per pair of hosts: the elastic MME relays them through its front
//! end) and decides when to write: cold (a procedure completed) or hot
//! (every message) is the writer's choice, this layer replicates every
//! write the store made ([`crate::Store::take_changes`]).
//!
//! # The stream
//! A sender numbers its batches to each target from 0; the first is a
//! full copy of its store (`reset`): the target drops what it held of the
//! sender and takes the copy. A target that sees a batch out of sequence
//! (one was lost: a queue on the way was full) keeps its copy, marks it
//! broken and asks once for a full copy again ([`ReplicaMsg::Resync`]).
//! When the sender's targets change, a new target gets a full copy and a
//! target no longer one is told to drop its copy ([`ReplicaMsg::Forget`]).
//!
//! # Groups
//! A sender may split its keys into groups ([`Sender::with_groups`]: the
//! elastic MME's replica groups, one per UE) and each target take some of
//! them only: its full copy and its batches carry only keys of its groups
//! (and keys of no group). A target whose groups change gets a full copy
//! of its new groups.
//!
//! # Versions
//! Each write carries the key's version in the sender's store. A target
//! applies a put only over an older version (or none), and a delete only
//! over a version it removes or an older one, so a duplicate or late
//! write never takes a newer one back ([`CopyStats::stale`]). A key
//! deleted and written again starts at version 1 again: in order, the
//! delete came first and removed the key.
//!
//! # Bounds
//! A batch is at most [`MAX_BATCH_LEN`] octets encoded (a write longer
//! than fits alone is not sent, [`SenderStats::too_large`]); the copies
//! of all senders together at most `max_bytes` of keys and values
//! ([`Copies::new`], each key with an overhead): a put beyond is dropped
//! and counted, and the copy marked broken. A message that does not decode is a [`ReplicaError`].

use crate::{Change, Versioned, MAX_KEY_LEN};
use mobicore_common::Groups;
use std::collections::BTreeMap;

/// A batch's ops at most, encoded.
pub const MAX_BATCH_LEN: usize = 72 * 1024;

/// Fixed octets of an encoded batch before its ops.
const BATCH_HEADER: usize = 1 + 1 + 8 + 4;
/// The longest message encoded (a batch of [`MAX_BATCH_LEN`]).
pub const MAX_MSG_LEN: usize = MAX_BATCH_LEN + BATCH_HEADER;

/// One replicated write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put {
        key: String,
        version: u64,
        value: Vec<u8>,
    },
    /// The key is deleted; `version` is the one it removed.
    Delete {
        key: String,
        version: u64,
    },
}

impl Op {
    fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    fn encoded_len(&self) -> usize {
        1 + 2 + self.key().len() + 8 + if let Op::Put { value, .. } = self { 4 + value.len() } else { 0 }
    }
}

impl From<Change> for Op {
    fn from(c: Change) -> Op {
        match c.value {
            Some(value) => Op::Put { key: c.key, version: c.version, value },
            None => Op::Delete { key: c.key, version: c.version },
        }
    }
}

/// What replica hosts say to each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaMsg {
    /// Sender -> target: writes, numbered `seq` (from 0 at each full
    /// copy); `reset`: the first of a full copy (drop what you hold of me).
    Batch { reset: bool, seq: u64, ops: Vec<Op> },
    /// Sender -> target: no longer my replica, drop my copy.
    Forget,
    /// Target -> sender: a batch was lost, send me a full copy.
    Resync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    #[error("replica message truncated")]
    Truncated,
    #[error("unknown replica message or op {0}")]
    Unknown(u8),
    #[error("replica key not UTF-8 or longer than {MAX_KEY_LEN}")]
    BadKey,
    #[error("replica batch longer than {MAX_BATCH_LEN} octets")]
    TooLong,
}

const BATCH: u8 = 1;
const FORGET: u8 = 2;
const RESYNC: u8 = 3;
const PUT: u8 = 1;
const DELETE: u8 = 2;

impl ReplicaMsg {
    /// Appends the message to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        match self {
            ReplicaMsg::Batch { reset, seq, ops } => {
                b.push(BATCH);
                b.push(u8::from(*reset));
                b.extend_from_slice(&seq.to_be_bytes());
                b.extend_from_slice(&(ops.len() as u32).to_be_bytes());
                for op in ops {
                    let (kind, key, version, value) = match op {
                        Op::Put { key, version, value } => (PUT, key, version, Some(value)),
                        Op::Delete { key, version } => (DELETE, key, version, None),
                    };
                    b.push(kind);
                    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
                    b.extend_from_slice(key.as_bytes());
                    b.extend_from_slice(&version.to_be_bytes());
                    if let Some(v) = value {
                        b.extend_from_slice(&(v.len() as u32).to_be_bytes());
                        b.extend_from_slice(v);
                    }
                }
            }
            ReplicaMsg::Forget => b.push(FORGET),
            ReplicaMsg::Resync => b.push(RESYNC),
        }
    }

    /// A message from all of `b`.
    pub fn decode(b: &[u8]) -> Result<ReplicaMsg, ReplicaError> {
        if b.len() > MAX_MSG_LEN {
            return Err(ReplicaError::TooLong);
        }
        let mut r = Reader(b);
        let msg = match r.u8()? {
            BATCH => {
                let reset = r.u8()? != 0;
                let seq = r.u64()?;
                let n = r.u32()? as usize;
                // Each op is at least 11 octets: no allocation beyond the input.
                if n > r.0.len() / 11 {
                    return Err(ReplicaError::Truncated);
                }
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = r.u8()?;
                    let len = usize::from(r.u16()?);
                    let key = r.take(len)?;
                    let key = std::str::from_utf8(key).map_err(|_| ReplicaError::BadKey)?;
                    if key.len() > MAX_KEY_LEN {
                        return Err(ReplicaError::BadKey);
                    }
                    let version = r.u64()?;
                    ops.push(match kind {
                        PUT => {
                            let len = r.u32()? as usize;
                            Op::Put { key: key.to_string(), version, value: r.take(len)?.to_vec() }
                        }
                        DELETE => Op::Delete { key: key.to_string(), version },
                        k => return Err(ReplicaError::Unknown(k)),
                    });
                }
                ReplicaMsg::Batch { reset, seq, ops }
            }
            FORGET => ReplicaMsg::Forget,
            RESYNC => ReplicaMsg::Resync,
            k => return Err(ReplicaError::Unknown(k)),
        };
        match r.0.is_empty() {
            true => Ok(msg),
            false => Err(ReplicaError::TooLong),
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ReplicaError> {
        if self.0.len() < n {
            return Err(ReplicaError::Truncated);
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, ReplicaError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, ReplicaError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().unwrap_or_default()))
    }
    fn u32(&mut self) -> Result<u32, ReplicaError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> Result<u64, ReplicaError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }
}

/// What a [`Sender`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SenderStats {
    pub batches: u64,
    pub ops: u64,
    /// Full copies sent (a new target, a resync).
    pub full_copies: u64,
    /// Writes too long for a batch, not sent.
    pub too_large: u64,
}

/// The sending side of one host: its targets (the hosts that would take
/// its UEs over, told by the front end), the groups each takes and the
/// numbering towards each.
#[derive(Debug, Default)]
pub struct Sender {
    /// Target -> the next batch's number, and its groups.
    targets: BTreeMap<u8, (u64, Groups)>,
    /// The group of a key (none: every target's); none: no groups.
    group_of: Option<fn(&str) -> Option<u8>>,
    out: std::collections::VecDeque<(u8, ReplicaMsg)>,
    pub stats: SenderStats,
}

impl Sender {
    pub fn new() -> Sender {
        Sender::default()
    }

    /// Keys are in the group `group_of` names (see "Groups").
    pub fn with_groups(mut self, group_of: fn(&str) -> Option<u8>) -> Sender {
        self.group_of = Some(group_of);
        self
    }

    pub fn targets(&self) -> impl Iterator<Item = u8> + '_ {
        self.targets.keys().copied()
    }

    /// The targets are now `targets`, each with the groups it takes;
    /// `snapshot` is the whole store now (with every change before it
    /// given to [`Sender::changes`]): a new target, or one whose groups
    /// changed, gets a full copy of its groups, a former one is told to
    /// forget.
    pub fn set_targets(&mut self, targets: &[(u8, Groups)], snapshot: &[(String, Versioned)]) {
        let gone: Vec<u8> = self.targets.keys().copied().filter(|t| !targets.iter().any(|(x, _)| x == t)).collect();
        for t in gone {
            self.targets.remove(&t);
            self.out.push_back((t, ReplicaMsg::Forget));
        }
        for &(t, groups) in targets {
            if self.targets.get(&t).is_none_or(|&(_, g)| g != groups) {
                self.full_copy(t, groups, snapshot);
            }
        }
    }

    /// Target `from` lost a batch: a full copy again (if it is a target).
    pub fn resync(&mut self, from: u8, snapshot: &[(String, Versioned)]) {
        if let Some(&(_, groups)) = self.targets.get(&from) {
            self.full_copy(from, groups, snapshot);
        }
    }

    /// Whether a target of `groups` takes `key`.
    fn takes(&self, groups: Groups, key: &str) -> bool {
        self.group_of.and_then(|f| f(key)).is_none_or(|g| groups.contains(g))
    }

    fn full_copy(&mut self, target: u8, groups: Groups, snapshot: &[(String, Versioned)]) {
        self.stats.full_copies += 1;
        self.targets.insert(target, (0, groups));
        let ops: Vec<Op> = snapshot
            .iter()
            .filter(|(k, _)| self.takes(groups, k))
            .map(|(k, v)| Op::Put { key: k.clone(), version: v.version, value: v.value.clone() })
            .collect();
        self.batches(target, ops, true);
    }

    /// The store's writes since the last call, in order: to every target
    /// that takes their keys' groups.
    pub fn changes(&mut self, changes: Vec<Change>) {
        if changes.is_empty() || self.targets.is_empty() {
            return;
        }
        let ops: Vec<Op> = changes.into_iter().map(Op::from).collect();
        let targets: Vec<(u8, Groups)> = self.targets.iter().map(|(&t, &(_, g))| (t, g)).collect();
        for (t, groups) in targets {
            let theirs = match groups == Groups::ALL || self.group_of.is_none() {
                true => ops.clone(),
                false => ops.iter().filter(|op| self.takes(groups, op.key())).cloned().collect(),
            };
            if !theirs.is_empty() {
                self.batches(t, theirs, false);
            }
        }
    }

    /// `ops` to `target` in batches of at most [`MAX_BATCH_LEN`]; a reset
    /// is sent even with no op (an empty store).
    fn batches(&mut self, target: u8, ops: Vec<Op>, mut reset: bool) {
        let mut batch: Vec<Op> = Vec::new();
        let mut len = 0;
        let flush = |s: &mut Sender, batch: &mut Vec<Op>, reset: &mut bool| {
            let Some((seq, _)) = s.targets.get_mut(&target) else { return };
            let n = *seq;
            *seq += 1;
            s.stats.batches += 1;
            s.stats.ops += batch.len() as u64;
            s.out.push_back((
                target,
                ReplicaMsg::Batch { reset: std::mem::take(reset), seq: n, ops: std::mem::take(batch) },
            ));
        };
        for op in ops {
            let l = op.encoded_len();
            if l > MAX_BATCH_LEN {
                self.stats.too_large += 1;
                continue;
            }
            if len + l > MAX_BATCH_LEN {
                flush(self, &mut batch, &mut reset);
                len = 0;
            }
            len += l;
            batch.push(op);
        }
        if !batch.is_empty() || reset {
            flush(self, &mut batch, &mut reset);
        }
    }

    /// The next message to send, and its target.
    #[must_use]
    pub fn poll(&mut self) -> Option<(u8, ReplicaMsg)> {
        self.out.pop_front()
    }
}

/// What [`Copies`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyStats {
    /// Writes applied.
    pub applied: u64,
    /// Writes older than what the copy holds, ignored.
    pub stale: u64,
    /// Batches out of sequence (one was lost on the way).
    pub gaps: u64,
    /// Puts dropped: all copies together would exceed their bound.
    pub over_bound: u64,
    /// Copies dropped at their sender's word.
    pub forgotten: u64,
}

/// The copy of one sender's store.
#[derive(Debug, Default)]
struct Copy {
    map: crate::Map,
    next_seq: u64,
    /// A batch was lost or a put dropped since the last full copy.
    broken: bool,
    /// A resync was asked for since.
    asked: bool,
}

/// What one key held costs against the bound: its key, value, and the
/// map's own share, so that empty values too are bounded in number.
const ENTRY_OVERHEAD: usize = 64;

fn entry_len(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

/// The copies one host keeps of other hosts' stores, by sender.
#[derive(Debug)]
pub struct Copies {
    copies: BTreeMap<u8, Copy>,
    max_bytes: usize,
    bytes: usize,
    pub stats: CopyStats,
}

impl Copies {
    /// Copies holding at most `max_bytes` of keys and values together.
    pub fn new(max_bytes: usize) -> Copies {
        Copies { copies: BTreeMap::new(), max_bytes, bytes: 0, stats: CopyStats::default() }
    }

    /// Keys and values held, octets (each key with an overhead).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The number of keys held of `from`, and whether the copy is whole
    /// (no batch lost since its last full copy).
    pub fn holds(&self, from: u8) -> Option<(usize, bool)> {
        self.copies.get(&from).map(|c| (c.map.len(), !c.broken))
    }

    /// The value and version of `key` in the copy of `from`'s store.
    pub fn get(&self, from: u8, key: &str) -> Option<&Versioned> {
        self.copies.get(&from)?.map.get(key)
    }

    /// `key` of `from`'s store holds `value` now, as this host learned
    /// before `from`'s replicated write of it comes (a visitor's record
    /// handed back to `from`): the copy holds the value under the version
    /// it had (0 if none), so that the write, of a newer version, still
    /// applies. Nothing without a copy of `from`; a value over the bound
    /// is dropped (the copy marked broken).
    pub fn overwrite(&mut self, from: u8, key: &str, value: &[u8]) {
        let Some(copy) = self.copies.get_mut(&from) else { return };
        let held = copy.map.get(key).map(|v| (v.version, entry_len(key, &v.value)));
        let freed = held.map_or(0, |(_, l)| l);
        let len = entry_len(key, value);
        if self.bytes - freed + len > self.max_bytes {
            self.stats.over_bound += 1;
            copy.broken = true;
            return;
        }
        self.bytes = self.bytes - freed + len;
        let version = held.map_or(0, |(v, _)| v);
        copy.map.insert(key.to_string(), Versioned { value: value.to_vec(), version });
    }

    /// `key` of `from`'s store is deleted now, as this host learned before
    /// `from`'s replicated delete of it comes (a UE that detached at a
    /// visitor): gone from the copy. Nothing without a copy of `from`.
    pub fn erase(&mut self, from: u8, key: &str) {
        let Some(copy) = self.copies.get_mut(&from) else { return };
        if let Some(v) = copy.map.remove(key) {
            self.bytes -= entry_len(key, &v.value);
        }
    }

    /// The senders whose copies are held here.
    pub fn senders(&self) -> impl Iterator<Item = u8> + '_ {
        self.copies.keys().copied()
    }

    /// A message of `from`; returns what to answer it (a resync request).
    #[must_use]
    pub fn receive(&mut self, from: u8, msg: ReplicaMsg) -> Option<ReplicaMsg> {
        match msg {
            ReplicaMsg::Forget => {
                if self.drop_copy(from) {
                    self.stats.forgotten += 1;
                }
                None
            }
            ReplicaMsg::Resync => None,
            ReplicaMsg::Batch { reset, seq, ops } => {
                if reset {
                    self.drop_copy(from);
                }
                let copy = self.copies.entry(from).or_default();
                let mut answer = None;
                if seq != copy.next_seq {
                    self.stats.gaps += 1;
                    copy.broken = true;
                    // One full copy asked for until it comes (a put over
                    // the bound would be dropped again: not asked for).
                    if !std::mem::replace(&mut copy.asked, true) {
                        answer = Some(ReplicaMsg::Resync);
                    }
                }
                copy.next_seq = seq + 1;
                for op in ops {
                    self.apply(from, op);
                }
                answer
            }
        }
    }

    fn apply(&mut self, from: u8, op: Op) {
        let Some(copy) = self.copies.get_mut(&from) else { return };
        let held = copy.map.get(op.key()).map(|v| (v.version, entry_len(op.key(), &v.value)));
        match op {
            Op::Put { key, version, value } => {
                if held.is_some_and(|(v, _)| v >= version) {
                    self.stats.stale += 1;
                    return;
                }
                let freed = held.map_or(0, |(_, l)| l);
                let len = entry_len(&key, &value);
                if self.bytes - freed + len > self.max_bytes {
                    self.stats.over_bound += 1;
                    copy.broken = true;
                    return;
                }
                self.bytes = self.bytes - freed + len;
                copy.map.insert(key, Versioned { value, version });
            }
            Op::Delete { key, version } => match held {
                Some((v, l)) if v <= version => {
                    self.bytes -= l;
                    copy.map.remove(&key);
                }
                Some(_) => {
                    self.stats.stale += 1;
                    return;
                }
                None => {}
            },
        }
        self.stats.applied += 1;
    }

    /// Drops the copy of `from`'s store, if one is held.
    fn drop_copy(&mut self, from: u8) -> bool {
        let Some(copy) = self.copies.remove(&from) else { return false };
        self.bytes -= copy.map.iter().map(|(k, v)| entry_len(k, &v.value)).sum::<usize>();
        true
    }

    /// The keys of `from`'s copy that `pick` picks, sorted, taken out of
    /// it (its host is gone and this host inherits them; what is left
    /// stays, a copy still; none left: forgotten); `None` if no copy of
    /// `from` is held.
    pub fn take_where(&mut self, from: u8, pick: impl Fn(&str) -> bool) -> Option<Vec<(String, Versioned)>> {
        let copy = self.copies.get_mut(&from)?;
        let keys: Vec<String> = copy.map.keys().filter(|k| pick(k)).cloned().collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(v) = copy.map.remove(&k) {
                self.bytes -= entry_len(&k, &v.value);
                out.push((k, v));
            }
        }
        if copy.map.is_empty() {
            self.copies.remove(&from);
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, version: u64, value: &str) -> Change {
        Change { key: key.into(), version, value: Some(value.as_bytes().to_vec()) }
    }

    fn del(key: &str, version: u64) -> Change {
        Change { key: key.into(), version, value: None }
    }

    fn snapshot(kv: &[(&str, u64, &str)]) -> Vec<(String, Versioned)> {
        kv.iter().map(|&(k, v, d)| (k.to_string(), Versioned { value: d.as_bytes().to_vec(), version: v })).collect()
    }

    fn drain(s: &mut Sender) -> Vec<(u8, ReplicaMsg)> {
        std::iter::from_fn(|| s.poll()).collect()
    }

    /// Carries every message of `s` to the copies of its targets (`from`:
    /// its number); returns the answers.
    fn carry(s: &mut Sender, from: u8, hosts: &mut BTreeMap<u8, Copies>) -> Vec<(u8, ReplicaMsg)> {
        let mut answers = Vec::new();
        for (to, msg) in drain(s) {
            let mut b = Vec::new();
            msg.encode(&mut b);
            let msg = ReplicaMsg::decode(&b).unwrap();
            if let Some(a) = hosts.get_mut(&to).unwrap().receive(from, msg) {
                answers.push((to, a));
            }
        }
        answers
    }

    fn held(c: &Copies, from: u8) -> BTreeMap<String, (u64, String)> {
        c.copies.get(&from).map_or_else(BTreeMap::new, |c| {
            c.map.iter().map(|(k, v)| (k.clone(), (v.version, String::from_utf8(v.value.clone()).unwrap()))).collect()
        })
    }

    #[test]
    fn a_target_gets_a_full_copy_then_every_write_in_order() {
        let mut hosts: BTreeMap<u8, Copies> = [(2, Copies::new(1 << 20)), (3, Copies::new(1 << 20))].into();
        let mut s = Sender::new();
        s.set_targets(&[(2, Groups::ALL)], &snapshot(&[("mme/ue/1", 3, "a"), ("mme/id/01000001", 1, "1")]));
        assert!(carry(&mut s, 1, &mut hosts).is_empty());
        assert_eq!(hosts[&2].holds(1), Some((2, true)));
        assert_eq!(hosts[&3].holds(1), None, "not a target");
        s.changes(vec![put("mme/ue/1", 4, "b"), put("mme/ue/2", 1, "c"), del("mme/id/01000001", 1)]);
        assert!(carry(&mut s, 1, &mut hosts).is_empty());
        let h = held(&hosts[&2], 1);
        assert_eq!(h.len(), 2);
        assert_eq!(h["mme/ue/1"], (4, "b".into()));
        assert_eq!(h["mme/ue/2"], (1, "c".into()));
        // A key deleted and written again starts at 1 again.
        s.changes(vec![del("mme/ue/2", 1), put("mme/ue/2", 1, "d")]);
        let _ = carry(&mut s, 1, &mut hosts);
        assert_eq!(held(&hosts[&2], 1)["mme/ue/2"], (1, "d".into()));
        // Inherited: the copy is taken whole, and nothing is held after.
        let copy = hosts.get_mut(&2).unwrap().take_where(1, |_| true).unwrap();
        assert_eq!(copy.len(), 2);
        assert_eq!(hosts[&2].bytes(), 0);
    }

    #[test]
    fn a_new_target_is_seeded_with_a_full_copy_and_the_old_one_forgets() {
        let mut hosts: BTreeMap<u8, Copies> = [(2, Copies::new(1 << 20)), (3, Copies::new(1 << 20))].into();
        let mut s = Sender::new();
        s.set_targets(&[(2, Groups::ALL)], &snapshot(&[("k1", 1, "a")]));
        s.changes(vec![put("k2", 1, "b")]);
        let _ = carry(&mut s, 1, &mut hosts);
        // The heir-to-be changes (a host joined or left): 3 is seeded with
        // the store as it is now, 2 drops its copy.
        s.set_targets(&[(3, Groups::ALL)], &snapshot(&[("k1", 1, "a"), ("k2", 1, "b")]));
        let _ = carry(&mut s, 1, &mut hosts);
        assert_eq!(hosts[&2].holds(1), None);
        assert_eq!(hosts[&2].stats.forgotten, 1);
        assert_eq!(hosts[&3].holds(1), Some((2, true)));
        assert_eq!(s.targets().collect::<Vec<_>>(), [3]);
        assert_eq!(s.stats.full_copies, 2);
        // The same targets again: nothing sent.
        s.set_targets(&[(3, Groups::ALL)], &[]);
        assert!(drain(&mut s).is_empty());
        // An empty store is still a reset (an old copy must go).
        s.set_targets(&[(2, Groups::ALL)], &[]);
        assert!(drain(&mut s).contains(&(2, ReplicaMsg::Batch { reset: true, seq: 0, ops: vec![] })));
    }

    /// Keys `g<n>/...` are of group n; others of none.
    fn group_of(key: &str) -> Option<u8> {
        key.strip_prefix('g')?.split('/').next()?.parse().ok()
    }

    #[test]
    fn each_target_gets_only_its_groups_and_a_full_copy_when_they_change() {
        let mut s = Sender::new().with_groups(group_of);
        // Every message sent, delivered from host 1.
        let deliver = |s: &mut Sender, hosts: &mut BTreeMap<u8, Copies>| {
            let sent = drain(s);
            for (to, msg) in &sent {
                assert_eq!(hosts.get_mut(to).unwrap().receive(1, msg.clone()), None);
            }
            sent
        };
        let mut hosts = BTreeMap::from([(2u8, Copies::new(1 << 20)), (3, Copies::new(1 << 20))]);
        let snap = snapshot(&[("g0/a", 1, "a"), ("g1/b", 1, "b"), ("shared", 1, "s")]);
        s.set_targets(&[(2, Groups::one(0)), (3, Groups::one(1))], &snap);
        deliver(&mut s, &mut hosts);
        let keys = |c: &Copies| held(c, 1).into_keys().collect::<Vec<_>>();
        assert_eq!(keys(&hosts[&2]), ["g0/a", "shared"]);
        assert_eq!(keys(&hosts[&3]), ["g1/b", "shared"]);
        // Writes go where their group goes; a key of no group to both.
        s.changes(vec![put("g1/c", 1, "c"), put("g0/a", 2, "a2"), del("shared", 2)]);
        let sent = deliver(&mut s, &mut hosts);
        assert_eq!(sent.len(), 2, "one batch each");
        assert_eq!(keys(&hosts[&2]), ["g0/a"]);
        assert_eq!(keys(&hosts[&3]), ["g1/b", "g1/c"]);
        // Nothing of a target's groups: nothing sent to it.
        s.changes(vec![put("g1/d", 1, "d")]);
        assert_eq!(deliver(&mut s, &mut hosts).iter().map(|(t, _)| *t).collect::<Vec<_>>(), [3]);
        // Host 3 takes both groups now: a full copy of both, to it alone.
        let snap = snapshot(&[("g0/a", 2, "a2"), ("g1/b", 1, "b"), ("g1/c", 1, "c"), ("g1/d", 1, "d")]);
        s.set_targets(&[(2, Groups::one(0)), (3, [0, 1].into_iter().collect())], &snap);
        let sent = deliver(&mut s, &mut hosts);
        assert!(sent.iter().all(|(t, m)| *t == 3 && matches!(m, ReplicaMsg::Batch { reset: true, .. })));
        assert_eq!(keys(&hosts[&3]), ["g0/a", "g1/b", "g1/c", "g1/d"]);
        assert_eq!(s.stats.full_copies, 3);
        // An heir of group 1 takes those keys; the rest stays a copy.
        let c = hosts.get_mut(&3).unwrap();
        let before = c.bytes();
        let taken = c.take_where(1, |k| group_of(k) == Some(1)).unwrap();
        assert_eq!(taken.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["g1/b", "g1/c", "g1/d"]);
        assert_eq!(keys(c), ["g0/a"]);
        assert!(c.bytes() < before);
        assert_eq!(c.take_where(1, |_| true).unwrap().len(), 1);
        assert!(c.take_where(1, |_| true).is_none(), "nothing left: forgotten");
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn writes_older_than_the_copy_are_ignored() {
        let mut c = Copies::new(1 << 20);
        let b = |seq, ops| ReplicaMsg::Batch { reset: seq == 0, seq, ops };
        let p = |k: &str, v, d: &str| Op::Put { key: k.into(), version: v, value: d.into() };
        assert_eq!(c.receive(1, b(0, vec![p("k", 5, "new")])), None);
        // A duplicate and an older put, then a delete of an older version.
        assert_eq!(c.receive(1, b(1, vec![p("k", 5, "dup"), p("k", 4, "old")])), None);
        assert_eq!(c.receive(1, b(2, vec![Op::Delete { key: "k".into(), version: 3 }])), None);
        assert_eq!(held(&c, 1)["k"], (5, "new".into()));
        assert_eq!(c.stats.stale, 3);
        // A newer one, then its delete.
        assert_eq!(c.receive(1, b(3, vec![p("k", 6, "newer"), Op::Delete { key: "k".into(), version: 6 }])), None);
        assert_eq!(c.holds(1), Some((0, true)));
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn a_value_learned_ahead_keeps_its_version_for_the_senders_write() {
        let mut c = Copies::new(1 << 20);
        let b = |seq, ops| ReplicaMsg::Batch { reset: seq == 0, seq, ops };
        let p = |k: &str, v, d: &str| Op::Put { key: k.into(), version: v, value: d.into() };
        c.overwrite(1, "k", b"ahead");
        assert_eq!(c.holds(1), None, "no copy of host 1: nothing");
        assert_eq!(c.receive(1, b(0, vec![p("k", 5, "old")])), None);
        c.overwrite(1, "k", b"ahead");
        c.overwrite(1, "n", b"new key");
        assert_eq!(held(&c, 1)["k"], (5, "ahead".into()));
        assert_eq!(held(&c, 1)["n"], (0, "new key".into()));
        // The sender's write of it comes: newer, applied.
        assert_eq!(c.receive(1, b(1, vec![p("k", 6, "ahead"), p("n", 1, "new key")])), None);
        assert_eq!(held(&c, 1)["k"], (6, "ahead".into()));
        assert_eq!(c.stats.stale, 0);
        let bytes = c.bytes();
        assert_eq!(c.take_where(1, |_| true).map(|v| v.len()), Some(2));
        assert!(bytes > 0 && c.bytes() == 0);
        // Bounded as any put.
        let mut small = Copies::new(100);
        assert_eq!(small.receive(1, b(0, vec![])), None);
        small.overwrite(1, "k", &[0; 64]);
        assert_eq!((small.holds(1), small.stats.over_bound), (Some((0, false)), 1));
    }

    #[test]
    fn a_lost_batch_asks_once_for_a_full_copy() {
        let mut hosts: BTreeMap<u8, Copies> = [(2, Copies::new(1 << 20))].into();
        let mut s = Sender::new();
        s.set_targets(&[(2, Groups::ALL)], &snapshot(&[("k1", 1, "a")]));
        let _ = carry(&mut s, 1, &mut hosts);
        s.changes(vec![put("k1", 2, "b")]);
        let lost = drain(&mut s);
        assert_eq!(lost.len(), 1, "a queue on the way was full");
        s.changes(vec![put("k2", 1, "c")]);
        s.changes(vec![put("k3", 1, "d")]);
        let answers = carry(&mut s, 1, &mut hosts);
        assert_eq!(answers, [(2, ReplicaMsg::Resync)], "asked once");
        assert_eq!(hosts[&2].holds(1), Some((3, false)), "kept, broken");
        assert_eq!(held(&hosts[&2], 1)["k1"], (1, "a".into()), "stale until the copy");
        s.resync(2, &snapshot(&[("k1", 2, "b"), ("k2", 1, "c"), ("k3", 1, "d")]));
        assert!(carry(&mut s, 1, &mut hosts).is_empty());
        assert_eq!(hosts[&2].holds(1), Some((3, true)));
        assert_eq!(held(&hosts[&2], 1)["k1"], (2, "b".into()));
        // A resync from a host that is no target is ignored.
        s.resync(9, &[]);
        assert!(drain(&mut s).is_empty());
    }

    #[test]
    fn copies_are_bounded_and_batches_too() {
        let mut c = Copies::new(10 + ENTRY_OVERHEAD);
        let b = ReplicaMsg::Batch {
            reset: true,
            seq: 0,
            ops: vec![
                Op::Put { key: "k1".into(), version: 1, value: b"12345".to_vec() },
                Op::Put { key: "k2".into(), version: 1, value: b"12345".to_vec() },
            ],
        };
        assert_eq!(c.receive(1, b), None, "over the bound: no resync, it would be dropped again");
        assert_eq!(c.stats.over_bound, 1);
        assert_eq!((c.bytes(), c.holds(1)), (7 + ENTRY_OVERHEAD, Some((1, false))));
        // A large full copy goes in several batches, each within the bound.
        let mut s = Sender::new();
        let big = "x".repeat(1000);
        let snap: Vec<(String, Versioned)> =
            (0..200).map(|i| (format!("k{i}"), Versioned { value: big.as_bytes().to_vec(), version: 1 })).collect();
        s.set_targets(&[(2, Groups::ALL)], &snap);
        let out = drain(&mut s);
        assert!(out.len() >= 3);
        for (i, (_, m)) in out.iter().enumerate() {
            let mut e = Vec::new();
            m.encode(&mut e);
            assert!(e.len() <= MAX_BATCH_LEN + BATCH_HEADER);
            assert!(matches!(m, ReplicaMsg::Batch { reset, seq, .. } if *reset == (i == 0) && *seq == i as u64));
        }
        // A write that fits no batch is not sent, and counted.
        s.changes(vec![put("huge", 1, &"y".repeat(MAX_BATCH_LEN))]);
        assert!(drain(&mut s).is_empty());
        assert_eq!(s.stats.too_large, 1);
    }

    #[tokio::test]
    async fn an_embedded_store_feeds_every_write_in_order() {
        let store = crate::Store::memory_with_feed();
        store.put("a", b"1").await.unwrap();
        store.compare_and_set("a", Some(1), b"2").await.unwrap();
        assert!(store.compare_and_set("a", Some(1), b"x").await.is_err(), "a lost write is no change");
        store.delete("a").await.unwrap();
        store.compare_and_set("a", None, b"3").await.unwrap();
        assert_eq!(store.take_changes(), [put("a", 1, "1"), put("a", 2, "2"), del("a", 2), put("a", 1, "3")]);
        assert!(store.take_changes().is_empty());
        assert!(crate::Store::memory().take_changes().is_empty(), "no feed unless asked");
    }

    #[test]
    fn bad_messages_are_errors() {
        let mut b = Vec::new();
        ReplicaMsg::Batch {
            reset: false,
            seq: 7,
            ops: vec![
                Op::Put { key: "k".into(), version: 2, value: b"v".to_vec() },
                Op::Delete { key: "j".into(), version: 1 },
            ],
        }
        .encode(&mut b);
        for n in 0..b.len() {
            assert!(ReplicaMsg::decode(&b[..n]).is_err(), "{n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(ReplicaMsg::decode(&long), Err(ReplicaError::TooLong));
        assert_eq!(ReplicaMsg::decode(&[9]), Err(ReplicaError::Unknown(9)));
        // A count far beyond the octets: refused before allocating.
        let mut lying = vec![BATCH, 0];
        lying.extend_from_slice(&0u64.to_be_bytes());
        lying.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(ReplicaMsg::decode(&lying), Err(ReplicaError::Truncated));
        let mut bad_key = vec![BATCH, 0];
        bad_key.extend_from_slice(&0u64.to_be_bytes());
        bad_key.extend_from_slice(&1u32.to_be_bytes());
        bad_key.extend_from_slice(&[DELETE, 0, 1, 0xff]);
        bad_key.extend_from_slice(&1u64.to_be_bytes());
        assert_eq!(ReplicaMsg::decode(&bad_key), Err(ReplicaError::BadKey));
        for m in [ReplicaMsg::Forget, ReplicaMsg::Resync] {
            let mut e = Vec::new();
            m.encode(&mut e);
            assert_eq!(ReplicaMsg::decode(&e), Ok(m));
        }
    }
}
