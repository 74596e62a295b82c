//! The link between the front end and an MME host: TCP on loopback,
//! length-prefixed frames. Every frame is a 4-octet big-endian length (of
//! what follows), a type octet and its fields. Nothing here trusts the
//! peer: a frame over [`MAX_FRAME`], of an unknown type or too short is a
//! [`WireError`], and the connection that carried it is closed.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use mobicore_common::Groups;
use mobicore_store::replica::{ReplicaError, ReplicaMsg, MAX_BATCH_LEN, MAX_MSG_LEN};
use mobicore_store::MAX_KEY_LEN;
use std::net::IpAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The longest frame body taken: a batch of replicated writes with its
/// header (an S1AP PDU is far shorter; SCTP user messages of S1AP stay
/// under 64 KiB).
pub const MAX_FRAME: usize = MAX_BATCH_LEN + 1024;

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Host -> front end, first frame: the host's number (1..=254) and
    /// whether its store is its own (`--store local`).
    Hello { host: u8, local: bool },
    /// Front end -> host, the one answer to a [`Frame::Hello`] it does
    /// not take; then it closes the link.
    Refused { why: Refusal },
    /// Front end -> host: an eNB's association is up.
    EnbUp { assoc: u64, peer: IpAddr, outbound_streams: u16 },
    /// Front end -> host: the association is gone.
    EnbDown { assoc: u64 },
    /// An S1AP PDU of an eNB's association (uplink: from the eNB; downlink:
    /// to be sent to it on `stream`).
    S1 { assoc: u64, stream: u16, data: Bytes },
    /// Front end -> host: an uplink [`Frame::S1`] a host took before it
    /// went and had not handled ([`Frame::Handled`]), sent again to the
    /// host serving its UE now (`Router::route_again`). As a
    /// [`Frame::S1`], but an INITIAL UE MESSAGE whose S1 connection a UE
    /// at the host holds is dropped: the dead host handled it and the
    /// host took its record over (`Mme::taken_over_initial`).
    S1Again { assoc: u64, stream: u16, data: Bytes },
    /// Host -> front end, periodically: the host's moving averages for the
    /// inter-host balancer (seed 004 5.1; `q_i`, `c_i` of Eq. 1), in fixed
    /// point: CPU use and shares in 1/10,000, queue lengths in 1/1,000 of
    /// a message. At most [`MAX_LOAD_NFS`] entries.
    Load { cpu_e4: u16, nfs: Vec<NfLoadWire> },
    /// Front end -> host: being drained (seed 004 5.2 "Scaling"): no new
    /// procedure will come; say [`Frame::Drained`] once none runs.
    Drain,
    /// Host -> front end: no procedure runs and every UE is in the store;
    /// from now on the host gives back what it is sent ([`Frame::Bounce`]).
    Drained,
    /// Host -> front end, after [`Frame::Drained`]: an uplink S1AP PDU it
    /// was sent, not handled, for the front end to route again.
    Bounce { assoc: u64, stream: u16, data: Bytes },
    /// Front end -> host: exit (after [`Frame::Drained`]).
    Stop,
    /// Front end -> host, at its Hello and whenever they change: the hosts
    /// it replicates its UE records to (with a host-local store, seed 004
    /// 4.3), each with the replica groups it takes: for each group, the
    /// host that would be its heir if it went now.
    ReplicateTo { targets: Vec<(u8, Groups)> },
    /// Front end -> host: host `host` is gone and its UEs of `groups` are
    /// this host's now: take their records from the copy replicated here.
    Inherit { host: u8, groups: Groups },
    /// Front end -> host: host `host` went earlier, and the heir that
    /// served its UEs of `groups` has gone since; they are this host's
    /// now: load them from the store (with host-local stores, from the
    /// copy of that heir, inherited just before).
    Adopt { host: u8, groups: Groups },
    /// Replicated UE records (host-local stores): host -> front end, to
    /// replica host `peer`; front end -> host, from host `peer`.
    Replica { peer: u8, msg: Replicated },
    /// Front end -> host, at its Hello: procedures are placed (`mme-frontend
    /// --placement procedure`): say which UEs you hold.
    Track,
    /// Host -> front end, after [`Frame::Track`]: the host holds UE `id`
    /// (MME-UE-S1AP-ID; M-TMSI `m_tmsi` if it has one) in a procedure or
    /// an S1 connection; sent before anything of it goes out.
    Holding { id: u32, m_tmsi: Option<u32> },
    /// Host -> front end: that UE is at rest, its record written (and
    /// dropped here if another host's).
    Released { id: u32 },
    /// Front end -> host: another host has written UE `id`'s record since
    /// this host read it: read it again; with `resume`, the host that
    /// wrote it is gone, and the request its step awaits goes again from
    /// here (as for a UE taken over).
    Refresh { id: u32, resume: bool },
    /// Front end -> host, before [`Frame::Inherit`] or [`Frame::Adopt`]:
    /// UE `id` of the host it takes over is held by another host, which
    /// writes it: not to be loaded until its [`Frame::Refresh`].
    Away { id: u32 },
    /// Front end -> host, before [`Frame::Inherit`] or [`Frame::Adopt`]:
    /// a procedure of the UE with M-TMSI `m_tmsi` of the host it takes
    /// over was placed on another host, not yet holding it, which reads
    /// it from the store: not to be loaded (that adoption only).
    AwayPlaced { m_tmsi: u32 },
    /// Front end -> host: a procedure of its UE with M-TMSI `m_tmsi` was
    /// placed on another host: drop the UE if it is at rest here (its
    /// timers run where it is held), to be read again at its
    /// [`Frame::Refresh`].
    Lent { m_tmsi: u32 },
    /// Front end -> host: that placement ended with no host holding the
    /// UE: read it again.
    Returned { m_tmsi: u32 },
    /// With host-local stores, host -> front end before its
    /// [`Frame::Released`] of a UE placed there from another host (a
    /// visitor): the UE's record and index keys (`key`, value), deleted
    /// there; front end -> the host serving the UE's MME-UE-S1AP-ID `id`,
    /// to put in its own store before its [`Frame::Refresh`]. At most
    /// [`MAX_WRITE_BACK`] keys.
    WriteBack { id: u32, writes: Vec<(String, Vec<u8>)> },
    /// Front end -> each replica host of host `owner`, as it relays a
    /// [`Frame::WriteBack`] to `owner`: those keys hold these values in
    /// `owner`'s store now; the copy of it here takes them before
    /// `owner`'s replicated write of them comes, so that no procedure
    /// placed here meanwhile reads the values they replace.
    Copied { owner: u8, writes: Vec<(String, Vec<u8>)> },
    /// A GTPv2-C message between a host's S11 client and the MME's S11
    /// address, the front end's: host -> front end, to be relayed to the
    /// S-GW; front end -> host, relayed from it. At most [`MAX_S11_LEN`]
    /// octets.
    S11 { data: Bytes },
    /// Host -> front end: the first `upto` [`Frame::S1`]s the front end
    /// sent this host are handled, their UEs' records written (with a
    /// host-local store, its replicated batch sent ahead of this frame):
    /// the front end forgets them. Those it has not heard of as handled
    /// when the host dies go again, to the heir.
    Handled { upto: u64 },
}

/// Why the front end refuses a host ([`Frame::Refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A host of that number is up.
    InUse = 1,
    /// A host of that number went: its heirs serve the UEs whose
    /// identifiers carry it (`Router::is_gone`).
    Gone = 2,
    /// Its store is of the other kind than the first host's (its own,
    /// `--store local`, or one shared).
    OtherStore = 3,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::InUse => "a host of this number (--id) is up: give this one another",
            Refusal::Gone => {
                "a host of this number (--id) went and its UEs are served by its heirs: a number is never taken \
                 again, give this host a new one"
            }
            Refusal::OtherStore => {
                "the hosts' stores are of another kind (--store local: each its own; else one shared): give this \
                 host theirs"
            }
        })
    }
}

/// A [`Frame::S11`]'s message at most: a UDP datagram's payload.
pub const MAX_S11_LEN: usize = 65_507;

/// Keys of a [`Frame::WriteBack`] at most: a record, its MME-UE-S1AP-ID
/// and M-TMSI index keys (an old GUTI's too).
pub const MAX_WRITE_BACK: usize = 8;

/// A [`ReplicaMsg`] on the link, encoded: the front end relays it from
/// host to host unread (its length checked: at most [`MAX_MSG_LEN`]), and
/// the replica host decodes it ([`Replicated::decode`]). Reading every
/// batch's keys and values in the front end only to write them out again
/// was a fifth of its time in the allocator (`perf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicated(Bytes);

impl Replicated {
    pub fn decode(&self) -> Result<ReplicaMsg, ReplicaError> {
        ReplicaMsg::decode(&self.0)
    }

    /// Octets as they came, whatever they hold.
    #[cfg(test)]
    pub fn raw(b: &'static [u8]) -> Replicated {
        Replicated(Bytes::from_static(b))
    }
}

impl From<ReplicaMsg> for Replicated {
    fn from(msg: ReplicaMsg) -> Replicated {
        let mut b = Vec::new();
        msg.encode(&mut b);
        Replicated(b.into())
    }
}

/// One NF's entry of a [`Frame::Load`]: its procedure kind (by
/// `ProcedureKind::index`), queue length and CPU share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfLoadWire {
    pub kind: u8,
    pub q_e3: u32,
    pub c_e4: u16,
}

/// Entries of a load report at most.
pub const MAX_LOAD_NFS: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("frame of {0} octets (at most {MAX_FRAME})")]
    TooLong(usize),
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("truncated frame")]
    Truncated,
    #[error("bad address family {0}")]
    BadFamily(u8),
    #[error("unknown refusal {0}")]
    UnknownRefusal(u8),
    #[error("load report of {0} entries (at most {MAX_LOAD_NFS})")]
    TooManyNfs(usize),
    #[error("write-back of {0} keys (at most {MAX_WRITE_BACK})")]
    TooManyWrites(usize),
    #[error("write-back key not UTF-8 or over {MAX_KEY_LEN} octets")]
    BadKey,
    #[error("S11 message of {0} octets (at most {MAX_S11_LEN})")]
    S11TooLong(usize),
    #[error(transparent)]
    Replica(#[from] ReplicaError),
}

const HELLO: u8 = 1;
const ENB_UP: u8 = 2;
const ENB_DOWN: u8 = 3;
const S1: u8 = 4;
const LOAD: u8 = 5;
const DRAIN: u8 = 6;
const DRAINED: u8 = 7;
const BOUNCE: u8 = 8;
const STOP: u8 = 9;
const REPLICATE_TO: u8 = 10;
const INHERIT: u8 = 11;
const REPLICA: u8 = 12;
const ADOPT: u8 = 13;
const TRACK: u8 = 14;
const HOLDING: u8 = 15;
const RELEASED: u8 = 16;
const REFRESH: u8 = 17;
const AWAY: u8 = 18;
const LENT: u8 = 19;
const RETURNED: u8 = 20;
const WRITE_BACK: u8 = 21;
const COPIED: u8 = 22;
const S11: u8 = 23;
const HANDLED: u8 = 24;
const AWAY_PLACED: u8 = 25;
const REFUSED: u8 = 26;
const S1_AGAIN: u8 = 27;

impl Frame {
    /// The frame with its length prefix.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(32);
        self.encode_into(&mut b);
        b.freeze()
    }

    /// [`Frame::encode`] appended to `b` (a batch of frames for one write:
    /// no buffer of its own per frame).
    pub fn encode_into(&self, b: &mut BytesMut) {
        let start = b.len();
        b.put_u32(0);
        match self {
            Frame::Hello { host, local } => {
                b.put_u8(HELLO);
                b.put_u8(*host);
                b.put_u8(u8::from(*local));
            }
            Frame::Refused { why } => {
                b.put_u8(REFUSED);
                b.put_u8(*why as u8);
            }
            Frame::S11 { data } => {
                b.put_u8(S11);
                b.put_slice(data);
            }
            Frame::EnbUp { assoc, peer, outbound_streams } => {
                b.put_u8(ENB_UP);
                b.put_u64(*assoc);
                b.put_u16(*outbound_streams);
                put_ip(b, *peer);
            }
            Frame::EnbDown { assoc } => {
                b.put_u8(ENB_DOWN);
                b.put_u64(*assoc);
            }
            Frame::S1 { assoc, stream, data }
            | Frame::S1Again { assoc, stream, data }
            | Frame::Bounce { assoc, stream, data } => {
                b.put_u8(match self {
                    Frame::S1 { .. } => S1,
                    Frame::S1Again { .. } => S1_AGAIN,
                    _ => BOUNCE,
                });
                b.put_u64(*assoc);
                b.put_u16(*stream);
                b.put_slice(data);
            }
            Frame::Drain => b.put_u8(DRAIN),
            Frame::Drained => b.put_u8(DRAINED),
            Frame::Stop => b.put_u8(STOP),
            Frame::ReplicateTo { targets } => {
                b.put_u8(REPLICATE_TO);
                // At most 255 (host numbers are 1..=254).
                let targets = &targets[..targets.len().min(255)];
                b.put_u8(targets.len() as u8);
                for (host, groups) in targets {
                    b.put_u8(*host);
                    b.put_slice(&groups.to_bytes());
                }
            }
            Frame::Inherit { host, groups } | Frame::Adopt { host, groups } => {
                b.put_u8(if matches!(self, Frame::Inherit { .. }) { INHERIT } else { ADOPT });
                b.put_u8(*host);
                b.put_slice(&groups.to_bytes());
            }
            Frame::Track => b.put_u8(TRACK),
            Frame::Holding { id, m_tmsi } => {
                b.put_u8(HOLDING);
                b.put_u32(*id);
                if let Some(m) = m_tmsi {
                    b.put_u32(*m);
                }
            }
            Frame::Released { id } => {
                b.put_u8(RELEASED);
                b.put_u32(*id);
            }
            Frame::Handled { upto } => {
                b.put_u8(HANDLED);
                b.put_u64(*upto);
            }
            Frame::Refresh { id, resume } => {
                b.put_u8(REFRESH);
                b.put_u32(*id);
                b.put_u8(u8::from(*resume));
            }
            Frame::Away { id } => {
                b.put_u8(AWAY);
                b.put_u32(*id);
            }
            Frame::AwayPlaced { m_tmsi } => {
                b.put_u8(AWAY_PLACED);
                b.put_u32(*m_tmsi);
            }
            Frame::Lent { m_tmsi } => {
                b.put_u8(LENT);
                b.put_u32(*m_tmsi);
            }
            Frame::Returned { m_tmsi } => {
                b.put_u8(RETURNED);
                b.put_u32(*m_tmsi);
            }
            Frame::WriteBack { id, writes } => {
                b.put_u8(WRITE_BACK);
                b.put_u32(*id);
                put_writes(b, writes);
            }
            Frame::Copied { owner, writes } => {
                b.put_u8(COPIED);
                b.put_u8(*owner);
                put_writes(b, writes);
            }
            Frame::Replica { peer, msg } => {
                b.put_u8(REPLICA);
                b.put_u8(*peer);
                b.put_slice(&msg.0);
            }
            Frame::Load { cpu_e4, nfs } => {
                b.put_u8(LOAD);
                b.put_u16(*cpu_e4);
                // A longer list is cut: the peer would refuse it.
                let nfs = &nfs[..nfs.len().min(MAX_LOAD_NFS)];
                b.put_u8(nfs.len() as u8);
                for nf in nfs {
                    b.put_u8(nf.kind);
                    b.put_u32(nf.q_e3);
                    b.put_u16(nf.c_e4);
                }
            }
        }
        let len = (b.len() - start - 4) as u32;
        b[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// A frame from its body (what follows the length).
    pub fn decode(mut body: Bytes) -> Result<Frame, WireError> {
        let need = |b: &Bytes, n: usize| if b.remaining() < n { Err(WireError::Truncated) } else { Ok(()) };
        need(&body, 1)?;
        let t = body.get_u8();
        match t {
            HELLO => {
                need(&body, 2)?;
                Ok(Frame::Hello { host: body.get_u8(), local: body.get_u8() != 0 })
            }
            REFUSED => {
                need(&body, 1)?;
                let why = match body.get_u8() {
                    1 => Refusal::InUse,
                    2 => Refusal::Gone,
                    3 => Refusal::OtherStore,
                    x => return Err(WireError::UnknownRefusal(x)),
                };
                Ok(Frame::Refused { why })
            }
            S11 if body.len() > MAX_S11_LEN => Err(WireError::S11TooLong(body.len())),
            S11 => Ok(Frame::S11 { data: body }),
            ENB_UP => {
                need(&body, 11)?;
                let assoc = body.get_u64();
                let outbound_streams = body.get_u16();
                let peer = get_ip(&mut body)?;
                Ok(Frame::EnbUp { assoc, peer, outbound_streams })
            }
            ENB_DOWN => {
                need(&body, 8)?;
                Ok(Frame::EnbDown { assoc: body.get_u64() })
            }
            S1 | S1_AGAIN | BOUNCE => {
                need(&body, 10)?;
                let assoc = body.get_u64();
                let stream = body.get_u16();
                Ok(match t {
                    S1 => Frame::S1 { assoc, stream, data: body },
                    S1_AGAIN => Frame::S1Again { assoc, stream, data: body },
                    _ => Frame::Bounce { assoc, stream, data: body },
                })
            }
            DRAIN => Ok(Frame::Drain),
            DRAINED => Ok(Frame::Drained),
            STOP => Ok(Frame::Stop),
            REPLICATE_TO => {
                need(&body, 1)?;
                let n = usize::from(body.get_u8());
                need(&body, n * 33)?;
                let targets = (0..n).map(|_| (body.get_u8(), groups(&mut body))).collect();
                Ok(Frame::ReplicateTo { targets })
            }
            INHERIT | ADOPT => {
                need(&body, 33)?;
                let (host, groups) = (body.get_u8(), groups(&mut body));
                Ok(match t {
                    INHERIT => Frame::Inherit { host, groups },
                    _ => Frame::Adopt { host, groups },
                })
            }
            TRACK => Ok(Frame::Track),
            HOLDING => {
                need(&body, 4)?;
                let id = body.get_u32();
                let m_tmsi = match body.remaining() {
                    0 => None,
                    4 => Some(body.get_u32()),
                    _ => return Err(WireError::Truncated),
                };
                Ok(Frame::Holding { id, m_tmsi })
            }
            RELEASED => {
                need(&body, 4)?;
                Ok(Frame::Released { id: body.get_u32() })
            }
            HANDLED => {
                need(&body, 8)?;
                Ok(Frame::Handled { upto: body.get_u64() })
            }
            REFRESH => {
                need(&body, 5)?;
                Ok(Frame::Refresh { id: body.get_u32(), resume: body.get_u8() != 0 })
            }
            AWAY => {
                need(&body, 4)?;
                Ok(Frame::Away { id: body.get_u32() })
            }
            AWAY_PLACED => {
                need(&body, 4)?;
                Ok(Frame::AwayPlaced { m_tmsi: body.get_u32() })
            }
            LENT => {
                need(&body, 4)?;
                Ok(Frame::Lent { m_tmsi: body.get_u32() })
            }
            RETURNED => {
                need(&body, 4)?;
                Ok(Frame::Returned { m_tmsi: body.get_u32() })
            }
            WRITE_BACK => {
                need(&body, 4)?;
                let id = body.get_u32();
                Ok(Frame::WriteBack { id, writes: get_writes(&mut body)? })
            }
            COPIED => {
                need(&body, 1)?;
                let owner = body.get_u8();
                Ok(Frame::Copied { owner, writes: get_writes(&mut body)? })
            }
            REPLICA => {
                need(&body, 2)?;
                let peer = body.get_u8();
                if body.len() > MAX_MSG_LEN {
                    return Err(ReplicaError::TooLong.into());
                }
                Ok(Frame::Replica { peer, msg: Replicated(body) })
            }
            LOAD => {
                need(&body, 3)?;
                let cpu_e4 = body.get_u16();
                let n = usize::from(body.get_u8());
                if n > MAX_LOAD_NFS {
                    return Err(WireError::TooManyNfs(n));
                }
                need(&body, n * 7)?;
                let nfs = (0..n)
                    .map(|_| NfLoadWire { kind: body.get_u8(), q_e3: body.get_u32(), c_e4: body.get_u16() })
                    .collect();
                Ok(Frame::Load { cpu_e4, nfs })
            }
            t => Err(WireError::UnknownType(t)),
        }
    }
}

/// Keys and values of a [`Frame::WriteBack`] or [`Frame::Copied`]: their
/// count, then each key (2-octet length) and value (4-octet length). A
/// longer list is cut: the peer would refuse it.
fn put_writes(b: &mut BytesMut, writes: &[(String, Vec<u8>)]) {
    let writes = &writes[..writes.len().min(MAX_WRITE_BACK)];
    b.put_u8(writes.len() as u8);
    for (k, v) in writes {
        b.put_u16(k.len() as u16);
        b.put_slice(k.as_bytes());
        b.put_u32(v.len() as u32);
        b.put_slice(v);
    }
}

/// 32 octets of a replica group set (the caller checked they are there).
fn groups(body: &mut Bytes) -> Groups {
    let mut b = [0u8; 32];
    body.copy_to_slice(&mut b);
    Groups::from_bytes(&b)
}

fn get_writes(body: &mut Bytes) -> Result<Vec<(String, Vec<u8>)>, WireError> {
    let need = |b: &Bytes, n: usize| if b.remaining() < n { Err(WireError::Truncated) } else { Ok(()) };
    need(body, 1)?;
    let n = usize::from(body.get_u8());
    if n > MAX_WRITE_BACK {
        return Err(WireError::TooManyWrites(n));
    }
    let mut writes = Vec::with_capacity(n);
    for _ in 0..n {
        need(body, 2)?;
        let len = usize::from(body.get_u16());
        if len > MAX_KEY_LEN {
            return Err(WireError::BadKey);
        }
        need(body, len)?;
        let key = String::from_utf8(body.split_to(len).to_vec()).map_err(|_| WireError::BadKey)?;
        need(body, 4)?;
        let len = body.get_u32() as usize;
        need(body, len)?;
        writes.push((key, body.split_to(len).to_vec()));
    }
    Ok(writes)
}

/// An address: its family (4 or 6), then its octets.
fn put_ip(b: &mut BytesMut, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            b.put_u8(4);
            b.put_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            b.put_u8(6);
            b.put_slice(&a.octets());
        }
    }
}

fn get_ip(body: &mut Bytes) -> Result<IpAddr, WireError> {
    let need = |b: &Bytes, n: usize| if b.remaining() < n { Err(WireError::Truncated) } else { Ok(()) };
    need(body, 1)?;
    match body.get_u8() {
        4 => {
            need(body, 4)?;
            let mut o = [0u8; 4];
            body.copy_to_slice(&mut o);
            Ok(IpAddr::from(o))
        }
        6 => {
            need(body, 16)?;
            let mut o = [0u8; 16];
            body.copy_to_slice(&mut o);
            Ok(IpAddr::from(o))
        }
        f => Err(WireError::BadFamily(f)),
    }
}

/// Why reading a frame stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// What a link's next length-prefixed body (a 4-octet big-endian length
/// first) was.
pub enum Body {
    /// The stream ended cleanly before a length.
    End,
    /// Its length is over the link's bound: not read.
    TooLong(usize),
    Data(Vec<u8>),
}

/// Read the next length-prefixed body of at most `max` octets (the host
/// links' frames here, the NF instances' messages in `nf`).
pub async fn read_body<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Body> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(Body::End),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Ok(Body::TooLong(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(Body::Data(body))
}

/// Read one frame; `Ok(None)` at a clean end of the stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>, ReadError> {
    match read_body(r, MAX_FRAME).await? {
        Body::End => Ok(None),
        Body::TooLong(len) => Err(WireError::TooLong(len).into()),
        Body::Data(body) => Ok(Some(Frame::decode(Bytes::from(body))?)),
    }
}

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> std::io::Result<()> {
    w.write_all(&f.encode()).await
}

/// Octets gathered into one write at most (a link's frames queued at a
/// wake go out in one system call, not one each).
const BATCH: usize = 64 * 1024;

/// Writes the frames of `rx` to `w` until `rx` closes (`Ok`) or a write
/// fails: each wake writes what is queued then, up to [`BATCH`] octets.
pub async fn write_queued<W: AsyncWrite + Unpin>(w: &mut W, rx: &mut mpsc::Receiver<Frame>) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(BATCH);
    let drain = |buf: &mut BytesMut, rx: &mut mpsc::Receiver<Frame>| {
        while buf.len() < BATCH {
            let Ok(f) = rx.try_recv() else { break };
            f.encode_into(buf);
        }
    };
    while let Some(f) = rx.recv().await {
        buf.clear();
        f.encode_into(&mut buf);
        drain(&mut buf, rx);
        // Once more after the tasks that were ready with this one have
        // run: what they queue goes in this write. A write over loopback
        // TCP costs the sender the receiver's side too, and wakes it.
        if buf.len() < BATCH {
            tokio::task::yield_now().await;
            drain(&mut buf, rx);
        }
        w.write_all(&buf).await?;
    }
    Ok(())
}

/// A link's reading side, buffered: a wake reads what has arrived, not a
/// frame's length and body in two system calls.
pub fn buffered<R: AsyncRead>(r: R) -> tokio::io::BufReader<R> {
    tokio::io::BufReader::with_capacity(BATCH, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(f: Frame) -> Frame {
        let enc = f.encode();
        let len = u32::from_be_bytes(enc[..4].try_into().unwrap()) as usize;
        assert_eq!(len, enc.len() - 4);
        let back = Frame::decode(enc.slice(4..)).unwrap();
        assert_eq!(back, f);
        back
    }

    #[test]
    fn frames_round_trip() {
        round_trip(Frame::Hello { host: 3, local: false });
        round_trip(Frame::Hello { host: 254, local: true });
        round_trip(Frame::Refused { why: Refusal::InUse });
        round_trip(Frame::Refused { why: Refusal::Gone });
        round_trip(Frame::Refused { why: Refusal::OtherStore });
        assert_eq!(Frame::decode(Bytes::from_static(&[REFUSED, 4])), Err(WireError::UnknownRefusal(4)));
        round_trip(Frame::S11 { data: Bytes::from_static(b"\x48\x20\x00\x08") });
        round_trip(Frame::S11 { data: Bytes::from(vec![7; MAX_S11_LEN]) });
        round_trip(Frame::WriteBack { id: 0x0300_0001, writes: Vec::new() });
        round_trip(Frame::Copied {
            owner: 3,
            writes: vec![("mme/mtmsi/03000002".into(), b"001010000000001".to_vec())],
        });
        round_trip(Frame::WriteBack {
            id: 0x0300_0001,
            writes: vec![("mme/ue/001010000000001".into(), vec![1, 2, 3]), ("mme/id/03000001".into(), Vec::new())],
        });
        round_trip(Frame::EnbUp { assoc: 7, peer: "127.0.0.1".parse().unwrap(), outbound_streams: 2 });
        round_trip(Frame::EnbUp { assoc: 7, peer: "::1".parse().unwrap(), outbound_streams: 9 });
        round_trip(Frame::EnbDown { assoc: 7 });
        round_trip(Frame::S1 { assoc: 1, stream: 3, data: Bytes::from_static(b"\x00\x0c\x40") });
        round_trip(Frame::S1Again { assoc: 1, stream: 3, data: Bytes::from_static(b"\x00\x0c\x40") });
        round_trip(Frame::Load { cpu_e4: 0, nfs: vec![] });
        round_trip(Frame::Bounce { assoc: 2, stream: 1, data: Bytes::from_static(b"\x00\x0c\x40") });
        for f in [Frame::Drain, Frame::Drained, Frame::Stop] {
            round_trip(f);
        }
        round_trip(Frame::ReplicateTo { targets: vec![] });
        let some: Groups = [0, 7, 255].into_iter().collect();
        round_trip(Frame::ReplicateTo { targets: vec![(2, Groups::ALL), (254, some)] });
        round_trip(Frame::Inherit { host: 3, groups: some });
        round_trip(Frame::Adopt { host: 4, groups: Groups::ALL });
        round_trip(Frame::Track);
        round_trip(Frame::Holding { id: 0x0200_0001, m_tmsi: Some(u32::MAX) });
        round_trip(Frame::Holding { id: 0x0200_0001, m_tmsi: None });
        round_trip(Frame::Released { id: 7 });
        round_trip(Frame::Handled { upto: u64::MAX });
        round_trip(Frame::Refresh { id: 0x0300_0009, resume: false });
        round_trip(Frame::Refresh { id: 3, resume: true });
        round_trip(Frame::Away { id: 0x0400_0001 });
        round_trip(Frame::AwayPlaced { m_tmsi: 0x0400_0002 });
        round_trip(Frame::Lent { m_tmsi: 0x0200_0005 });
        round_trip(Frame::Returned { m_tmsi: 0x0200_0005 });
        round_trip(Frame::Replica { peer: 2, msg: ReplicaMsg::Resync.into() });
        let op = mobicore_store::replica::Op::Put { key: "mme/ue/1".into(), version: 3, value: vec![7; 1000] };
        let batch = ReplicaMsg::Batch { reset: true, seq: 0, ops: vec![op] };
        let Frame::Replica { msg, .. } = round_trip(Frame::Replica { peer: 2, msg: batch.clone().into() }) else {
            unreachable!()
        };
        assert_eq!(msg.decode(), Ok(batch));
        // A full batch fits a frame.
        let big = mobicore_store::replica::Op::Put { key: "k".into(), version: 1, value: vec![0; MAX_BATCH_LEN - 20] };
        let f = Frame::Replica { peer: 9, msg: ReplicaMsg::Batch { reset: false, seq: 5, ops: vec![big] }.into() };
        assert!(f.encode().len() - 4 <= MAX_FRAME);
        round_trip(f);
        let nf = NfLoadWire { kind: 4, q_e3: u32::MAX, c_e4: 5000 };
        round_trip(Frame::Load { cpu_e4: 10_000, nfs: vec![nf; MAX_LOAD_NFS] });
    }

    #[test]
    fn bad_frames_are_errors() {
        assert_eq!(Frame::decode(Bytes::new()), Err(WireError::Truncated));
        assert_eq!(Frame::decode(Bytes::from_static(&[99])), Err(WireError::UnknownType(99)));
        assert_eq!(Frame::decode(Bytes::from_static(&[REPLICATE_TO, 3, 1])), Err(WireError::Truncated));
        // A replicated message is the replica host's to read, not the link's.
        let Ok(Frame::Replica { peer: 1, msg }) = Frame::decode(Bytes::from_static(&[REPLICA, 1, 77])) else {
            panic!("not relayed as it is")
        };
        assert_eq!(msg.decode(), Err(ReplicaError::Unknown(77)));
        let mut long = vec![REPLICA, 1];
        long.resize(2 + MAX_MSG_LEN + 1, 0);
        assert_eq!(Frame::decode(Bytes::from(long)), Err(WireError::Replica(ReplicaError::TooLong)));
        assert_eq!(Frame::decode(Bytes::from_static(&[BOUNCE, 0])), Err(WireError::Truncated));
        assert_eq!(
            Frame::decode(Bytes::from_static(&[ENB_UP, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 5])),
            Err(WireError::BadFamily(5))
        );
        assert_eq!(Frame::decode(Bytes::from_static(&[S1, 0, 0])), Err(WireError::Truncated));
        let mut long = vec![S11];
        long.resize(1 + MAX_S11_LEN + 1, 0);
        assert_eq!(Frame::decode(Bytes::from(long)), Err(WireError::S11TooLong(MAX_S11_LEN + 1)));
        assert_eq!(Frame::decode(Bytes::from_static(&[LOAD, 0, 0, 33])), Err(WireError::TooManyNfs(33)));
        assert_eq!(Frame::decode(Bytes::from_static(&[WRITE_BACK, 0, 0, 0, 1, 9])), Err(WireError::TooManyWrites(9)));
        assert_eq!(Frame::decode(Bytes::from_static(&[WRITE_BACK, 0, 0, 0, 1, 1, 2, 1])), Err(WireError::BadKey));
        let not_utf8 = [WRITE_BACK, 0, 0, 0, 1, 1, 0, 1, 0xff, 0, 0, 0, 0];
        assert_eq!(Frame::decode(Bytes::copy_from_slice(&not_utf8)), Err(WireError::BadKey));
        // A list longer than the bound is cut when encoded.
        let nf = NfLoadWire { kind: 1, q_e3: 2, c_e4: 3 };
        let long = Frame::Load { cpu_e4: 1, nfs: vec![nf; MAX_LOAD_NFS + 5] };
        assert_eq!(Frame::decode(long.encode().slice(4..)), Ok(Frame::Load { cpu_e4: 1, nfs: vec![nf; MAX_LOAD_NFS] }));
        for f in [
            Frame::Load { cpu_e4: 7, nfs: vec![nf, nf] },
            Frame::EnbUp { assoc: 1, peer: "::1".parse().unwrap(), outbound_streams: 1 },
            Frame::Hello { host: 1, local: false },
            Frame::Refused { why: Refusal::Gone },
            Frame::WriteBack { id: 7, writes: vec![("mme/id/00000007".into(), b"001010000000001".to_vec())] },
            Frame::Copied { owner: 2, writes: vec![("mme/id/00000007".into(), b"001010000000001".to_vec())] },
            Frame::ReplicateTo { targets: vec![(1, Groups::one(1)), (2, Groups::ALL)] },
            Frame::Inherit { host: 1, groups: Groups::ALL },
            Frame::Adopt { host: 1, groups: Groups::one(9) },
            Frame::Holding { id: 1, m_tmsi: None },
            Frame::Released { id: 1 },
            Frame::Handled { upto: 1 },
            Frame::Refresh { id: 1, resume: true },
            Frame::Away { id: 1 },
            Frame::AwayPlaced { m_tmsi: 1 },
            Frame::Lent { m_tmsi: 1 },
            Frame::Returned { m_tmsi: 1 },
        ] {
            let enc = f.encode();
            for n in 0..enc.len() - 4 {
                assert!(Frame::decode(enc.slice(4..4 + n)).is_err(), "{n}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 2048,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x6672_616d),
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Any body, a known type first or not: a frame or an error, never
        /// a panic; a frame decoded encodes to a body that decodes to it.
        #[test]
        fn any_body_decodes_to_a_frame_that_round_trips_or_an_error(
            kind in 0u8..26,
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96),
        ) {
            let mut body = vec![kind];
            body.extend_from_slice(&rest);
            if let Ok(f) = Frame::decode(Bytes::from(body)) {
                let enc = f.encode();
                proptest::prop_assert_eq!(Frame::decode(enc.slice(4..)), Ok(f));
            }
        }
    }

    #[tokio::test]
    async fn reading_bounds_the_length() {
        let mut too_long: &[u8] = &(MAX_FRAME as u32 + 1).to_be_bytes();
        assert!(matches!(read_frame(&mut too_long).await, Err(ReadError::Wire(WireError::TooLong(_)))));
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty).await.unwrap().is_none());
        let enc = Frame::EnbDown { assoc: 4 }.encode();
        let mut r: &[u8] = &enc;
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(Frame::EnbDown { assoc: 4 }));
    }
}
