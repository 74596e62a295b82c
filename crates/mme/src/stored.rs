//! The UE contexts in the store (issue 13 item 2, seed 004 4.3): after the
//! MME handled an event, [`StoredUes::sync`] writes the records of the UEs
//! it touched, and [`StoredUes::load`] brings a UE that another host wrote
//! into this one. Any [`Store`] works: embedded (host-local, the replica
//! hosts' copies) or Redis (the one shared store).
//!
//! Why here and not in `mobicore-elastic`: this layer reads the MME's
//! journal of touched UEs and its procedure steps, and the hosts of the
//! elastic MME are MME processes that link this crate anyway; the elastic
//! crate stays free of MME internals and of I/O (balancers, ring,
//! forwarder). The MME core stays sans-I/O: [`crate::transfer`] turns
//! contexts into records and back, this module only awaits the store.
//!
//! # Replication modes
//! - [`Replication::Cold`]: a UE's record is written when a procedure
//!   completes, i.e. when it is registered with no procedure running
//!   ([`crate::transfer::UeSummary::settled`]); a host that takes the UE
//!   over carries on from there, and a procedure that was running restarts
//!   (the UE repeats its request on its own timer).
//! - [`Replication::Hot`]: after every event that touched the UE, so that
//!   another host carries on mid-procedure from the step the record holds.
//!
//! # Keys
//! - `mme/ue/<IMSI>`: the record ([`crate::context_codec`]);
//! - `mme/mtmsi/<M-TMSI, 8 hex digits>`: the IMSI, for a UE that comes back
//!   with its S-TMSI or GUTI;
//! - `mme/id/<MME-UE-S1AP-ID, 8 hex digits>`: the IMSI, for the next
//!   message of a connected UE (UE-associated S1AP, S11 by TEID).
//!
//! A record is at most [`context_codec::MAX_RECORD_LEN`] octets; a store
//! whose `max_value_len` is smaller refuses longer ones (counted in
//! `store_write_failed`, the UE stays served from memory).
//!
//! A UE known by no IMSI yet (an attach by GUTI before its Identity
//! Response) is not written: its attach restarts on another host. The
//! indexes are pointers only: a load checks that the record it reaches
//! really names the key.
//!
//! # Writes and conflicts
//! Each write is a compare-and-set on the version this host last read or
//! wrote, so a UE's record is never written by two hosts at once. A record
//! this host has no version of is written only if absent, or if it holds
//! another context of the same IMSI (another MME-UE-S1AP-ID or
//! generation): a UE that attached again supersedes its old context (TS
//! 24.301 5.5.1.2.7 d). A lost compare-and-set is counted
//! (`store_cas_conflict`) and resolved by refusal: the other host's record
//! is the UE's state, so this host drops its copy (evicts it, sending
//! nothing) and a later message of the UE loads the winner's record
//! ([`StoredUes::load`], the reload). The event that made the losing
//! change is not replayed: its answer may already be on the wire, which
//! is why a UE must be served by one host at a time and the conflict is
//! reported ([`SyncReport::conflicts`]).
//!
//! # Claims (a shared store)
//! A host that loads a UE's record to serve a message writes it back
//! unchanged at that event's sync unless the event writes it anyway (cold
//! replication writes nothing mid-procedure): its version moves before
//! anything of the event goes out, so a copy another host still holds
//! (the owner's, between a placement elsewhere and its `Lent`, whose
//! guard timer fires) can no longer win a compare-and-set against the
//! host serving the UE. Without it, such a write won, the serving host
//! lost its copy with the S1 connection up, and the UE's next message went
//! to a host that thought it idle. Counted: `store_ue_claimed`; a lost
//! claim is a conflict like any (the event's actions withdrawn). Only
//! over a shared store (Redis): a host-local store has no other writer.
//!
//! # Unchanged records
//! With a host-local store, a UE the events touched whose record encodes
//! exactly as the one this host last wrote or read (a keyed hash of it,
//! and the same index keys) is not written again (`store_ue_unchanged`)
//! if the store still holds that version: nothing would change but the
//! version. A settled UE is touched by every S1 message of its connection
//! (an answer, a release), and in `bench mme fig6` 40% of them left its
//! record as it was; each was a compare-and-set and a replicated copy. A
//! record another writer moved (a visitor's, handed back) is written as
//! before, and loses its compare-and-set. Redis is not asked (a round
//! trip, the price of the write), so there every such UE is written.
//!
//! One sync's writes are pipelined: every record's compare-and-set is sent
//! at once (one round trip to Redis for them all), each answer is then
//! settled in order on its own (a conflict evicts that UE only), and the
//! index keys of the records written go at once too.
//!
//! A write or delete that fails otherwise (the store unreachable, a value
//! over its bound) is counted (`store_write_failed`, `store_delete_failed`)
//! and tried again at the next sync; the UE stays served from memory. The
//! record goes before its index keys, and this host takes the record's new
//! version before writing them, so a failure between the two leaves
//! nothing this host would later take for a conflict.

use crate::context_codec::{self, TimeBase};
use crate::mme::Mme;
use crate::transfer::{mtmsis, ImportError, Removed, UeKey};
use futures_util::future::join_all;
use mobicore_common::{Groups, Imsi};
use mobicore_elastic::router::replica_group;
use mobicore_store::{Store, StoreError, StoreKind};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// The first pause of the store after a failure; it doubles per failure
/// up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(4);

/// When a UE's record is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replication {
    /// When a procedure completes.
    #[default]
    Cold,
    /// After every event that touched the UE.
    Hot,
}

/// The store keys of a UE.
pub mod keys {
    use mobicore_common::Imsi;
    use mobicore_elastic::router::{imsi_group, replica_group};

    pub fn record(imsi: &Imsi) -> String {
        format!("mme/ue/{imsi}")
    }
    pub fn mtmsi(m: u32) -> String {
        format!("mme/mtmsi/{m:08x}")
    }
    pub fn id(mme_ue_s1ap_id: u32) -> String {
        format!("mme/id/{mme_ue_s1ap_id:08x}")
    }
    /// The prefix of the [`id`] keys of the UEs host `host` allocated (its
    /// number is the top octet, `MmeConfig::host_prefix`).
    pub fn ids_of_host(host: u8) -> String {
        format!("mme/id/{host:02x}")
    }
    /// The MME-UE-S1AP-ID an [`id`] key names.
    pub fn id_of(key: &str) -> Option<u32> {
        u32::from_str_radix(key.strip_prefix("mme/id/")?, 16).ok()
    }
    /// The replica group of a UE's key (see [`mobicore_common::Groups`]):
    /// its IMSI's for a record, its identifier's for an index key (the
    /// same, as a host allocates them); none for any other key.
    pub fn group_of(key: &str) -> Option<u8> {
        if let Some(imsi) = key.strip_prefix("mme/ue/") {
            return Some(imsi_group(imsi));
        }
        let ident = key.strip_prefix("mme/id/").or_else(|| key.strip_prefix("mme/mtmsi/"))?;
        u32::from_str_radix(ident, 16).ok().map(replica_group)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("UE record: {0}")]
    Import(#[from] ImportError),
    #[error("no UE record for {0:?}")]
    NotFound(UeKey),
    /// The record of the UE was written by another host since this one
    /// read it; this host's copy is dropped.
    #[error("the UE's record changed under this host (version {current:?})")]
    Conflict { current: Option<u64> },
    #[error("UE {0} has no IMSI yet: not written")]
    NoImsi(u32),
    #[error("no UE {0} in this MME")]
    NotHere(u32),
}

/// What one [`StoredUes::sync`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    pub written: usize,
    pub deleted: usize,
    /// MME-UE-S1AP-IDs of UEs whose write lost a compare-and-set (evicted).
    pub conflicts: Vec<u32>,
    /// Writes or deletes that failed otherwise (store unreachable, value
    /// too large); the UE stays in memory and its write is tried again at
    /// the next sync.
    pub failed: usize,
    /// Writes and deletes not tried: the store failed a moment ago
    /// ([`StoredUes::sync`]); tried at a later sync.
    pub deferred: usize,
}

/// Where [`StoredUes::hold`] found a UE.
#[derive(Debug)]
pub enum Hold {
    /// In the MME already (its MME-UE-S1AP-ID).
    Held(u32),
    /// Loaded from the store.
    Loaded(u32),
    /// Not in the store either.
    NotStored,
    /// The store or the record failed.
    Failed(StoredError),
}

/// A UE's record ready to write: its key, the version it replaces (none:
/// only if absent) and its M-TMSIs.
struct Ready {
    id: u32,
    imsi: Imsi,
    key: String,
    expected: Option<u64>,
    record: Vec<u8>,
    digest: u64,
    mtmsis: Vec<u32>,
}

/// A record loaded to serve a message, written back as read (see "Claims").
struct Claim {
    id: u32,
    imsi: Imsi,
    key: String,
    version: u64,
    record: Vec<u8>,
}

/// The index keys of a record written (see [`StoredUes::write_indexes`]):
/// those it had (`id_indexed`, `old`), those it has, and an older
/// context's it took the place of.
struct Indexes {
    imsi: Imsi,
    id: u32,
    id_indexed: bool,
    old: Vec<u32>,
    mtmsis: Vec<u32>,
    superseded: Option<(u32, Vec<u32>)>,
}

/// What this host knows of a UE's record: the version it last read or
/// wrote, and the index keys it wrote.
#[derive(Debug, Clone)]
struct Held {
    version: u64,
    id: u32,
    /// The M-TMSI index keys written for it.
    mtmsis: Vec<u32>,
    /// Its MME-UE-S1AP-ID index key is written.
    id_indexed: bool,
    /// A keyed hash of the record as stored at `version` (see "Unchanged
    /// records").
    digest: u64,
}

/// The store layer of one MME host.
#[derive(Debug)]
pub struct StoredUes {
    store: Store,
    mode: Replication,
    held: HashMap<Imsi, Held>,
    /// UEs whose write failed (not a conflict): tried again at the next sync.
    retry: HashSet<u32>,
    /// Forgotten UEs whose delete failed: tried again at the next sync.
    retry_removed: Vec<Removed>,
    /// After a failure the store is left alone until then (MME clock),
    /// and the pause after the next failure.
    backoff_until: Option<Instant>,
    backoff: Duration,
    /// Records whose write failed with its outcome unknown (sent, no
    /// answer: it may land later), by IMSI, until a write of the UE
    /// succeeds: a compare-and-set that then finds exactly that record
    /// stored found its own write, not another host's.
    unsure: HashMap<Imsi, Vec<u8>>,
    /// The keys of other hosts' UEs (a visitor's: its MME-UE-S1AP-ID under
    /// another host's prefix) deleted here, by MME-UE-S1AP-ID, until
    /// handed back ([`StoredUes::hand_back`]): a detach at a visitor
    /// leaves them for its owner's host to delete. At most [`MAX_GONE`].
    gone: HashMap<u32, Vec<String>>,
    /// Records loaded to serve a message, as read, by MME-UE-S1AP-ID: the
    /// next sync's claims (see "Claims"). Only over a shared store.
    claims: HashMap<u32, Vec<u8>>,
    shared: bool,
    /// Keys [`Held::digest`]: SipHash under a key drawn per process, so
    /// that no UE can make two of its records hash alike on purpose.
    digests: std::collections::hash_map::RandomState,
}

/// Visitors' deleted keys kept for their hand-back at most.
const MAX_GONE: usize = 4096;

impl StoredUes {
    /// The layer over `store`; it turns on the journal of `mme`.
    pub fn new(store: Store, mode: Replication, mme: &mut Mme) -> StoredUes {
        let shared = store.kind() == StoreKind::Redis;
        mme.track_changes(true);
        StoredUes {
            store,
            mode,
            held: HashMap::new(),
            retry: HashSet::new(),
            retry_removed: Vec::new(),
            backoff_until: None,
            backoff: BACKOFF_MIN,
            unsure: HashMap::new(),
            gone: HashMap::new(),
            claims: HashMap::new(),
            shared,
            digests: Default::default(),
        }
    }

    pub fn mode(&self) -> Replication {
        self.mode
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The version of the UE's record this host last read or wrote.
    pub fn version(&self, imsi: &Imsi) -> Option<u64> {
        self.held.get(imsi).map(|h| h.version)
    }

    /// Whether a UE loaded to serve a message claims its record (see
    /// "Claims"): over a shared store.
    pub fn claims(&self) -> bool {
        self.shared
    }

    /// Whether writes or deletes that failed wait for the next sync.
    pub fn unsynced(&self) -> bool {
        !self.retry.is_empty() || !self.retry_removed.is_empty()
    }

    /// Write what the mode asks for of the UEs the events since the last
    /// sync touched, and delete the records of the UEs the MME forgot.
    /// `time.now` is the MME's clock. Once a write or delete fails (the
    /// store unreachable or not answering within its timeout), the rest
    /// waits, and so does every sync for a pause (250 ms doubling to 4 s,
    /// reset by a success; `store_sync_deferred`): the host serves on from
    /// memory instead of waiting out a timeout per UE at every event.
    pub async fn sync(&mut self, mme: &mut Mme, time: TimeBase) -> SyncReport {
        let changes = mme.take_changes();
        let mut report = SyncReport::default();
        let mut removed = std::mem::take(&mut self.retry_removed);
        removed.extend(changes.removed);
        let mut touched: Vec<u32> = changes.touched.union(&self.retry).copied().collect();
        self.retry.clear();
        if self.backoff_until.is_some_and(|until| time.now < until) {
            report.deferred = removed.len() + touched.len();
            self.retry_removed = removed;
            self.retry.extend(touched);
            mme.counters.incr("store_sync_deferred");
            return report;
        }
        // The records of UEs the MME forgot, if this host holds their
        // version (a record it never read is another context's, or none).
        // Pipelined as the writes below: the records' deletes at once,
        // then their index keys' at once.
        let mut failing = false;
        // Each with its IMSI, its record's key and the version held.
        let doomed: Vec<(Removed, Imsi, String, u64)> = removed
            .into_iter()
            .filter_map(|r| {
                let imsi = r.imsi.clone()?;
                let version = self.held.get(&imsi).filter(|h| h.id == r.id)?.version;
                let key = keys::record(&imsi);
                Some((r, imsi, key, version))
            })
            .collect();
        let store = &self.store;
        let answers = join_all(doomed.iter().map(|(_, _, key, version)| store.compare_and_delete(key, *version))).await;
        let mut indexes = Vec::new();
        for ((removed, imsi, _, _), answer) in doomed.into_iter().zip(answers) {
            match answer {
                // Deleted, or deleted by an earlier try whose index deletes failed.
                Ok(()) | Err(StoreError::Conflict { current: None }) => indexes.push((removed, imsi)),
                Err(StoreError::Conflict { .. }) => {
                    // Another host wrote it since: its record stays.
                    mme.counters.incr("store_cas_conflict");
                    self.held.remove(&imsi);
                }
                Err(_) => {
                    mme.counters.incr("store_delete_failed");
                    report.failed += 1;
                    self.retry_removed.push(removed);
                    failing = true;
                }
            }
        }
        let names: Vec<Vec<String>> = indexes.iter().map(|(r, imsi)| self.index_names(r, imsi)).collect();
        let deleted = join_all(indexes.iter().zip(&names).map(|((_, imsi), n)| self.delete_indexes(n, imsi))).await;
        for (((removed, imsi), d), mut names) in indexes.into_iter().zip(deleted).zip(names) {
            match d {
                Ok(()) => {
                    self.held.remove(&imsi);
                    if !mme.owns_identifier(removed.id) && self.gone.len() < MAX_GONE {
                        names.push(keys::record(&imsi));
                        self.gone.insert(removed.id, names);
                    }
                    mme.counters.incr("store_ue_deleted");
                    report.deleted += 1;
                }
                Err(_) => {
                    mme.counters.incr("store_delete_failed");
                    report.failed += 1;
                    self.retry_removed.push(removed);
                    failing = true;
                }
            }
        }
        touched.sort_unstable();
        let mut ready = Vec::new();
        let mut claims = Vec::new();
        for id in touched {
            let Some(summary) = mme.ue_summary(id) else { continue };
            if summary.imsi.is_none() || (self.mode == Replication::Cold && !summary.settled) {
                continue;
            }
            if failing {
                report.deferred += 1;
                self.retry.insert(id);
                continue;
            }
            match self.prepare(mme, id, time) {
                Ok(r) if self.unchanged(&r) => mme.counters.incr("store_ue_unchanged"),
                Ok(r) => ready.push(r),
                Err(_) => {
                    report.failed += 1;
                    self.retry.insert(id);
                }
            }
        }
        // Loaded to serve this event's message and not written above: the
        // record as read, so that its version moves (see "Claims").
        for (id, record) in std::mem::take(&mut self.claims) {
            if failing || ready.iter().any(|r| r.id == id) {
                continue;
            }
            let Some(imsi) = mme.ue_summary(id).and_then(|s| s.imsi) else { continue };
            let Some(h) = self.held.get(&imsi).filter(|h| h.id == id) else { continue };
            let key = keys::record(&imsi);
            claims.push(Claim { id, imsi, key, version: h.version, record });
        }
        // Pipelined: every record's compare-and-set at once (one round
        // trip to Redis for the lot), then each answer in order; then the
        // index keys of those written, at once too.
        let store = &self.store;
        let claimed = join_all(claims.iter().map(|c| store.compare_and_set(&c.key, Some(c.version), &c.record)));
        let answers = join_all(ready.iter().map(|r| store.compare_and_set(&r.key, r.expected, &r.record)));
        let (claimed, answers) = futures_util::future::join(claimed, answers).await;
        for (c, answer) in claims.into_iter().zip(claimed) {
            match answer {
                Ok(version) => {
                    mme.counters.incr("store_ue_claimed");
                    if let Some(h) = self.held.get_mut(&c.imsi).filter(|h| h.id == c.id) {
                        h.version = version;
                    }
                }
                Err(StoreError::Conflict { .. }) => {
                    tracing::debug!(id = c.id, version = c.version, "claim lost");
                    self.lost(mme, &c.imsi, c.id);
                    report.conflicts.push(c.id);
                }
                // The store failing: served on from memory, as a write
                // that failed (its own counter: nothing waits for a retry).
                Err(_) => mme.counters.incr("store_claim_failed"),
            }
        }
        let mut indexes = Vec::new();
        for (r, answer) in ready.into_iter().zip(answers) {
            let id = r.id;
            match self.settle(mme, r, answer, time).await {
                Ok((_, ix)) => indexes.push(ix),
                Err(StoredError::Conflict { .. }) => report.conflicts.push(id),
                Err(_) => {
                    report.failed += 1;
                    self.retry.insert(id);
                    failing = true;
                }
            }
        }
        let written = join_all(indexes.iter().map(|ix| self.write_indexes(ix))).await;
        for (ix, w) in indexes.into_iter().zip(written) {
            match w {
                Ok(()) => {
                    report.written += 1;
                    self.indexed(ix);
                }
                Err(_) => {
                    mme.counters.incr("store_write_failed");
                    report.failed += 1;
                    self.retry.insert(ix.id);
                    failing = true;
                }
            }
        }
        if failing {
            self.backoff_until = Some(time.now + self.backoff);
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        } else if report.written + report.deleted > 0 {
            self.backoff_until = None;
            self.backoff = BACKOFF_MIN;
        }
        report
    }

    /// UE `id` lost a compare-and-set: the other host's record is its
    /// state, so this host drops its copy and what its event would send.
    fn lost(&mut self, mme: &mut Mme, imsi: &Imsi, id: u32) {
        mme.counters.incr("store_cas_conflict");
        self.held.remove(imsi);
        mme.evict_ue(&UeKey::MmeUeS1apId(id));
        let withdrawn = mme.withdraw_actions(id);
        mme.counters.add("store_conflict_actions_withdrawn", withdrawn as u64);
    }

    /// Write UE `id`'s record now, whatever the mode (a migration, a
    /// shutdown); returns its new version. A lost compare-and-set evicts
    /// the UE from `mme` (see the module doc).
    pub async fn write(&mut self, mme: &mut Mme, id: u32, time: TimeBase) -> Result<u64, StoredError> {
        let r = self.prepare(mme, id, time)?;
        let answer = self.store.compare_and_set(&r.key, r.expected, &r.record).await;
        let (version, ix) = self.settle(mme, r, answer, time).await?;
        if let Err(e) = self.write_indexes(&ix).await {
            mme.counters.incr("store_write_failed");
            return Err(e.into());
        }
        self.indexed(ix);
        Ok(version)
    }

    /// UE `id`'s record, and the version it is to replace.
    fn prepare(&self, mme: &Mme, id: u32, time: TimeBase) -> Result<Ready, StoredError> {
        let summary = mme.ue_summary(id).ok_or(StoredError::NotHere(id))?;
        let imsi = summary.imsi.clone().ok_or(StoredError::NoImsi(id))?;
        let record = mme.export_ue(&UeKey::MmeUeS1apId(id), time).ok_or(StoredError::NotHere(id))?;
        let key = keys::record(&imsi);
        let expected = self.held.get(&imsi).filter(|h| h.id == id).map(|h| h.version);
        let digest = self.digests.hash_one(&record);
        Ok(Ready { id, imsi, key, expected, record, digest, mtmsis: summary.mtmsis })
    }

    /// Whether the store holds `r`'s record already, as this host wrote or
    /// read it last, with its index keys (see "Unchanged records"). Not
    /// while a write of the UE's is unsure: the store may hold that one.
    fn unchanged(&self, r: &Ready) -> bool {
        let Some(h) = self.held.get(&r.imsi) else { return false };
        h.id == r.id
            && h.id_indexed
            && h.digest == r.digest
            && h.mtmsis == r.mtmsis
            && !self.unsure.contains_key(&r.imsi)
            && self.store.local_version(&r.key) == Some(Some(h.version))
    }

    /// The compare-and-set of `r` answered `answer`: what follows from it
    /// (a write of this host's that was unsure, an older context's record
    /// superseded, a conflict that evicts the UE), and the index keys left
    /// to write once the record is.
    async fn settle(
        &mut self,
        mme: &mut Mme,
        r: Ready,
        answer: Result<u64, StoreError>,
        time: TimeBase,
    ) -> Result<(u64, Indexes), StoredError> {
        let Ready { id, imsi, key, expected, record, digest, mtmsis } = r;
        // The names of an older context the write takes the place of.
        let mut superseded = None;
        let mut result = answer;
        if let (Err(StoreError::Conflict { current: Some(_) }), Some(tried)) = (&result, self.unsure.get(&imsi)) {
            // An earlier write whose answer never came landed after all.
            if let Ok(Some(stored)) = self.store.get(&key).await {
                if &stored.value == tried {
                    mme.counters.incr("store_unsure_write_found");
                    result = self.store.compare_and_set(&key, Some(stored.version), &record).await;
                }
            }
        }
        let result = match result {
            Err(StoreError::Conflict { current: Some(current) }) if expected.is_none() => {
                self.supersede(mme, &key, current, &record, time, &mut superseded).await
            }
            other => other,
        };
        let version = match result {
            Ok(v) => v,
            Err(StoreError::Conflict { current }) => {
                tracing::debug!(id, ?expected, ?current, "compare-and-set lost");
                self.lost(mme, &imsi, id);
                return Err(StoredError::Conflict { current });
            }
            Err(e) => {
                mme.counters.incr("store_write_failed");
                // Sent and unanswered (a timeout, a lost connection): it
                // may still land.
                if matches!(e, StoreError::OutcomeUnknown { .. }) {
                    self.unsure.insert(imsi, record);
                }
                return Err(e.into());
            }
        };
        self.unsure.remove(&imsi);
        tracing::debug!(id, ?expected, version, "written");
        mme.counters.incr("store_ue_written");
        let prev = self.held.remove(&imsi).filter(|h| h.id == id);
        let (id_indexed, old) = prev.map(|h| (h.id_indexed, h.mtmsis)).unwrap_or_default();
        // The new version first: an index write that fails leaves the
        // record this host's, and the indexes are done again next time.
        self.held.insert(imsi.clone(), Held { version, id, mtmsis: old.clone(), id_indexed, digest });
        Ok((version, Indexes { imsi, id, id_indexed, old, mtmsis, superseded }))
    }

    /// The index keys of `ix` are written: this host's record says so.
    fn indexed(&mut self, ix: Indexes) {
        if let Some(h) = self.held.get_mut(&ix.imsi) {
            h.id_indexed = true;
            h.mtmsis = ix.mtmsis;
        }
    }

    /// The index keys of a record just written: after the record, so that
    /// a reader that follows an index finds a record at least as new.
    async fn write_indexes(&self, ix: &Indexes) -> Result<(), StoreError> {
        let Indexes { imsi, id, id_indexed, old, mtmsis, superseded } = ix;
        let value = imsi.as_str().as_bytes();
        let new_id = (!id_indexed).then(|| keys::id(*id));
        let new_mtmsis = mtmsis.iter().filter(|m| !old.contains(m)).map(|&m| keys::mtmsi(m));
        let puts: Vec<String> = new_id.into_iter().chain(new_mtmsis).collect();
        // At once: independent of each other, each after the record.
        for put in join_all(puts.iter().map(|k| self.store.put(k, value))).await {
            put?;
        }
        let (old_id, gone) = superseded.clone().unwrap_or((*id, Vec::new()));
        let old_names = old.iter().chain(&gone).filter(|m| !mtmsis.contains(m)).map(|&m| keys::mtmsi(m));
        let mut names: Vec<String> = (old_id != *id).then(|| keys::id(old_id)).into_iter().chain(old_names).collect();
        names.sort_unstable();
        names.dedup();
        self.delete_indexes(&names, imsi).await
    }

    /// The stored record is of another context of the IMSI than the one
    /// `record` holds: take its place (its MME-UE-S1AP-ID and M-TMSIs go to
    /// `superseded`, for their index keys), else it is a conflict.
    async fn supersede(
        &self,
        mme: &Mme,
        key: &str,
        current: u64,
        record: &[u8],
        time: TimeBase,
        superseded: &mut Option<(u32, Vec<u32>)>,
    ) -> Result<u64, StoreError> {
        let Some(stored) = self.store.get(key).await? else {
            return self.store.compare_and_set(key, None, record).await;
        };
        let ours = context_codec::peek_context(record).ok();
        match context_codec::peek_context(&stored.value) {
            Ok(theirs) if Some(theirs) == ours => Err(StoreError::Conflict { current: Some(current) }),
            theirs => {
                mme.counters.incr("store_record_superseded");
                let version = self.store.compare_and_set(key, Some(stored.version), record).await?;
                let names = context_codec::decode(&stored.value, time).map(|ue| mtmsis(&ue)).unwrap_or_default();
                *superseded = theirs.ok().map(|(id, _)| (id, names));
                Ok(version)
            }
        }
    }

    /// The index keys of a UE the MME forgot: its MME-UE-S1AP-ID's and
    /// every M-TMSI's it had.
    fn index_names(&self, removed: &Removed, imsi: &Imsi) -> Vec<String> {
        let written = self.held.get(imsi).map(|h| h.mtmsis.as_slice()).unwrap_or_default();
        let mut names: Vec<String> = written.iter().chain(&removed.mtmsis).map(|&m| keys::mtmsi(m)).collect();
        names.push(keys::id(removed.id));
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Delete the index keys `names` that still point at `imsi`, at once.
    async fn delete_indexes(&self, names: &[String], imsi: &Imsi) -> Result<(), StoreError> {
        for r in join_all(names.iter().map(|k| self.delete_index(k, imsi))).await {
            r?;
        }
        Ok(())
    }

    /// Delete an index key if it still points at `imsi`.
    async fn delete_index(&self, key: &str, imsi: &Imsi) -> Result<(), StoreError> {
        if let Some(v) = self.store.get(key).await? {
            if v.value == imsi.as_str().as_bytes() {
                match self.store.compare_and_delete(key, v.version).await {
                    Ok(()) | Err(StoreError::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// The IMSI whose record `key` leads to, through the indexes.
    pub async fn imsi_of(&self, key: &UeKey) -> Result<Option<Imsi>, StoreError> {
        let index = match key {
            UeKey::Imsi(i) => return Ok(Some(i.clone())),
            UeKey::MTmsi(m) => keys::mtmsi(*m),
            UeKey::MmeUeS1apId(id) => keys::id(*id),
        };
        let Some(v) = self.store.get(&index).await? else { return Ok(None) };
        Ok(std::str::from_utf8(&v.value).ok().and_then(|s| s.parse().ok()))
    }

    /// Bring the UE `key` names from the store into `mme` (replacing an
    /// older copy it held); returns its MME-UE-S1AP-ID. `time.now` is the
    /// MME's clock.
    pub async fn load(&mut self, mme: &mut Mme, key: &UeKey, time: TimeBase) -> Result<u32, StoredError> {
        self.load_record(mme, key, time).await.map(|(id, _)| id)
    }

    /// [`StoredUes::load`], with the record as read.
    async fn load_record(&mut self, mme: &mut Mme, key: &UeKey, time: TimeBase) -> Result<(u32, Vec<u8>), StoredError> {
        let not_found = || StoredError::NotFound(key.clone());
        let imsi = self.imsi_of(key).await?.ok_or_else(not_found)?;
        let stored = self.store.get(&keys::record(&imsi)).await?.ok_or_else(not_found)?;
        let id = match mme.import_ue(&stored.value, time) {
            Ok(id) => id,
            Err(e) => {
                mme.counters.incr("store_ue_import_failed");
                return Err(e.into());
            }
        };
        // A stale index: the record is the IMSI's, but no longer has that name.
        if mme.find_ue(key) != Some(id) {
            mme.evict_ue(&UeKey::MmeUeS1apId(id));
            return Err(not_found());
        }
        let mtmsis = mme.ue_summary(id).map(|s| s.mtmsis).unwrap_or_default();
        let digest = self.digests.hash_one(&stored.value);
        self.held.insert(imsi, Held { version: stored.version, id, mtmsis, id_indexed: true, digest });
        mme.counters.incr("store_ue_loaded");
        tracing::debug!(id, version = stored.version, "loaded");
        Ok((id, stored.value))
    }

    /// The UE `key` names is in `mme`, loaded from the store if it was not
    /// (an elastic MME host at a message for a UE another host served,
    /// gone), and the request its step awaits sent again
    /// ([`Mme::resume_taken_over`]); counted in `host_ue_taken_over`, `host_ue_not_in_store`,
    /// `host_ue_load_failed`. A UE not stored (one this MME never had, or
    /// one whose procedure had not completed under cold replication) is
    /// left to the core, which answers as for any unknown UE.
    pub async fn hold(&mut self, mme: &mut Mme, key: &UeKey, time: TimeBase) -> Hold {
        if let Some(id) = mme.find_ue(key) {
            return Hold::Held(id);
        }
        match self.load_record(mme, key, time).await {
            Ok((id, record)) => {
                if self.shared {
                    self.claims.insert(id, record);
                }
                mme.counters.incr("host_ue_taken_over");
                // An S6a or S11 answer the record waits for went to the
                // host that is gone: the request goes again from here.
                mme.resume_taken_over(id);
                Hold::Loaded(id)
            }
            Err(StoredError::NotFound(_)) => {
                mme.counters.incr("host_ue_not_in_store");
                Hold::NotStored
            }
            Err(e) => {
                mme.counters.incr("host_ue_load_failed");
                tracing::warn!(?key, "loading a UE from the store: {e}");
                Hold::Failed(e)
            }
        }
    }

    /// [`StoredUes::hold`] for a message of the UE's S1 connection (by
    /// MME-UE-S1AP-ID). A UE loaded at rest (ECM-IDLE: it has no S1
    /// connection) cannot be concerned: its copy is dropped unwritten,
    /// so that it overwrites no record of the host that serves the UE
    /// (`host_stray_load_dropped`), and `NotStored` returned (the core
    /// answers as for any unknown UE: ERROR INDICATION, TS 36.413 10.6).
    pub async fn hold_connected(&mut self, mme: &mut Mme, key: &UeKey, time: TimeBase) -> Hold {
        match self.hold(mme, key, time).await {
            Hold::Loaded(id) if mme.ue_at_rest(id) == Some(true) => {
                tracing::debug!(id, "loaded at rest for a message of an S1 connection: dropped");
                self.release(mme, key);
                mme.counters.incr("host_stray_load_dropped");
                Hold::NotStored
            }
            held => held,
        }
    }

    /// This host is the heir of host `gone`'s UEs of replica groups
    /// `groups` (dead or drained): every such UE in the store is loaded
    /// now, not at its next message, so that its timers (mobile reachable,
    /// implicit detach, a procedure's guard) run here (issue 13 item 2: a
    /// timer fires on whichever host holds the UE). A host's UEs are the
    /// ones whose MME-UE-S1AP-ID has its number on top, their group next.
    /// Returns how many were loaded (counted in `host_ues_adopted`); fails
    /// only if the store cannot be listed. UEs `away` names (by
    /// MME-UE-S1AP-ID, or by the IMSI its index key holds) are left
    /// (served by another host for now, which writes them: a copy here
    /// would be stale).
    pub async fn adopt(
        &mut self,
        mme: &mut Mme,
        gone: u8,
        groups: Groups,
        time: TimeBase,
        away: impl Fn(u32, &[u8]) -> bool,
    ) -> Result<u64, StoreError> {
        let ids = self.store.scan_prefix(&keys::ids_of_host(gone)).await?;
        let mut n = 0;
        for (key, imsi) in ids {
            let theirs = |id: &u32| groups.contains(replica_group(*id)) && !away(*id, &imsi.value);
            let Some(id) = keys::id_of(&key).filter(theirs) else { continue };
            if matches!(self.hold(mme, &UeKey::MmeUeS1apId(id), time).await, Hold::Loaded(_)) {
                n += 1;
            }
        }
        mme.counters.add("host_ues_adopted", n);
        Ok(n)
    }

    /// A visitor's procedure is over (host-local stores, placed here from
    /// the host that holds the UE's record between procedures): the UE's
    /// record and index keys as this host wrote them last, for that host's
    /// store ([`StoredUes::take_back`]). They are deleted here, and the UE
    /// dropped. A UE that detached here: the keys it had, each with an
    /// empty value (deleted there too). Empty if the UE is not here or its
    /// record is not written.
    pub async fn hand_back(&mut self, mme: &mut Mme, id: u32) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let writes = self.written(mme, id).await?;
        if writes.is_empty() {
            // Detached here (its keys deleted): each an empty value, a
            // delete for its owner's host.
            let gone = self.gone.remove(&id).unwrap_or_default();
            return Ok(gone.into_iter().map(|k| (k, Vec::new())).collect());
        }
        for (k, _) in &writes {
            self.store.delete(k).await?;
        }
        self.release(mme, &UeKey::MmeUeS1apId(id));
        Ok(writes)
    }

    /// The record and index keys of UE `id` as this host wrote them last
    /// (empty if it is not here or its record is not written): what
    /// [`StoredUes::hand_back`] hands back, and what a visitor under hot
    /// replication sends its owner's host after every message.
    pub async fn written(&self, mme: &Mme, id: u32) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let key = UeKey::MmeUeS1apId(id);
        let Some(imsi) = mme.find_ue(&key).and_then(|id| mme.ue_summary(id)).and_then(|s| s.imsi) else {
            return Ok(Vec::new());
        };
        let Some(held) = self.held.get(&imsi).filter(|h| h.id == id) else { return Ok(Vec::new()) };
        let Some(record) = self.store.get(&keys::record(&imsi)).await? else { return Ok(Vec::new()) };
        let name = imsi.to_string().into_bytes();
        let mut writes = vec![(keys::record(&imsi), record.value)];
        writes.extend(held.mtmsis.iter().map(|&m| (keys::mtmsi(m), name.clone())));
        writes.push((keys::id(id), name));
        Ok(writes)
    }

    /// Take back what a visitor handed back ([`StoredUes::hand_back`]), or
    /// a UE's keys from a copy of another host's store: each write is put
    /// (an empty value: deleted) over what this store holds (the
    /// visitor's record is the newer: the front end lets one host at a
    /// time hold the UE). A copy of the UE in
    /// `mme` stays as it is: a load replaces it (the front end's refresh),
    /// and a write of it loses its compare-and-set. A key outside the UE
    /// keys is refused, with all the others (`store_take_back_refused`).
    pub async fn take_back(&mut self, mme: &Mme, writes: &[(String, Vec<u8>)]) -> Result<usize, StoreError> {
        let ue_key = |k: &str| ["mme/ue/", "mme/mtmsi/", "mme/id/"].iter().any(|p| k.starts_with(p));
        if !writes.iter().all(|(k, _)| ue_key(k)) {
            mme.counters.incr("store_take_back_refused");
            return Ok(0);
        }
        for (k, v) in writes {
            if v.is_empty() {
                // The UE detached at the visitor.
                self.store.delete(k).await?;
            } else {
                self.store.put(k, v).await?;
            }
        }
        Ok(writes.len())
    }

    /// Forget what this host knows of the UE's record, and drop the UE from
    /// `mme` (another host serves it now).
    pub fn release(&mut self, mme: &mut Mme, key: &UeKey) {
        // Deleted keys no hand-back took (a shared store has none).
        if let UeKey::MmeUeS1apId(id) = key {
            self.gone.remove(id);
        }
        if let Some(ue) = mme.evict_ue(key) {
            self.claims.remove(&ue.id);
            if let Some(i) = ue.imsi {
                self.held.remove(&i);
            }
        }
    }
}
