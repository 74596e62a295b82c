//! A host's host-local store, replicated to its replica host (issue 13
//! item 2, seed 004 4.3; `mme-host --store local`): the thin shell over
//! [`mobicore_store::replica`]. The host's UE records live in its own
//! embedded store ([`Store::memory_with_feed`]), written by
//! [`mobicore_mme::stored::StoredUes`] as with any store (cold: when a
//! procedure completes; hot: after every message). After every sync, the
//! store's writes go to the replica host the front end named
//! ([`Frame::ReplicateTo`]: the host that would be this one's heir), as
//! [`Frame::Replica`] through the front end, before what the event sends
//! (write-ahead, as with a shared store). A new replica host first gets a
//! full copy. This host keeps the copies others send it apart from its own
//! store, and when the front end says one of them is gone
//! ([`Frame::Inherit`]) it takes that copy into its own store: the gone
//! host's UEs are then found there at their next message as if it had
//! written them, and are replicated on to this host's own replica host.
//! A record the copy shares with this host's own store (a UE that
//! attached again here) stays this host's.

use super::wire::Frame;
use mobicore_common::counters::Counters;
use mobicore_common::{Groups, Imsi};
use mobicore_mme::stored::keys;
use mobicore_store::replica::{Copies, Op, ReplicaMsg, Sender};
use mobicore_store::{Store, StoreError, Versioned};
use std::collections::{HashMap, VecDeque};
use tokio::sync::mpsc;

/// A host's own store and its replication.
pub struct LocalReplica {
    /// This host's number.
    host: u8,
    store: Store,
    sender: Sender,
    copies: Copies,
    /// What this host handed back (visitors' keys) or was sent ahead of
    /// a copy ([`Frame::Copied`]), until the owner's replicated write of
    /// them shows that its copy holds them: a procedure of the UE placed
    /// here before that reads these, not the copy (which a full copy of
    /// the owner's store, sent when this host became its replica host,
    /// may set back even after a [`Frame::Copied`]), and an inheritance
    /// takes them. At most [`MAX_HANDED`] keys, the oldest forgotten
    /// first; none of a copy taken or forgotten.
    handed: HashMap<String, Ahead>,
    /// The keys in the order handed back, with stale ones (removed since).
    handed_order: VecDeque<String>,
    counters: Counters,
    /// The counters' values as last published (see [`LocalReplica::send`]).
    published: [u64; STATS],
}

/// How many replication counters [`LocalReplica::send`] publishes.
const STATS: usize = 10;

/// A value read ahead of the copies ([`LocalReplica::handed`]).
#[derive(Debug, PartialEq)]
struct Ahead {
    value: Vec<u8>,
    /// This host handed it back (else: a [`Frame::Copied`] brought it).
    own: bool,
}

/// Keys handed back and not yet copied at most.
const MAX_HANDED: usize = 1 << 16;

impl LocalReplica {
    /// Over `store` (a [`Store::memory_with_feed`]); the copies of other
    /// hosts' stores hold at most `max_copy_bytes` together.
    pub fn new(host: u8, store: Store, max_copy_bytes: usize, counters: Counters) -> LocalReplica {
        LocalReplica {
            host,
            store,
            sender: Sender::new().with_groups(keys::group_of),
            copies: Copies::new(max_copy_bytes),
            handed: HashMap::new(),
            handed_order: VecDeque::new(),
            counters,
            published: [0; STATS],
        }
    }

    /// The store's writes since the last call go to the replica host(s),
    /// queued on `out` (towards the front end) before anything else.
    pub fn flush(&mut self, out: &mpsc::Sender<Frame>) {
        self.sender.changes(self.store.take_changes());
        self.send(out);
    }

    /// A replicated message of host `peer`, relayed by the front end.
    async fn on_msg(&mut self, peer: u8, msg: ReplicaMsg, out: &mpsc::Sender<Frame>) {
        if msg == ReplicaMsg::Resync {
            self.sender.changes(self.store.take_changes());
            let snapshot = self.snapshot().await;
            self.sender.resync(peer, &snapshot);
            self.counters.incr("replica_resync_asked");
            return;
        }
        // The keys it writes that this host handed back: once the
        // copy holds what was handed back, the copy is read again.
        let written: Vec<String> = match &msg {
            ReplicaMsg::Batch { ops, .. } if !self.handed.is_empty() => ops
                .iter()
                .map(|op| match op {
                    Op::Put { key, .. } | Op::Delete { key, .. } => key.clone(),
                })
                .filter(|k| self.handed.contains_key(k))
                .collect(),
            // No copy of the sender's left: nor anything lent ahead of it.
            ReplicaMsg::Forget => {
                let copies = &self.copies;
                self.handed.retain(|k, _| copies.get(peer, k).is_none());
                Vec::new()
            }
            _ => Vec::new(),
        };
        if let Some(answer) = self.copies.receive(peer, msg) {
            if out.try_send(Frame::Replica { peer, msg: answer.into() }).is_err() {
                self.counters.incr("replica_frame_dropped");
            }
        }
        for k in written {
            if self.copies.get(peer, &k).is_none_or(|v| self.handed.get(&k).is_some_and(|a| a.value == v.value)) {
                self.handed.remove(&k);
            }
        }
    }

    /// A replication frame of the front end.
    pub async fn on_frame(&mut self, frame: Frame, out: &mpsc::Sender<Frame>) {
        match frame {
            Frame::ReplicateTo { targets } => {
                // Every write so far in the stream first: the copy is newer.
                self.sender.changes(self.store.take_changes());
                let snapshot = self.snapshot().await;
                self.sender.set_targets(&targets, &snapshot);
                tracing::info!(?targets, "replica hosts");
            }
            Frame::Replica { peer, msg } => match msg.decode() {
                Ok(msg) => self.on_msg(peer, msg, out).await,
                // Its sequence is lost with it: the next batch's gap asks
                // for a full copy.
                Err(e) => {
                    self.counters.incr("replica_msg_malformed");
                    tracing::warn!(peer, "replicated message: {e}");
                }
            },
            Frame::Inherit { host, groups } => self.inherit(host, groups, true).await,
            // A host gone earlier whose heir went too: its copy, if this
            // host is one of its further replica hosts.
            Frame::Adopt { host, groups } => self.inherit(host, groups, false).await,
            _ => {}
        }
        self.send(out);
    }

    /// The record of the UE with M-TMSI `m_tmsi` and its M-TMSI index key,
    /// from what this host handed back last, or else from the copy of
    /// another host's store that holds it (a procedure of that host's UE
    /// placed here, seed 004 4.3): for this host's own store
    /// ([`mobicore_mme::stored::StoredUes::take_back`]). Empty if none
    /// holds it.
    pub fn lend(&self, m_tmsi: u32) -> Vec<(String, Vec<u8>)> {
        self.lend_keys(m_tmsi).unwrap_or_default()
    }

    fn lend_keys(&self, m_tmsi: u32) -> Option<Vec<(String, Vec<u8>)>> {
        // Each key from what was handed back (empty: deleted), else from a copy.
        let get = |key: &str| match self.handed.get(key) {
            Some(a) => Some(a.value.clone()).filter(|v| !v.is_empty()),
            None => self.copies.senders().find_map(|from| self.copies.get(from, key)).map(|v| v.value.clone()),
        };
        let index = keys::mtmsi(m_tmsi);
        let imsi = get(&index)?;
        let record = keys::record(&std::str::from_utf8(&imsi).ok()?.parse::<Imsi>().ok()?);
        Some(vec![(record.clone(), get(&record)?), (index, imsi)])
    }

    /// A visitor's keys handed back ([`Frame::WriteBack`]): read by
    /// [`LocalReplica::lend`] until copied.
    pub fn handed_back(&mut self, writes: &[(String, Vec<u8>)]) {
        self.remember(writes, true);
    }

    /// `writes` read ahead of the copies, until the owner's replicated
    /// write of the same values reaches them. What this host handed back
    /// itself is newer than any [`Frame::Copied`] still on its way (of
    /// its own earlier hand-back, or of the mirror of a hot visitor):
    /// the front end sends the UE's next procedure after the last.
    fn remember(&mut self, writes: &[(String, Vec<u8>)], own: bool) {
        for (k, v) in writes {
            let ahead = Ahead { value: v.clone(), own };
            match self.handed.get_mut(k) {
                None => {
                    self.handed.insert(k.clone(), ahead);
                    self.handed_order.push_back(k.clone());
                }
                Some(a) if own || !a.own => *a = ahead,
                Some(_) => {}
            }
        }
        // The order keeps keys removed since (stale entries, skipped):
        // bounded at twice the keys.
        while self.handed.len() > MAX_HANDED || self.handed_order.len() > 2 * MAX_HANDED {
            let Some(k) = self.handed_order.pop_front() else { break };
            self.handed.remove(&k);
        }
    }

    /// Keys of host `owner`'s store a visitor handed back to it
    /// ([`Frame::Copied`]): the copy of it here holds them now, and they
    /// are remembered as a visitor remembers what it handed back. A full
    /// copy of the owner's store sent before its write of them (this host
    /// just named its replica host) would set the copy back; lent or
    /// inherited meanwhile, they are still read.
    pub fn copied(&mut self, owner: u8, writes: &[(String, Vec<u8>)]) {
        for (k, v) in writes {
            match v.is_empty() {
                // A UE that detached at the visitor.
                true => self.copies.erase(owner, k),
                false => self.copies.overwrite(owner, k, v),
            }
        }
        self.remember(writes, false);
        self.counters.incr("replica_copied_ahead");
    }

    /// Host `host` is gone and this host the heir of its UEs of `groups`:
    /// their part of its copy joins this host's own store (records this
    /// host has of its own, newer: those the host's heir that went too
    /// had taken and replicated here, stay); the rest of the copy stays
    /// (with two failures survived, other groups' heir may be another
    /// host, this one their next). `expected`: this host is its first
    /// replica host (the copy missing is counted).
    async fn inherit(&mut self, host: u8, groups: Groups, expected: bool) {
        let whole = self.copies.holds(host).is_some_and(|(_, whole)| whole);
        let theirs = |key: &str| keys::group_of(key).is_none_or(|g| groups.contains(g));
        let Some(copy) = self.copies.take_where(host, theirs) else {
            if expected {
                self.counters.incr("replica_inherit_no_copy");
                tracing::warn!(host, "inheriting host {host}'s UEs with no copy of its records");
            }
            return;
        };
        if !whole {
            self.counters.incr("replica_inherit_incomplete");
        }
        // Its UEs are this host's own now: nothing of them is lent. What
        // was handed back to it or copied ahead and not yet written by it
        // here is newer than the copy.
        // (An empty one: the UE detached at a visitor, not inherited.)
        let copy: Vec<(String, Vec<u8>)> = copy
            .into_iter()
            .map(|(key, v)| {
                let value = self.handed.remove(&key).map_or(v.value, |a| a.value);
                (key, value)
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let handed = &self.handed;
        self.handed_order.retain(|k| handed.contains_key(k));
        let n = copy.len();
        for (key, value) in copy {
            match self.store.compare_and_set(&key, None, &value).await {
                Ok(_) => self.counters.incr("replica_inherited"),
                Err(StoreError::Conflict { .. }) => self.counters.incr("replica_inherit_kept_own"),
                Err(e) => {
                    self.counters.incr("replica_inherit_failed");
                    tracing::warn!(%key, "inheriting a record: {e}");
                }
            }
        }
        println!("mme-host {}: inherited host{host}'s {n} records, {} of its 256 groups", self.host, groups.len());
    }

    async fn snapshot(&self) -> Vec<(String, Versioned)> {
        match self.store.scan_prefix("").await {
            Ok(all) => all,
            Err(e) => {
                // Not for an embedded store in memory; an empty copy is a
                // reset that the next writes fill.
                tracing::warn!("reading the store for a full copy: {e}");
                Vec::new()
            }
        }
    }

    /// What the sender has for the front end; the counters brought up to date.
    fn send(&mut self, out: &mpsc::Sender<Frame>) {
        while let Some((to, msg)) = self.sender.poll() {
            // Lost (the queue full): the replica sees the gap and asks again.
            if out.try_send(Frame::Replica { peer: to, msg: msg.into() }).is_err() {
                self.counters.incr("replica_frame_dropped");
            }
        }
        let s = self.sender.stats;
        let c = self.copies.stats;
        let stats: [(&'static str, u64); STATS] = [
            ("replica_batches_sent", s.batches),
            ("replica_ops_sent", s.ops),
            ("replica_full_copies_sent", s.full_copies),
            ("replica_too_large", s.too_large),
            ("replica_ops_applied", c.applied),
            ("replica_ops_stale", c.stale),
            ("replica_gaps", c.gaps),
            ("replica_over_bound", c.over_bound),
            ("replica_copies_forgotten", c.forgotten),
            ("replica_copy_bytes", self.copies.bytes() as u64),
        ];
        // Only those that moved: this runs after every event, and a
        // counter's lookup each time was 1.7% of a loaded host's CPU.
        for ((name, v), published) in stats.into_iter().zip(&mut self.published) {
            if v != std::mem::replace(published, v) {
                self.counters.get(name).store(v, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Hosts 1 and 2 with their own stores; what each queued for the
    /// front end is relayed as the front end does.
    struct Pair {
        stores: [Store; 2],
        hosts: [LocalReplica; 2],
        out: [(mpsc::Sender<Frame>, mpsc::Receiver<Frame>); 2],
    }

    impl Pair {
        fn new() -> Pair {
            let stores = [Store::memory_with_feed(), Store::memory_with_feed()];
            let hosts =
                [1, 2].map(|h| LocalReplica::new(h, stores[usize::from(h) - 1].clone(), 1 << 20, Counters::new()));
            Pair { stores, hosts, out: [mpsc::channel(64), mpsc::channel(64)] }
        }

        /// Host 1 holds UE `imsi` (M-TMSI `m`: record "v1" and its index
        /// key) and replicates to host 2, which has the full copy: the keys.
        async fn one_ue(&mut self, imsi: &str, m: u32) -> (String, String) {
            let (record, index) = (format!("mme/ue/{imsi}"), keys::mtmsi(m));
            self.stores[0].put(&record, b"v1").await.unwrap();
            self.stores[0].put(&index, imsi.as_bytes()).await.unwrap();
            self.hosts[0].on_frame(Frame::ReplicateTo { targets: vec![(2, Groups::ALL)] }, &self.out[0].0).await;
            self.relay().await;
            (record, index)
        }

        /// Relays every Replica frame queued, until none is.
        async fn relay(&mut self) -> usize {
            let mut n = 0;
            loop {
                let mut moved = false;
                for from in 0..2 {
                    while let Ok(Frame::Replica { peer, msg }) = self.out[from].1.try_recv() {
                        let to = usize::from(peer) - 1;
                        let f = Frame::Replica { peer: from as u8 + 1, msg };
                        self.hosts[to].on_frame(f, &self.out[to].0).await;
                        (moved, n) = (true, n + 1);
                    }
                }
                if !moved {
                    return n;
                }
            }
        }
    }

    /// A replicated message the replica host cannot read is counted and
    /// dropped; the batch it was is a gap in the sequence, so the next one
    /// brings a full copy.
    #[tokio::test]
    async fn a_malformed_replicated_message_is_counted_and_the_gap_filled() {
        let mut p = Pair::new();
        let (record, _) = p.one_ue("001010000000001", 0x0100_0001).await;
        p.stores[0].put(&record, b"v2").await.unwrap();
        p.hosts[0].flush(&p.out[0].0);
        let Ok(Frame::Replica { peer: 2, .. }) = p.out[0].1.try_recv() else { panic!("v2 not replicated") };
        let bad = Frame::Replica { peer: 1, msg: super::super::wire::Replicated::raw(&[77, 0, 1]) };
        p.hosts[1].on_frame(bad, &p.out[1].0).await;
        assert_eq!(p.hosts[1].counters.value("replica_msg_malformed"), 1);
        assert_eq!(p.hosts[1].copies.get(1, &record).unwrap().value, b"v1");
        p.stores[0].put(&record, b"v3").await.unwrap();
        p.hosts[0].flush(&p.out[0].0);
        p.relay().await;
        assert_eq!(p.hosts[1].copies.get(1, &record).unwrap().value, b"v3");
        assert_eq!(p.hosts[0].counters.value("replica_resync_asked"), 1);
    }

    #[tokio::test]
    async fn a_visitor_lends_from_its_copy_and_what_it_handed_back_until_copied() {
        let mut p = Pair::new();
        let (imsi, m) = ("001010000000001", 0x0100_0001);
        let (record, index) = p.one_ue(imsi, m).await;
        let lent = |r: &LocalReplica| r.lend(m).into_iter().collect::<BTreeMap<_, _>>();
        assert_eq!(lent(&p.hosts[1])[&record], b"v1");
        assert_eq!(lent(&p.hosts[1])[&index], imsi.as_bytes());
        assert!(p.hosts[1].lend(0x0100_0002).is_empty(), "no copy holds it");
        // Handed back (v2), then again (v3) before the first is copied.
        let w = |v: &[u8]| vec![(record.clone(), v.to_vec()), (index.clone(), imsi.as_bytes().to_vec())];
        p.hosts[1].handed_back(&w(b"v2"));
        assert_eq!(lent(&p.hosts[1])[&record], b"v2");
        p.hosts[1].handed_back(&w(b"v3"));
        p.hosts[1].copied(1, &w(b"v2"));
        assert_eq!(lent(&p.hosts[1])[&record], b"v3", "the newer hand-back still");
        // A full copy of host 1 as it was before (v1) does not set it back.
        let resync = Frame::Replica { peer: 2, msg: ReplicaMsg::Resync.into() };
        p.hosts[0].on_frame(resync, &p.out[0].0).await;
        p.relay().await;
        assert_eq!(p.hosts[1].copies.get(1, &record).map(|v| v.value.clone()), Some(b"v1".to_vec()));
        assert_eq!(lent(&p.hosts[1])[&record], b"v3");
        // Host 1's write of v2, then of v3: only then is the copy read.
        p.stores[0].put(&record, b"v2").await.unwrap();
        p.hosts[0].flush(&p.out[0].0);
        p.relay().await;
        assert_eq!(lent(&p.hosts[1])[&record], b"v3");
        p.stores[0].put(&record, b"v3").await.unwrap();
        p.hosts[0].flush(&p.out[0].0);
        p.relay().await;
        assert!(!p.hosts[1].handed.contains_key(&record));
        assert_eq!(lent(&p.hosts[1])[&record], b"v3", "the copy holds it now");
        assert_eq!(p.hosts[1].copies.stats.stale, 0);
        // Inherited: nothing lent ahead of it is left.
        p.hosts[1].handed_back(&w(b"v4"));
        p.hosts[1].on_frame(Frame::Inherit { host: 1, groups: Groups::ALL }, &p.out[1].0).await;
        assert!(p.hosts[1].handed.is_empty() && p.hosts[1].handed_order.is_empty());
    }

    /// Host 2 is host 1's replica host, not the visitor: a `Copied` it
    /// is sent outlives a full copy of host 1 sent before host 1's write,
    /// for a procedure placed here and for an inheritance meanwhile.
    #[tokio::test]
    async fn a_replica_host_keeps_what_was_copied_ahead_over_an_older_full_copy() {
        let mut p = Pair::new();
        let (imsi, m) = ("001010000000007", 0x0100_0007);
        let (record, index) = p.one_ue(imsi, m).await;
        let w = vec![(record.clone(), b"v2".to_vec()), (index.clone(), imsi.as_bytes().to_vec())];
        p.hosts[1].copied(1, &w);
        let lent = |r: &LocalReplica| r.lend(m).into_iter().collect::<BTreeMap<_, _>>();
        assert_eq!(lent(&p.hosts[1])[&record], b"v2");
        // A full copy of host 1 (v1) reaches host 2 before its write of v2.
        let resync = Frame::Replica { peer: 2, msg: ReplicaMsg::Resync.into() };
        p.hosts[0].on_frame(resync, &p.out[0].0).await;
        p.relay().await;
        assert_eq!(p.hosts[1].copies.get(1, &record).map(|v| v.value.clone()), Some(b"v1".to_vec()), "set back");
        assert_eq!(lent(&p.hosts[1])[&record], b"v2", "what was copied ahead is still lent");
        // Host 1 is gone before its write reaches host 2: the heir takes v2.
        p.hosts[1].on_frame(Frame::Inherit { host: 1, groups: Groups::ALL }, &p.out[1].0).await;
        assert_eq!(p.stores[1].get(&record).await.unwrap().map(|v| v.value), Some(b"v2".to_vec()));
        assert!(p.hosts[1].handed.is_empty());
    }

    /// A UE that detached at a visitor: its keys come as deletes (empty
    /// values). The copies lose them, nothing lends them, even after an
    /// older full copy, and an heir does not inherit them.
    #[tokio::test]
    async fn a_ue_detached_at_a_visitor_is_neither_lent_nor_inherited() {
        let mut p = Pair::new();
        let (imsi, m) = ("001010000000008", 0x0100_0008);
        let (record, index) = p.one_ue(imsi, m).await;
        assert!(!p.hosts[1].lend(m).is_empty());
        let deletes = vec![(record.clone(), Vec::new()), (index.clone(), Vec::new())];
        p.hosts[1].copied(1, &deletes);
        assert!(p.hosts[1].copies.get(1, &record).is_none());
        assert!(p.hosts[1].lend(m).is_empty());
        let resync = Frame::Replica { peer: 2, msg: ReplicaMsg::Resync.into() };
        p.hosts[0].on_frame(resync, &p.out[0].0).await;
        p.relay().await;
        assert!(p.hosts[1].copies.get(1, &record).is_some(), "set back");
        assert!(p.hosts[1].lend(m).is_empty(), "still not lent");
        p.hosts[1].on_frame(Frame::Inherit { host: 1, groups: Groups::ALL }, &p.out[1].0).await;
        assert_eq!(p.stores[1].get(&record).await.unwrap(), None);
        assert_eq!(p.stores[1].get(&index).await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_heir_takes_the_gone_hosts_copy_into_its_own_store_and_replicates_it_on() {
        let mut p = Pair::new();
        p.stores[0].put("mme/ue/1", b"a").await.unwrap();
        // Host 1 replicates to host 2 (a full copy first), host 2 to host 1.
        for (h, to) in [(0, 2), (1, 1)] {
            p.hosts[h].on_frame(Frame::ReplicateTo { targets: vec![(to, Groups::ALL)] }, &p.out[h].0).await;
        }
        assert_eq!(p.relay().await, 2);
        p.stores[0].put("mme/ue/1", b"b").await.unwrap();
        p.stores[0].put("mme/ue/2", b"c").await.unwrap();
        // The same IMSI attached again at host 2: its own record.
        p.stores[1].put("mme/ue/2", b"own").await.unwrap();
        for h in 0..2 {
            p.hosts[h].flush(&p.out[h].0);
        }
        assert_eq!(p.relay().await, 2);
        assert_eq!(p.hosts[1].copies.holds(1), Some((2, true)));

        // Host 1 is gone: host 2 inherits; its own record stays.
        p.hosts[1].on_frame(Frame::Inherit { host: 1, groups: Groups::ALL }, &p.out[1].0).await;
        let value = |s: &Store, k: &'static str| {
            let s = s.clone();
            async move { s.get(k).await.unwrap().map(|v| v.value) }
        };
        assert_eq!(value(&p.stores[1], "mme/ue/1").await, Some(b"b".to_vec()));
        assert_eq!(value(&p.stores[1], "mme/ue/2").await, Some(b"own".to_vec()));
        assert_eq!(p.hosts[1].counters.value("replica_inherit_kept_own"), 1);
        assert_eq!(p.hosts[1].copies.holds(1), None);
        // What it inherited goes on to its own replica host (here host 1's
        // copy of host 2), as any write of its own.
        p.hosts[1].flush(&p.out[1].0);
        assert_eq!(p.relay().await, 1);
        assert_eq!(p.hosts[0].copies.holds(2), Some((2, true)));
        // Inheriting with no copy is counted, not a failure.
        p.hosts[1].on_frame(Frame::Inherit { host: 9, groups: Groups::ALL }, &p.out[1].0).await;
        assert_eq!(p.hosts[1].counters.value("replica_inherit_no_copy"), 1);
    }

    /// An heir of some of a dead host's groups takes those records only;
    /// the rest of the copy stays, for the heir of the others.
    #[tokio::test]
    async fn an_heir_takes_its_groups_of_the_copy_and_leaves_the_rest() {
        let mut p = Pair::new();
        // Two UEs of different replica groups, each with an index key.
        let imsis: Vec<String> = (0..20).map(|i| format!("0010100000001{i:02}")).collect();
        let g = |i: &str| mobicore_elastic::router::imsi_group(i);
        let a = imsis[0].clone();
        let b = imsis.iter().find(|i| g(i) != g(&a)).unwrap().clone();
        let (ra, ia) = p.one_ue(&a, 0x0100_0000 | u32::from(g(&a)) << 16 | 1).await;
        let (rb, ib) = p.one_ue(&b, 0x0100_0000 | u32::from(g(&b)) << 16 | 2).await;
        assert_eq!(p.hosts[1].copies.holds(1).map(|(n, _)| n), Some(4));
        p.hosts[1].on_frame(Frame::Inherit { host: 1, groups: Groups::one(g(&a)) }, &p.out[1].0).await;
        for k in [&ra, &ia] {
            assert!(p.stores[1].get(k).await.unwrap().is_some(), "{k} inherited");
        }
        for k in [&rb, &ib] {
            assert!(p.stores[1].get(k).await.unwrap().is_none(), "{k} is another heir's");
        }
        assert_eq!(p.hosts[1].copies.holds(1).map(|(n, _)| n), Some(2), "the rest stays a copy");
        // Its heir went too: this host adopts b's group, from the copy.
        p.hosts[1].on_frame(Frame::Adopt { host: 1, groups: Groups::one(g(&b)) }, &p.out[1].0).await;
        for k in [&rb, &ib] {
            assert!(p.stores[1].get(k).await.unwrap().is_some(), "{k} adopted");
        }
        assert_eq!(p.hosts[1].copies.holds(1), None);
    }
}
