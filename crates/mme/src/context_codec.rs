//! The UE context as a record of octets (issue 13 item 2, seed 004 4.3):
//! what one MME host writes to the store and another reads back to carry
//! on with the UE, mid-procedure or between procedures.
//!
//! A record is a fixed header and a body (integers big-endian):
//!
//! ```text
//! 0      4         5          6            10
//! | "MCUE" | version | reserved | body length | body ...
//! ```
//!
//! The body lists the fields of [`UeContext`] in a fixed order, each
//! optional one behind a presence octet (0 or 1), each list behind its
//! count, each octet string behind its length (one octet, or two for NAS
//! messages and the UE radio capability). [`Record`] is the checked view of
//! the header; [`encode`] and [`decode`] are the two directions.
//! [`decode`] returns a [`DecodeError`] on any input, never panics, and
//! takes nothing that [`encode`] would not have written: a reserved code,
//! an IMSI that is no IMSI, trailing octets, a list longer than its bound.
//!
//! What a record holds and how:
//! - the NAS security context as its KASME, its algorithms and its two next
//!   NAS COUNTs (TS 33.401 7.2.5); the NAS keys are derived again from the
//!   KASME when the record is read (KNASint and KNASenc, TS 33.401 A.7),
//!   which gives the context the MME had;
//! - time as wall-clock milliseconds since the UNIX epoch: an `Instant`
//!   means nothing in another process, so a deadline is written as the
//!   wall-clock time of the same moment ([`TimeBase`]), and read back
//!   relative to the reader's own `now`. A deadline already past fires at
//!   the reader's next timeout. Hosts are assumed to keep their wall clocks
//!   in step (NTP); the error of a deadline is their difference;
//! - the S1 connection (association, eNB-UE-S1AP-ID, stream) as it is: the
//!   association names an eNB the reading host knows too (the front end of
//!   issue 13 keeps the eNB contexts and their association identifiers);
//! - a running handover, paging or ESM procedure in full, so that it goes
//!   on where it was; the timer sequence numbers are not written, the
//!   reader arms its timers afresh.
//!
//! The keys are written in clear: a record stays inside the operator's
//! core, as the UE contexts of seed 004 stay in the host's shared memory.

use crate::context::*;
use crate::paging::Paging;
use crate::s1_handover::{Admitted, Handover, Phase};
use bytes::Bytes;
use mobicore_common::s6a::{ApnConfiguration, EutranVector, SubscriptionData};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ambr, Arp, Ecgi, Fteid, Gummei, Guti, Imsi, MTmsi, PdnType, Plmn, Tai, Teid};
use oxirush_nas::nas_eps::{
    CipheringAlgorithm, IntegrityAlgorithm, NasCount, NasEpsSecurityHeaderType, NasSecurityContext,
    NasUeNetworkCapability,
};
use oxirush_security::nas_eps::KAsme;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

/// The four octets a record starts with.
pub const MAGIC: [u8; 4] = *b"MCUE";
/// The format version this build writes and reads.
pub const VERSION: u8 = 3;
/// The longest record written or read: a UE context is a few hundred
/// octets, a UE radio capability a few thousand at most.
pub const MAX_RECORD_LEN: usize = 64 * 1024;

/// Bounds on the lists of a record (what a UE can have).
const MAX_SESSIONS: usize = 11; // EBIs 5..=15 (TS 24.007 11.2.3.1.5)
const MAX_APNS: usize = 64;
const MAX_GUARDS: usize = 8;
const MAX_ADMITTED: usize = 16;
/// TS 24.301 9.9.3.33: at most 16 TAIs in a TAI list.
const MAX_TAIS: usize = 16;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const LENGTH: Range<usize> = 6..10;
    pub const BODY: usize = 10;
}

/// The length of the header.
pub const HEADER_LEN: usize = field::BODY;

/// Why octets are no UE context record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record cut short")]
    Truncated,
    #[error("not a UE context record (bad magic)")]
    Magic,
    #[error("UE context record version {0}, this build reads {VERSION}")]
    Version(u8),
    #[error("UE context record of {0} octets, longer than {MAX_RECORD_LEN}")]
    TooLong(usize),
    #[error("{0} octets after the UE context record")]
    Trailing(usize),
    #[error("invalid {0} in a UE context record")]
    Invalid(&'static str),
}

/// The same moment on this process's monotonic clock and on the wall clock
/// that the hosts share: what turns a deadline into octets and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBase {
    pub now: Instant,
    /// Milliseconds since the UNIX epoch at `now`.
    pub unix_ms: u64,
}

impl TimeBase {
    /// `now` on the system's wall clock (for the shells; tests pass their own).
    pub fn system(now: Instant) -> TimeBase {
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        TimeBase { now, unix_ms: unix.as_millis() as u64 }
    }

    fn to_unix_ms(self, t: Instant) -> u64 {
        match t.checked_duration_since(self.now) {
            Some(ahead) => self.unix_ms.saturating_add(ahead.as_millis() as u64),
            None => self.unix_ms.saturating_sub(self.now.duration_since(t).as_millis() as u64),
        }
    }

    /// A written deadline on this clock; one already past is `now`.
    fn to_instant(self, unix_ms: u64) -> Instant {
        let ahead = Duration::from_millis(unix_ms.saturating_sub(self.unix_ms));
        self.now.checked_add(ahead).unwrap_or(self.now)
    }
}

/// A checked view of a record's header (for untrusted octets).
#[derive(Debug, Clone, Copy)]
pub struct Record<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Record<T> {
    /// The view, once the header says the buffer holds exactly one record
    /// of our version.
    pub fn new_checked(buffer: T) -> Result<Record<T>, DecodeError> {
        let b = buffer.as_ref();
        if b.len() > MAX_RECORD_LEN {
            return Err(DecodeError::TooLong(b.len()));
        }
        if b.len() < HEADER_LEN {
            return Err(DecodeError::Truncated);
        }
        if b[field::MAGIC] != MAGIC {
            return Err(DecodeError::Magic);
        }
        if b[field::VERSION] != VERSION {
            return Err(DecodeError::Version(b[field::VERSION]));
        }
        let r = Record { buffer };
        let have = r.buffer.as_ref().len() - HEADER_LEN;
        let want = r.body_len();
        match have.cmp(&want) {
            std::cmp::Ordering::Less => Err(DecodeError::Truncated),
            std::cmp::Ordering::Greater => Err(DecodeError::Trailing(have - want)),
            std::cmp::Ordering::Equal => Ok(r),
        }
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    pub fn body_len(&self) -> usize {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
    }

    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// The record of `ue`, its deadlines on the wall clock of `time`; `None` if
/// it would be longer than [`MAX_RECORD_LEN`] or a field longer than the
/// record holds (no context the MME builds is).
pub fn encode(ue: &UeContext, time: TimeBase) -> Option<Vec<u8>> {
    let mut w = Writer(Vec::with_capacity(512), false);
    w.0.extend_from_slice(&MAGIC);
    w.0.extend_from_slice(&[VERSION, 0, 0, 0, 0, 0]);
    put_ue(&mut w, ue, time);
    let body = w.0.len() - HEADER_LEN;
    if w.1 || w.0.len() > MAX_RECORD_LEN {
        return None;
    }
    w.0[field::LENGTH].copy_from_slice(&(body as u32).to_be_bytes());
    Some(w.0)
}

/// The UE context of a record, its deadlines on the clock of `time`.
pub fn decode(octets: &[u8], time: TimeBase) -> Result<UeContext, DecodeError> {
    let record = Record::new_checked(octets)?;
    let mut r = Reader(record.body());
    let ue = get_ue(&mut r, time)?;
    match r.0.len() {
        0 => Ok(ue),
        n => Err(DecodeError::Trailing(n)),
    }
}

/// The MME-UE-S1AP-ID and generation of the context a record holds,
/// without decoding the rest: which context of a UE the record is.
pub fn peek_context(octets: &[u8]) -> Result<(u32, u64), DecodeError> {
    let record = Record::new_checked(octets)?;
    let mut r = Reader(record.body());
    Ok((r.u32()?, r.u64()?))
}

// ---- the octets ----

/// The octets written so far, and whether a field was too long for its
/// length or count (the record is then refused, never cut).
struct Writer(Vec<u8>, bool);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }
    fn raw(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
    /// Octets behind a one-octet length.
    fn short(&mut self, v: &[u8]) {
        self.1 |= v.len() > u8::MAX as usize;
        let v = &v[..v.len().min(u8::MAX as usize)];
        self.u8(v.len() as u8);
        self.raw(v);
    }
    /// Octets behind a two-octet length.
    fn long(&mut self, v: &[u8]) {
        self.1 |= v.len() > u16::MAX as usize;
        let v = &v[..v.len().min(u16::MAX as usize)];
        self.u16(v.len() as u16);
        self.raw(v);
    }
    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Self, T)) {
        self.bool(v.is_some());
        if let Some(v) = v {
            f(self, v);
        }
    }
    /// A list behind its count, at most `max` of it.
    fn list<'a, T: 'a>(&mut self, v: &'a [T], max: usize, mut f: impl FnMut(&mut Self, &'a T)) {
        self.1 |= v.len() > max;
        let v = &v[..v.len().min(max)];
        self.u8(v.len() as u8);
        for x in v {
            f(self, x);
        }
    }
}

struct Reader<'a>(&'a [u8]);

type R<T> = Result<T, DecodeError>;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> R<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> R<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> R<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn bool(&mut self) -> R<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid("flag")),
        }
    }
    fn short(&mut self) -> R<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn long(&mut self) -> R<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    fn text(&mut self, what: &'static str) -> R<String> {
        String::from_utf8(self.short()?.to_vec()).map_err(|_| DecodeError::Invalid(what))
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<Option<T>> {
        match self.bool()? {
            true => f(self).map(Some),
            false => Ok(None),
        }
    }
    fn list<T>(&mut self, max: usize, what: &'static str, mut f: impl FnMut(&mut Self) -> R<T>) -> R<Vec<T>> {
        let n = self.u8()? as usize;
        if n > max {
            return Err(DecodeError::Invalid(what));
        }
        (0..n).map(|_| f(self)).collect()
    }
}

// ---- identities and addresses ----

fn put_plmn(w: &mut Writer, p: Plmn) {
    w.raw(&p.to_octets());
}
fn get_plmn(r: &mut Reader) -> R<Plmn> {
    Plmn::from_octets(r.take(3)?).map_err(|_| DecodeError::Invalid("PLMN"))
}

fn put_fteid(w: &mut Writer, f: Fteid) {
    w.u32(f.teid.0);
    w.raw(&f.ipv4.octets());
}
fn get_fteid(r: &mut Reader) -> R<Fteid> {
    Ok(Fteid { teid: Teid(r.u32()?), ipv4: Ipv4Addr::from(r.array::<4>()?) })
}

fn put_ip(w: &mut Writer, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            w.u8(4);
            w.raw(&a.octets());
        }
        IpAddr::V6(a) => {
            w.u8(6);
            w.raw(&a.octets());
        }
    }
}
fn get_ip(r: &mut Reader) -> R<IpAddr> {
    match r.u8()? {
        4 => Ok(IpAddr::V4(Ipv4Addr::from(r.array::<4>()?))),
        6 => Ok(IpAddr::V6(Ipv6Addr::from(r.array::<16>()?))),
        _ => Err(DecodeError::Invalid("IP address")),
    }
}

fn put_s1(w: &mut Writer, s: S1Conn) {
    w.u64(s.assoc.0);
    w.u32(s.enb_ue_s1ap_id);
    w.u16(s.stream);
}
fn get_s1(r: &mut Reader) -> R<S1Conn> {
    let assoc = AssocId(r.u64()?);
    let enb_ue_s1ap_id = r.u32()?;
    // 24 bits (TS 36.413 9.2.3.4).
    if enb_ue_s1ap_id >= 1 << 24 {
        return Err(DecodeError::Invalid("eNB-UE-S1AP-ID"));
    }
    Ok(S1Conn { assoc, enb_ue_s1ap_id, stream: r.u16()? })
}

fn put_ambr(w: &mut Writer, a: Ambr) {
    w.u64(a.uplink);
    w.u64(a.downlink);
}
fn get_ambr(r: &mut Reader) -> R<Ambr> {
    Ok(Ambr { uplink: r.u64()?, downlink: r.u64()? })
}

fn put_arp(w: &mut Writer, a: Arp) {
    w.u8(a.priority_level);
    w.bool(a.pre_emption_capability);
    w.bool(a.pre_emption_vulnerability);
}
fn get_arp(r: &mut Reader) -> R<Arp> {
    Ok(Arp { priority_level: r.u8()?, pre_emption_capability: r.bool()?, pre_emption_vulnerability: r.bool()? })
}

fn pdn_type_code(p: PdnType) -> u8 {
    match p {
        PdnType::Ipv4 => 1,
        PdnType::Ipv6 => 2,
        PdnType::Ipv4v6 => 3,
    }
}
fn get_pdn_type(r: &mut Reader) -> R<PdnType> {
    match r.u8()? {
        1 => Ok(PdnType::Ipv4),
        2 => Ok(PdnType::Ipv6),
        3 => Ok(PdnType::Ipv4v6),
        _ => Err(DecodeError::Invalid("PDN type")),
    }
}

/// An EBI of a bearer of the UE (TS 24.007 11.2.3.1.5: 5..=15).
fn get_ebi(r: &mut Reader) -> R<u8> {
    match r.u8()? {
        e @ 5..=15 => Ok(e),
        _ => Err(DecodeError::Invalid("EBI")),
    }
}

// ---- the UE context ----

fn put_ue(w: &mut Writer, ue: &UeContext, time: TimeBase) {
    w.u32(ue.id);
    w.u64(ue.generation);
    w.opt(ue.s1, put_s1);
    w.opt(ue.imsi.as_ref(), |w, i| w.short(i.as_str().as_bytes()));
    w.opt(ue.guti, |w, g| {
        put_plmn(w, g.gummei.plmn);
        w.u16(g.gummei.mme_group_id);
        w.u8(g.gummei.mme_code);
        w.u32(g.m_tmsi.0);
    });
    w.opt(ue.old_mtmsi, Writer::u32);
    w.u8(match ue.emm {
        EmmState::Deregistered => 0,
        EmmState::CommonProcedureInitiated => 1,
        EmmState::Registered => 2,
    });
    put_step(w, ue.step);
    w.opt(ue.attach.as_ref(), |w, a| {
        w.u8(a.eea);
        w.u8(a.eia);
        w.short(&a.ue_network_capability.value);
        put_pdn_request(w, &a.pdn);
        w.bool(a.by_guti);
        w.bool(a.imsi_requested);
    });
    w.bool(ue.ics_done);
    w.bool(ue.attach_complete);
    w.opt(ue.auth.as_ref(), |w, a| {
        w.raw(&a.vector.rand);
        w.short(&a.vector.xres);
        w.raw(&a.vector.autn);
        w.raw(&a.vector.kasme);
        w.u8(a.ksi);
        w.u8(a.sync_failures);
    });
    w.opt(ue.security.as_ref(), put_security);
    w.opt(ue.subscription.as_ref(), |w, s| {
        w.opt(s.msisdn.as_ref(), |w, m| w.short(m.as_bytes()));
        put_ambr(w, s.ue_ambr);
        w.u32(s.default_context_identifier);
        w.list(&s.apns, MAX_APNS, put_apn);
    });
    w.list(&ue.sessions, MAX_SESSIONS, put_session);
    w.opt(ue.esm.as_ref(), put_esm);
    w.opt(ue.timer.as_ref(), |w, t| {
        w.u8(nas_timer_code(t.kind));
        w.u64(time.to_unix_ms(t.deadline));
        w.u8(t.expiries);
        w.u8(t.header as u8);
        w.long(&t.message);
    });
    w.list(&ue.guards, MAX_GUARDS, |w, g| {
        w.u8(guard_code(g.kind));
        w.u64(time.to_unix_ms(g.deadline));
        w.u8(g.count);
    });
    w.opt(ue.tai, |w, t| {
        put_plmn(w, t.plmn);
        w.u16(t.tac);
    });
    w.list(&ue.tai_list, MAX_TAIS, |w, t| w.u16(*t));
    w.opt(ue.ecgi, |w, c| {
        put_plmn(w, c.plmn);
        w.u32(c.eci);
    });
    w.opt(ue.ue_radio_capability.as_ref(), |w, c| w.long(c));
    w.opt(ue.imeisv.as_ref(), |w, i| w.short(i.as_bytes()));
    w.opt(ue.handover.as_ref(), put_handover);
    w.opt(ue.paging, |w, p| {
        w.bool(p.ddn);
        w.opt(p.detach, Writer::bool);
    });
    w.opt(ue.releasing.as_ref(), |w, r| {
        put_s1(w, r.s1);
        w.short(&r.command);
    });
}

fn get_ue(r: &mut Reader, time: TimeBase) -> R<UeContext> {
    let id = r.u32()?;
    let generation = r.u64()?;
    let s1 = r.opt(get_s1)?;
    let mut ue = UeContext::new(id, generation, S1Conn { assoc: AssocId(0), enb_ue_s1ap_id: 0, stream: 0 });
    ue.s1 = s1;
    ue.imsi = r.opt(|r| r.text("IMSI")?.parse::<Imsi>().map_err(|_| DecodeError::Invalid("IMSI")))?;
    ue.guti = r.opt(|r| {
        let gummei = Gummei { plmn: get_plmn(r)?, mme_group_id: r.u16()?, mme_code: r.u8()? };
        Ok(Guti { gummei, m_tmsi: MTmsi(r.u32()?) })
    })?;
    ue.old_mtmsi = r.opt(Reader::u32)?;
    ue.emm = match r.u8()? {
        0 => EmmState::Deregistered,
        1 => EmmState::CommonProcedureInitiated,
        2 => EmmState::Registered,
        _ => return Err(DecodeError::Invalid("EMM state")),
    };
    ue.step = get_step(r)?;
    ue.attach = r.opt(|r| {
        Ok(AttachData {
            eea: r.u8()?,
            eia: r.u8()?,
            ue_network_capability: NasUeNetworkCapability::new(r.short()?.to_vec()),
            pdn: get_pdn_request(r)?,
            by_guti: r.bool()?,
            imsi_requested: r.bool()?,
        })
    })?;
    ue.ics_done = r.bool()?;
    ue.attach_complete = r.bool()?;
    ue.auth = r.opt(|r| {
        let vector = EutranVector { rand: r.array()?, xres: r.short()?.to_vec(), autn: r.array()?, kasme: r.array()? };
        Ok(AuthState { vector, ksi: r.u8()?, sync_failures: r.u8()? })
    })?;
    ue.security = r.opt(get_security)?;
    ue.subscription = r.opt(|r| {
        Ok(SubscriptionData {
            msisdn: r.opt(|r| r.text("MSISDN"))?,
            ue_ambr: get_ambr(r)?,
            default_context_identifier: r.u32()?,
            apns: r.list(MAX_APNS, "APN count", get_apn)?,
        })
    })?;
    ue.sessions = r.list(MAX_SESSIONS, "session count", get_session)?;
    ue.esm = r.opt(get_esm)?;
    ue.timer = r.opt(|r| {
        let kind = nas_timer_kind(r.u8()?)?;
        let deadline = time.to_instant(r.u64()?);
        let expiries = r.u8()?;
        let header =
            NasEpsSecurityHeaderType::try_from(r.u8()?).map_err(|_| DecodeError::Invalid("security header type"))?;
        let message = Bytes::copy_from_slice(r.long()?);
        Ok(NasTimer { kind, seq: 0, deadline, expiries, message, header })
    })?;
    ue.guards = r.list(MAX_GUARDS, "guard count", |r| {
        let kind = guard_kind(r.u8()?)?;
        Ok(GuardTimer { kind, seq: 0, deadline: time.to_instant(r.u64()?), count: r.u8()? })
    })?;
    // At most one guard of each kind runs (context.rs).
    for (i, g) in ue.guards.iter().enumerate() {
        if ue.guards[..i].iter().any(|h| h.kind == g.kind) {
            return Err(DecodeError::Invalid("guard timers"));
        }
    }
    ue.tai = r.opt(|r| Ok(Tai { plmn: get_plmn(r)?, tac: r.u16()? }))?;
    ue.tai_list = r.list(MAX_TAIS, "TAI count", Reader::u16)?;
    ue.ecgi = r.opt(|r| {
        let plmn = get_plmn(r)?;
        match r.u32()? {
            eci if eci < 1 << 28 => Ok(Ecgi { plmn, eci }),
            _ => Err(DecodeError::Invalid("ECI")),
        }
    })?;
    ue.ue_radio_capability = r.opt(|r| Ok(Bytes::copy_from_slice(r.long()?)))?;
    ue.imeisv = r.opt(|r| match r.text("IMEISV")? {
        i if i.len() == 16 && i.bytes().all(|b| b.is_ascii_digit()) => Ok(i),
        _ => Err(DecodeError::Invalid("IMEISV")),
    })?;
    ue.handover = r.opt(get_handover)?;
    ue.paging = r.opt(|r| Ok(Paging { ddn: r.bool()?, detach: r.opt(Reader::bool)? }))?;
    ue.releasing = r.opt(|r| {
        let s1 = get_s1(r)?;
        let command = Bytes::copy_from_slice(r.short()?);
        match release_command_of(&command) == Some((id, s1.enb_ue_s1ap_id)) {
            true => Ok(Releasing { s1, command }),
            false => Err(DecodeError::Invalid("UE CONTEXT RELEASE COMMAND")),
        }
    })?;
    Ok(ue)
}

/// The UE S1AP ID pair (TS 36.413 9.2.3.18) of a UE CONTEXT RELEASE
/// COMMAND; none if `pdu` is no such command.
fn release_command_of(pdu: &[u8]) -> Option<(u32, u32)> {
    use oxirush_s1ap::s1ap::{UES1APIDs, S1AP_PDU};
    let pdu = S1AP_PDU::decode_borrowed(pdu).ok()?;
    match pdu.ie::<oxirush_s1ap::ie::UE_S1AP_IDs>()?.ok()? {
        UES1APIDs::uE_S1AP_ID_pair(p) => Some((p.mme_ue_s1ap_id.0, p.enb_ue_s1ap_id.0)),
        _ => None,
    }
}

fn put_step(w: &mut Writer, step: Step) {
    match step {
        Step::Idle => w.u8(0),
        Step::Identity => w.u8(1),
        Step::AuthInfo => w.u8(2),
        Step::Authentication => w.u8(3),
        Step::SecurityMode => w.u8(4),
        Step::EsmInformation => w.u8(5),
        Step::UpdateLocation => w.u8(6),
        Step::CreateSession => w.u8(7),
        Step::AttachAccept => w.u8(8),
        Step::DetachDeleteSession { switch_off, pending } => {
            w.u8(9);
            w.bool(switch_off);
            w.u8(pending);
        }
        Step::ReleaseAccessBearers => w.u8(10),
        Step::ServiceRequest => w.u8(11),
        Step::TauAccept { old_mtmsi, release } => {
            w.u8(12);
            w.opt(old_mtmsi, Writer::u32);
            w.bool(release);
        }
        Step::NetworkDetach => w.u8(13),
        Step::Handover => w.u8(14),
    }
}

fn get_step(r: &mut Reader) -> R<Step> {
    Ok(match r.u8()? {
        0 => Step::Idle,
        1 => Step::Identity,
        2 => Step::AuthInfo,
        3 => Step::Authentication,
        4 => Step::SecurityMode,
        5 => Step::EsmInformation,
        6 => Step::UpdateLocation,
        7 => Step::CreateSession,
        8 => Step::AttachAccept,
        9 => Step::DetachDeleteSession { switch_off: r.bool()?, pending: r.u8()? },
        10 => Step::ReleaseAccessBearers,
        11 => Step::ServiceRequest,
        12 => Step::TauAccept { old_mtmsi: r.opt(Reader::u32)?, release: r.bool()? },
        13 => Step::NetworkDetach,
        14 => Step::Handover,
        _ => return Err(DecodeError::Invalid("procedure step")),
    })
}

fn put_pdn_request(w: &mut Writer, p: &PdnRequest) {
    w.u8(p.pti);
    w.opt(p.apn.as_ref(), |w, a| w.short(a.as_bytes()));
    w.u8(p.pdn_type);
    w.bool(p.esm_information_transfer);
    w.opt(p.pco.as_ref(), |w, p| w.long(p));
    w.bool(p.epco);
}

fn get_pdn_request(r: &mut Reader) -> R<PdnRequest> {
    Ok(PdnRequest {
        pti: r.u8()?,
        apn: r.opt(|r| r.text("APN"))?,
        pdn_type: r.u8()?,
        esm_information_transfer: r.bool()?,
        pco: r.opt(|r| Ok(r.long()?.to_vec()))?,
        epco: r.bool()?,
    })
}

fn put_security(w: &mut Writer, s: &NasSecurity) {
    w.raw(s.kasme.as_octets());
    w.u8(s.ctx.integrity_algorithm() as u8);
    w.u8(s.ctx.ciphering_algorithm() as u8);
    for d in [oxirush_nas::nas_eps::Direction::Uplink, oxirush_nas::nas_eps::Direction::Downlink] {
        w.opt(s.ctx.nas_count(d), |w, c| w.u32(c.get()));
    }
    w.u8(s.ksi);
    w.bool(s.active);
    w.u32(s.last_ul_count);
    w.u8(s.ue_eea);
    w.u8(s.ue_eia);
    w.raw(&s.nh);
    w.u8(s.ncc);
}

fn get_security(r: &mut Reader) -> R<NasSecurity> {
    let kasme = KAsme::new(&r.array::<32>()?);
    let eia = IntegrityAlgorithm::from_u8(r.u8()?).ok_or(DecodeError::Invalid("integrity algorithm"))?;
    let eea = CipheringAlgorithm::from_u8(r.u8()?).ok_or(DecodeError::Invalid("ciphering algorithm"))?;
    let count = |r: &mut Reader| NasCount::new(r.u32()?).map_err(|_| DecodeError::Invalid("NAS COUNT"));
    let ul = r.opt(count)?;
    let dl = r.opt(count)?;
    // TS 33.401 7.2.5: the NAS keys again from KASME, with the COUNTs kept.
    let ctx = NasSecurityContext::restore_from_kasme(&kasme, eia, eea, (ul, dl))
        .map_err(|_| DecodeError::Invalid("NAS security algorithms"))?;
    let ksi = r.u8()?;
    let active = r.bool()?;
    let last_ul_count = r.u32()?;
    let (ue_eea, ue_eia) = (r.u8()?, r.u8()?);
    let nh = r.array()?;
    let ncc = match r.u8()? {
        n @ 0..=7 => n,
        _ => return Err(DecodeError::Invalid("NCC")),
    };
    Ok(NasSecurity { ctx, kasme, ksi, active, last_ul_count, ue_eea, ue_eia, nh, ncc })
}

fn put_apn(w: &mut Writer, a: &ApnConfiguration) {
    w.u32(a.context_identifier);
    w.short(a.service_selection.as_bytes());
    w.u8(pdn_type_code(a.pdn_type));
    w.u8(a.qci);
    put_arp(w, a.arp);
    put_ambr(w, a.ambr);
    w.opt(a.pdn_gw, put_ip);
    w.opt(a.served_party_ipv4, |w, a| w.raw(&a.octets()));
}

fn get_apn(r: &mut Reader) -> R<ApnConfiguration> {
    Ok(ApnConfiguration {
        context_identifier: r.u32()?,
        service_selection: r.text("APN")?,
        pdn_type: get_pdn_type(r)?,
        qci: r.u8()?,
        arp: get_arp(r)?,
        ambr: get_ambr(r)?,
        pdn_gw: r.opt(get_ip)?,
        served_party_ipv4: r.opt(|r| Ok(Ipv4Addr::from(r.array::<4>()?)))?,
    })
}

fn put_session(w: &mut Writer, s: &Session) {
    w.short(s.apn.as_bytes());
    w.u8(s.ebi);
    w.u8(s.qci);
    put_arp(w, s.arp);
    put_ambr(w, s.apn_ambr);
    put_fteid(w, s.sgw_s11);
    put_fteid(w, s.sgw_s1u);
    w.u8(pdn_type_code(s.pdn_type));
    w.opt(s.paa, |w, a| w.raw(&a.octets()));
    w.opt(s.ipv6_prefix, |w, (p, len)| {
        w.raw(&p.octets());
        w.u8(len);
    });
    w.opt(s.enb_s1u, put_fteid);
}

fn get_session(r: &mut Reader) -> R<Session> {
    Ok(Session {
        apn: r.text("APN")?,
        ebi: get_ebi(r)?,
        qci: r.u8()?,
        arp: get_arp(r)?,
        apn_ambr: get_ambr(r)?,
        sgw_s11: get_fteid(r)?,
        sgw_s1u: get_fteid(r)?,
        pdn_type: get_pdn_type(r)?,
        paa: r.opt(|r| Ok(Ipv4Addr::from(r.array::<4>()?)))?,
        ipv6_prefix: r.opt(|r| {
            let p = Ipv6Addr::from(r.array::<16>()?);
            match r.u8()? {
                len @ 0..=128 => Ok((p, len)),
                _ => Err(DecodeError::Invalid("IPv6 prefix length")),
            }
        })?,
        enb_s1u: r.opt(get_fteid)?,
    })
}

fn put_esm(w: &mut Writer, e: &EsmProcedure) {
    match e {
        EsmProcedure::CreateSession { req, ebi, apn } => {
            w.u8(0);
            put_pdn_request(w, req);
            w.u8(*ebi);
            w.short(apn.as_bytes());
        }
        EsmProcedure::ActivateDefault { pti, ebi, erab_done, accepted } => {
            w.u8(1);
            w.u8(*pti);
            w.u8(*ebi);
            w.bool(*erab_done);
            w.bool(*accepted);
        }
        EsmProcedure::DeleteSession { pti, ebi } => {
            w.u8(2);
            w.u8(*pti);
            w.u8(*ebi);
        }
        EsmProcedure::Deactivate { pti, ebi } => {
            w.u8(3);
            w.u8(*pti);
            w.u8(*ebi);
        }
    }
}

fn get_esm(r: &mut Reader) -> R<EsmProcedure> {
    Ok(match r.u8()? {
        0 => EsmProcedure::CreateSession { req: get_pdn_request(r)?, ebi: get_ebi(r)?, apn: r.text("APN")? },
        1 => {
            EsmProcedure::ActivateDefault { pti: r.u8()?, ebi: get_ebi(r)?, erab_done: r.bool()?, accepted: r.bool()? }
        }
        2 => EsmProcedure::DeleteSession { pti: r.u8()?, ebi: get_ebi(r)? },
        3 => EsmProcedure::Deactivate { pti: r.u8()?, ebi: get_ebi(r)? },
        _ => return Err(DecodeError::Invalid("ESM procedure")),
    })
}

fn put_handover(w: &mut Writer, h: &Handover) {
    match h.phase {
        Phase::PathSwitch => w.u8(0),
        Phase::Preparation => w.u8(1),
        Phase::CreateForwarding => w.u8(2),
        Phase::Execution => w.u8(3),
        Phase::Completion { source, released } => {
            w.u8(4);
            put_s1(w, source);
            w.bool(released);
        }
    }
    w.u64(h.target_assoc.0);
    w.u16(h.target_stream);
    w.opt(h.target, put_s1);
    w.bool(h.direct);
    w.list(&h.admitted, MAX_ADMITTED, |w, a| {
        w.u8(a.ebi);
        put_fteid(w, a.s1u);
        w.opt(a.dl_forwarding, put_fteid);
    });
    w.long(&h.target_to_source);
    w.bool(h.tunnel);
    w.u8(h.pending);
    w.bool(h.failed);
    w.short(&h.released);
    w.bool(h.ue_security_mismatch);
    w.bool(h.release_requested);
}

fn get_handover(r: &mut Reader) -> R<Handover> {
    let phase = match r.u8()? {
        0 => Phase::PathSwitch,
        1 => Phase::Preparation,
        2 => Phase::CreateForwarding,
        3 => Phase::Execution,
        4 => Phase::Completion { source: get_s1(r)?, released: r.bool()? },
        _ => return Err(DecodeError::Invalid("handover phase")),
    };
    Ok(Handover {
        phase,
        target_assoc: AssocId(r.u64()?),
        target_stream: r.u16()?,
        target: r.opt(get_s1)?,
        direct: r.bool()?,
        admitted: r.list(MAX_ADMITTED, "admitted E-RAB count", |r| {
            Ok(Admitted { ebi: get_ebi(r)?, s1u: get_fteid(r)?, dl_forwarding: r.opt(get_fteid)? })
        })?,
        target_to_source: r.long()?.to_vec(),
        tunnel: r.bool()?,
        pending: r.u8()?,
        failed: r.bool()?,
        released: r.short()?.to_vec(),
        ue_security_mismatch: r.bool()?,
        release_requested: r.bool()?,
    })
}

fn nas_timer_code(k: NasTimerKind) -> u8 {
    match k {
        NasTimerKind::T3450 => 0,
        NasTimerKind::T3460 => 1,
        NasTimerKind::T3470 => 2,
        NasTimerKind::T3489 => 3,
        NasTimerKind::T3485 => 4,
        NasTimerKind::T3495 => 5,
        NasTimerKind::T3422 => 6,
    }
}

fn nas_timer_kind(c: u8) -> R<NasTimerKind> {
    Ok(match c {
        0 => NasTimerKind::T3450,
        1 => NasTimerKind::T3460,
        2 => NasTimerKind::T3470,
        3 => NasTimerKind::T3489,
        4 => NasTimerKind::T3485,
        5 => NasTimerKind::T3495,
        6 => NasTimerKind::T3422,
        _ => return Err(DecodeError::Invalid("NAS timer")),
    })
}

fn guard_code(k: GuardKind) -> u8 {
    match k {
        GuardKind::MobileReachable => 0,
        GuardKind::ImplicitDetach => 1,
        GuardKind::T3413 => 2,
        GuardKind::TS1RelocPrep => 3,
        GuardKind::TS1RelocOverall => 4,
        GuardKind::IndirectForwarding => 5,
    }
}

fn guard_kind(c: u8) -> R<GuardKind> {
    Ok(match c {
        0 => GuardKind::MobileReachable,
        1 => GuardKind::ImplicitDetach,
        2 => GuardKind::T3413,
        3 => GuardKind::TS1RelocPrep,
        4 => GuardKind::TS1RelocOverall,
        5 => GuardKind::IndirectForwarding,
        _ => return Err(DecodeError::Invalid("guard timer")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The base seed of the random tests; each case adds its index.
    const SEED: u64 = 0x4d43_5545;

    fn time() -> TimeBase {
        TimeBase { now: Instant::now(), unix_ms: 1_700_000_000_000 }
    }

    fn bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
        let n = rng.random_range(0..=max);
        (0..n).map(|_| rng.random()).collect()
    }

    fn digits(rng: &mut StdRng, n: usize) -> String {
        (0..n).map(|_| char::from(b'0' + rng.random_range(0..10u8))).collect()
    }

    fn opt<T>(rng: &mut StdRng, f: impl FnOnce(&mut StdRng) -> T) -> Option<T> {
        rng.random_bool(0.6).then(|| f(rng))
    }

    fn plmn(rng: &mut StdRng) -> Plmn {
        let mnc_len = rng.random_range(2..=3);
        Plmn::new(&digits(rng, 3), &digits(rng, mnc_len)).unwrap()
    }

    fn fteid(rng: &mut StdRng) -> Fteid {
        Fteid { teid: Teid(rng.random()), ipv4: Ipv4Addr::from(rng.random::<u32>()) }
    }

    fn s1(rng: &mut StdRng) -> S1Conn {
        S1Conn { assoc: AssocId(rng.random()), enb_ue_s1ap_id: rng.random_range(0..1 << 24), stream: rng.random() }
    }

    fn arp(rng: &mut StdRng) -> Arp {
        Arp {
            priority_level: rng.random(),
            pre_emption_capability: rng.random(),
            pre_emption_vulnerability: rng.random(),
        }
    }

    fn ambr(rng: &mut StdRng) -> Ambr {
        Ambr { uplink: rng.random(), downlink: rng.random() }
    }

    fn pdn_type(rng: &mut StdRng) -> PdnType {
        [PdnType::Ipv4, PdnType::Ipv6, PdnType::Ipv4v6][rng.random_range(0..3)]
    }

    fn text(rng: &mut StdRng) -> String {
        let n = rng.random_range(0..40);
        (0..n).map(|_| char::from(rng.random_range(b'a'..=b'z'))).collect()
    }

    fn pdn_request(rng: &mut StdRng) -> PdnRequest {
        PdnRequest {
            pti: rng.random(),
            apn: opt(rng, text),
            pdn_type: rng.random(),
            esm_information_transfer: rng.random(),
            pco: opt(rng, |r| bytes(r, 200)),
            epco: rng.random(),
        }
    }

    fn ebi(rng: &mut StdRng) -> u8 {
        rng.random_range(5..=15)
    }

    fn step(rng: &mut StdRng) -> Step {
        match rng.random_range(0..15) {
            0 => Step::Idle,
            1 => Step::Identity,
            2 => Step::AuthInfo,
            3 => Step::Authentication,
            4 => Step::SecurityMode,
            5 => Step::EsmInformation,
            6 => Step::UpdateLocation,
            7 => Step::CreateSession,
            8 => Step::AttachAccept,
            9 => Step::DetachDeleteSession { switch_off: rng.random(), pending: rng.random() },
            10 => Step::ReleaseAccessBearers,
            11 => Step::ServiceRequest,
            12 => Step::TauAccept { old_mtmsi: opt(rng, |r| r.random()), release: rng.random() },
            13 => Step::NetworkDetach,
            _ => Step::Handover,
        }
    }

    /// A UE context with every field drawn at random among the values the
    /// record takes; deadlines in whole milliseconds after `time.now`.
    fn random_ue(rng: &mut StdRng, time: TimeBase) -> UeContext {
        let mut ue = UeContext::new(rng.random(), rng.random(), s1(rng));
        ue.s1 = opt(rng, s1);
        ue.imsi = opt(rng, |r| {
            let n = r.random_range(6..=15);
            digits(r, n).parse().unwrap()
        });
        ue.guti = opt(rng, |r| Guti {
            gummei: Gummei { plmn: plmn(r), mme_group_id: r.random(), mme_code: r.random() },
            m_tmsi: MTmsi(r.random()),
        });
        ue.old_mtmsi = opt(rng, |r| r.random());
        ue.emm =
            [EmmState::Deregistered, EmmState::CommonProcedureInitiated, EmmState::Registered][rng.random_range(0..3)];
        ue.step = step(rng);
        ue.attach = opt(rng, |r| AttachData {
            eea: r.random(),
            eia: r.random(),
            ue_network_capability: NasUeNetworkCapability::new(bytes(r, 13)),
            pdn: pdn_request(r),
            by_guti: r.random(),
            imsi_requested: r.random(),
        });
        ue.ics_done = rng.random();
        ue.attach_complete = rng.random();
        ue.auth = opt(rng, |r| AuthState {
            vector: EutranVector { rand: r.random(), xres: bytes(r, 16), autn: r.random(), kasme: r.random() },
            ksi: r.random(),
            sync_failures: r.random(),
        });
        ue.security = opt(rng, |r| {
            let kasme = KAsme::new(&r.random::<[u8; 32]>());
            let eia = IntegrityAlgorithm::from_u8(r.random_range(1..=3)).unwrap();
            let eea = CipheringAlgorithm::from_u8(r.random_range(0..=3)).unwrap();
            let count = |r: &mut StdRng| r.random_bool(0.9).then(|| NasCount::new(r.random_range(0..1 << 24)).unwrap());
            let counts = (count(r), count(r));
            NasSecurity {
                ctx: NasSecurityContext::restore_from_kasme(&kasme, eia, eea, counts).unwrap(),
                kasme,
                ksi: r.random(),
                active: r.random(),
                last_ul_count: r.random(),
                ue_eea: r.random(),
                ue_eia: r.random(),
                nh: r.random(),
                ncc: r.random_range(0..8),
            }
        });
        ue.subscription = opt(rng, |r| SubscriptionData {
            msisdn: opt(r, |r| digits(r, 12)),
            ue_ambr: ambr(r),
            default_context_identifier: r.random(),
            apns: (0..r.random_range(0..4))
                .map(|_| ApnConfiguration {
                    context_identifier: r.random(),
                    service_selection: text(r),
                    pdn_type: pdn_type(r),
                    qci: r.random(),
                    arp: arp(r),
                    ambr: ambr(r),
                    pdn_gw: opt(r, |r| match r.random() {
                        true => IpAddr::V4(Ipv4Addr::from(r.random::<u32>())),
                        false => IpAddr::V6(Ipv6Addr::from(r.random::<u128>())),
                    }),
                    served_party_ipv4: opt(r, |r| Ipv4Addr::from(r.random::<u32>())),
                })
                .collect(),
        });
        ue.sessions = (0..rng.random_range(0..4))
            .map(|_| Session {
                apn: text(rng),
                ebi: ebi(rng),
                qci: rng.random(),
                arp: arp(rng),
                apn_ambr: ambr(rng),
                sgw_s11: fteid(rng),
                sgw_s1u: fteid(rng),
                pdn_type: pdn_type(rng),
                paa: opt(rng, |r| Ipv4Addr::from(r.random::<u32>())),
                ipv6_prefix: opt(rng, |r| (Ipv6Addr::from(r.random::<u128>()), r.random_range(0..=128))),
                enb_s1u: opt(rng, fteid),
            })
            .collect();
        ue.esm = opt(rng, |r| match r.random_range(0..4) {
            0 => EsmProcedure::CreateSession { req: pdn_request(r), ebi: ebi(r), apn: text(r) },
            1 => EsmProcedure::ActivateDefault {
                pti: r.random(),
                ebi: ebi(r),
                erab_done: r.random(),
                accepted: r.random(),
            },
            2 => EsmProcedure::DeleteSession { pti: r.random(), ebi: ebi(r) },
            _ => EsmProcedure::Deactivate { pti: r.random(), ebi: ebi(r) },
        });
        let later = |r: &mut StdRng| time.now + Duration::from_millis(r.random_range(0..1_000_000));
        ue.timer = opt(rng, |r| NasTimer {
            kind: nas_timer_kind(r.random_range(0..7)).unwrap(),
            seq: 0,
            deadline: later(r),
            expiries: r.random(),
            message: Bytes::from(bytes(r, 300)),
            header: NasEpsSecurityHeaderType::try_from(r.random_range(0..=5)).unwrap(),
        });
        for kind in 0..5 {
            if rng.random_bool(0.3) {
                let g =
                    GuardTimer { kind: guard_kind(kind).unwrap(), seq: 0, deadline: later(rng), count: rng.random() };
                ue.guards.push(g);
            }
        }
        ue.tai = opt(rng, |r| Tai { plmn: plmn(r), tac: r.random() });
        ue.tai_list = (0..rng.random_range(0..=16)).map(|_| rng.random()).collect();
        ue.ecgi = opt(rng, |r| Ecgi { plmn: plmn(r), eci: r.random_range(0..1 << 28) });
        ue.ue_radio_capability = opt(rng, |r| Bytes::from(bytes(r, 2000)));
        ue.imeisv = opt(rng, |r| digits(r, 16));
        ue.handover = opt(rng, |r| Handover {
            phase: match r.random_range(0..5) {
                0 => Phase::PathSwitch,
                1 => Phase::Preparation,
                2 => Phase::CreateForwarding,
                3 => Phase::Execution,
                _ => Phase::Completion { source: s1(r), released: r.random() },
            },
            target_assoc: AssocId(r.random()),
            target_stream: r.random(),
            target: opt(r, s1),
            direct: r.random(),
            admitted: (0..r.random_range(0..4))
                .map(|_| Admitted { ebi: ebi(r), s1u: fteid(r), dl_forwarding: opt(r, fteid) })
                .collect(),
            target_to_source: bytes(r, 500),
            tunnel: r.random(),
            pending: r.random(),
            failed: r.random(),
            released: (0..r.random_range(0..3)).map(|_| ebi(r)).collect(),
            ue_security_mismatch: r.random(),
            release_requested: r.random(),
        });
        ue.paging = opt(rng, |r| Paging { ddn: r.random(), detach: opt(r, |r| r.random()) });
        ue.releasing = opt(rng, |r| {
            let s1 = s1(r);
            let cause = oxirush_s1ap::s1ap::Cause::nas(oxirush_s1ap::s1ap::CauseNas::detach);
            let command = crate::s1ap_build::ue_context_release_command(ue.id, s1.enb_ue_s1ap_id, cause).unwrap();
            Releasing { s1, command: command.into() }
        });
        ue
    }

    /// encode -> decode -> encode gives the same octets, and the fields
    /// that matter most read back equal.
    #[test]
    fn random_contexts_round_trip() {
        let t = time();
        for case in 0..2000u64 {
            let seed = SEED + case;
            let mut rng = StdRng::seed_from_u64(seed);
            let ue = random_ue(&mut rng, t);
            let octets = encode(&ue, t).unwrap_or_else(|| panic!("seed {seed}: not encoded"));
            let back = decode(&octets, t).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(encode(&back, t).as_deref(), Some(&octets[..]), "seed {seed}: not the same octets");
            assert_eq!(
                (back.id, back.generation, back.s1, back.step),
                (ue.id, ue.generation, ue.s1, ue.step),
                "seed {seed}"
            );
            assert_eq!((&back.imsi, back.guti, back.emm), (&ue.imsi, ue.guti, ue.emm), "seed {seed}");
            assert_eq!(back.timer.as_ref().map(|t| t.deadline), ue.timer.as_ref().map(|t| t.deadline), "seed {seed}");
            if let (Some(a), Some(b)) = (&ue.security, &back.security) {
                for d in [oxirush_nas::nas_eps::Direction::Uplink, oxirush_nas::nas_eps::Direction::Downlink] {
                    assert_eq!(a.ctx.nas_count(d), b.ctx.nas_count(d), "seed {seed}");
                }
            }
            assert_eq!(peek_context(&octets), Ok((ue.id, ue.generation)), "seed {seed}");
        }
    }

    /// Random octets and damaged records never make the decoder panic; what
    /// it takes, it writes again and takes again.
    #[test]
    fn decoder_survives_any_input() {
        let t = time();
        for case in 0..4000u64 {
            let seed = SEED ^ (case << 20);
            let mut rng = StdRng::seed_from_u64(seed);
            let mut input = match rng.random_range(0..3) {
                0 => bytes(&mut rng, 400),
                _ => encode(&random_ue(&mut rng, t), t).unwrap(),
            };
            if !input.is_empty() {
                match rng.random_range(0..4) {
                    0 => input.truncate(rng.random_range(0..input.len())),
                    1 => {
                        for _ in 0..rng.random_range(1..8) {
                            let i = rng.random_range(0..input.len());
                            input[i] = rng.random();
                        }
                    }
                    2 => {
                        // A body that the header says is whole.
                        let i = rng.random_range(HEADER_LEN.min(input.len())..=input.len());
                        input.truncate(i);
                        if input.len() >= HEADER_LEN {
                            let body = (input.len() - HEADER_LEN) as u32;
                            input[field::LENGTH].copy_from_slice(&body.to_be_bytes());
                        }
                    }
                    _ => input.extend(bytes(&mut rng, 4)),
                }
            }
            let decoded = std::panic::catch_unwind(|| decode(&input, t))
                .unwrap_or_else(|_| panic!("seed {seed}: the decoder panicked on {}", hex::encode(&input)));
            if let Ok(ue) = decoded {
                let again = encode(&ue, t).unwrap_or_else(|| panic!("seed {seed}: taken but not written"));
                assert!(decode(&again, t).is_ok(), "seed {seed}: written but not taken");
            }
        }
    }

    #[test]
    fn header_is_checked() {
        let t = time();
        let ue = UeContext::new(7, 1, S1Conn { assoc: AssocId(1), enb_ue_s1ap_id: 3, stream: 1 });
        let mut r = encode(&ue, t).unwrap();
        assert_eq!(
            Record::new_checked(&r).map(|v| (v.version(), v.body_len())).ok(),
            Some((VERSION, r.len() - HEADER_LEN))
        );
        assert_eq!(decode(&r[..5], t).err(), Some(DecodeError::Truncated));
        r.push(0);
        assert_eq!(decode(&r, t).err(), Some(DecodeError::Trailing(1)));
        r.pop();
        r[4] = VERSION + 1;
        assert_eq!(decode(&r, t).err(), Some(DecodeError::Version(VERSION + 1)));
        // Version 1 had no TAI list: refused, not misread.
        r[4] = 1;
        assert_eq!(decode(&r, t).err(), Some(DecodeError::Version(1)));
        r[0] = b'X';
        assert_eq!(decode(&r, t).err(), Some(DecodeError::Magic));
    }

    /// Deadlines cross processes as wall-clock time: 3 s ahead on A is 3 s
    /// ahead on B, whose monotonic clock is unrelated; one past fires now.
    #[test]
    fn deadlines_survive_a_process_change() {
        let a = time();
        let mut ue = UeContext::new(7, 1, S1Conn { assoc: AssocId(1), enb_ue_s1ap_id: 3, stream: 1 });
        let g = |kind, deadline| GuardTimer { kind, seq: 9, deadline, count: 2 };
        ue.guards.push(g(GuardKind::MobileReachable, a.now + Duration::from_secs(3)));
        ue.guards.push(g(GuardKind::T3413, a.now.checked_sub(Duration::from_millis(1)).unwrap_or(a.now)));
        let octets = encode(&ue, a).unwrap();
        // B reads it 1 s of wall-clock time later, on a clock 1 h ahead.
        let b = TimeBase { now: a.now + Duration::from_secs(3600), unix_ms: a.unix_ms + 1000 };
        let back = decode(&octets, b).unwrap();
        assert_eq!(back.guards[0].deadline, b.now + Duration::from_secs(2));
        assert_eq!(back.guards[1].deadline, b.now);
        assert_eq!(back.guards[0].count, 2);
    }
}
