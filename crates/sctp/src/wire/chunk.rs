//! SCTP chunks (RFC 9260 3.2, 3.3): the chunk header view and a `Repr` for
//! every chunk type this endpoint sends or understands.

use super::{be16, be32, pad4, tlv::Tlvs, WireError};

mod field {
    use std::ops::Range;
    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const VALUE: usize = 4;
}

/// Chunk header length.
pub const CHUNK_HEADER_LEN: usize = field::VALUE;
/// DATA chunk header length including the chunk header (RFC 9260 3.3.1).
pub const DATA_HEADER_LEN: usize = 16;

/// Chunk types (RFC 9260 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkType(pub u8);

impl ChunkType {
    pub const DATA: ChunkType = ChunkType(0);
    pub const INIT: ChunkType = ChunkType(1);
    pub const INIT_ACK: ChunkType = ChunkType(2);
    pub const SACK: ChunkType = ChunkType(3);
    pub const HEARTBEAT: ChunkType = ChunkType(4);
    pub const HEARTBEAT_ACK: ChunkType = ChunkType(5);
    pub const ABORT: ChunkType = ChunkType(6);
    pub const SHUTDOWN: ChunkType = ChunkType(7);
    pub const SHUTDOWN_ACK: ChunkType = ChunkType(8);
    pub const ERROR: ChunkType = ChunkType(9);
    pub const COOKIE_ECHO: ChunkType = ChunkType(10);
    pub const COOKIE_ACK: ChunkType = ChunkType(11);
    pub const SHUTDOWN_COMPLETE: ChunkType = ChunkType(14);
}

/// A view of one chunk.
#[derive(Debug, Clone)]
pub struct Chunk<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Chunk<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Chunk { buffer }
    }
    /// A view whose length field is at least the header and fits the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < CHUNK_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = be16(b, field::LENGTH.start) as usize;
        if len < CHUNK_HEADER_LEN || len > b.len() {
            return Err(WireError::BadLength);
        }
        Ok(Chunk { buffer })
    }
    pub fn chunk_type(&self) -> ChunkType {
        ChunkType(self.buffer.as_ref()[field::TYPE])
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// The length field (header + value, without padding).
    pub fn len(&self) -> usize {
        be16(self.buffer.as_ref(), field::LENGTH.start) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len() == CHUNK_HEADER_LEN
    }
    pub fn padded_len(&self) -> usize {
        pad4(self.len())
    }
    pub fn value(&self) -> &[u8] {
        &self.buffer.as_ref()[field::VALUE..self.len()]
    }
    /// The whole chunk without padding (for Unrecognized Chunk Type reports).
    pub fn raw(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.len()]
    }
}

/// DATA (RFC 9260 3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    pub unordered: bool,
    pub begin: bool,
    pub end: bool,
    pub tsn: u32,
    pub stream_id: u16,
    pub ssn: u16,
    pub ppid: u32,
    pub data: &'a [u8],
}

/// INIT and INIT ACK (RFC 9260 3.3.2, 3.3.3); `params` is the raw TLV list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitRepr<'a> {
    pub initiate_tag: u32,
    pub a_rwnd: u32,
    pub outbound_streams: u16,
    pub inbound_streams: u16,
    pub initial_tsn: u32,
    pub params: &'a [u8],
}

/// SACK (RFC 9260 3.3.4). Gap blocks are offsets from the cumulative TSN ack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SackRepr {
    pub cum_tsn_ack: u32,
    pub a_rwnd: u32,
    pub gap_blocks: Vec<(u16, u16)>,
    pub dup_tsns: Vec<u32>,
}

/// One chunk as plain values. Byte fields borrow from the parsed packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkRepr<'a> {
    Data(DataRepr<'a>),
    Init(InitRepr<'a>),
    InitAck(InitRepr<'a>),
    Sack(SackRepr),
    /// Value is the Heartbeat Info parameter as TLV bytes (RFC 9260 3.3.5).
    Heartbeat {
        info: &'a [u8],
    },
    HeartbeatAck {
        info: &'a [u8],
    },
    /// `t`: the verification tag is reflected (RFC 9260 3.3.7). `causes` is a TLV list.
    Abort {
        t: bool,
        causes: &'a [u8],
    },
    Shutdown {
        cum_tsn_ack: u32,
    },
    ShutdownAck,
    Error {
        causes: &'a [u8],
    },
    CookieEcho {
        cookie: &'a [u8],
    },
    CookieAck,
    ShutdownComplete {
        t: bool,
    },
    /// A chunk type we do not implement (its handling follows the type's upper bits).
    Unknown {
        ty: u8,
        flags: u8,
        value: &'a [u8],
    },
}

impl<'a> ChunkRepr<'a> {
    /// Parse a checked chunk view.
    pub fn parse(c: &Chunk<&'a [u8]>) -> Result<ChunkRepr<'a>, WireError> {
        let v: &'a [u8] = &c.buffer[field::VALUE..c.len()];
        let flags = c.flags();
        let need = |n: usize, what| if v.len() < n { Err(WireError::Malformed(what)) } else { Ok(()) };
        Ok(match c.chunk_type() {
            ChunkType::DATA => {
                need(12, "DATA")?;
                if v.len() == 12 {
                    // RFC 9260 6.2: a DATA chunk without user data is an error the
                    // association answers with "No User Data"; we surface it as malformed.
                    return Err(WireError::Malformed("DATA without user data"));
                }
                ChunkRepr::Data(DataRepr {
                    unordered: flags & 0x04 != 0,
                    begin: flags & 0x02 != 0,
                    end: flags & 0x01 != 0,
                    tsn: be32(v, 0),
                    stream_id: be16(v, 4),
                    ssn: be16(v, 6),
                    ppid: be32(v, 8),
                    data: &v[12..],
                })
            }
            ChunkType::INIT | ChunkType::INIT_ACK => {
                need(16, "INIT")?;
                let params = &v[16..];
                Tlvs::validate(params).map_err(|_| WireError::Malformed("INIT parameters"))?;
                let r = InitRepr {
                    initiate_tag: be32(v, 0),
                    a_rwnd: be32(v, 4),
                    outbound_streams: be16(v, 8),
                    inbound_streams: be16(v, 10),
                    initial_tsn: be32(v, 12),
                    params,
                };
                if c.chunk_type() == ChunkType::INIT {
                    ChunkRepr::Init(r)
                } else {
                    ChunkRepr::InitAck(r)
                }
            }
            ChunkType::SACK => {
                need(12, "SACK")?;
                let n_gaps = be16(v, 8) as usize;
                let n_dups = be16(v, 10) as usize;
                if v.len() < 12 + 4 * n_gaps + 4 * n_dups {
                    return Err(WireError::Malformed("SACK"));
                }
                let gap_blocks = (0..n_gaps).map(|i| (be16(v, 12 + 4 * i), be16(v, 14 + 4 * i))).collect();
                let at = 12 + 4 * n_gaps;
                let dup_tsns = (0..n_dups).map(|i| be32(v, at + 4 * i)).collect();
                ChunkRepr::Sack(SackRepr { cum_tsn_ack: be32(v, 0), a_rwnd: be32(v, 4), gap_blocks, dup_tsns })
            }
            ChunkType::HEARTBEAT => ChunkRepr::Heartbeat { info: v },
            ChunkType::HEARTBEAT_ACK => ChunkRepr::HeartbeatAck { info: v },
            ChunkType::ABORT => ChunkRepr::Abort { t: flags & 1 != 0, causes: v },
            ChunkType::SHUTDOWN => {
                need(4, "SHUTDOWN")?;
                ChunkRepr::Shutdown { cum_tsn_ack: be32(v, 0) }
            }
            ChunkType::SHUTDOWN_ACK => ChunkRepr::ShutdownAck,
            ChunkType::ERROR => ChunkRepr::Error { causes: v },
            ChunkType::COOKIE_ECHO => ChunkRepr::CookieEcho { cookie: v },
            ChunkType::COOKIE_ACK => ChunkRepr::CookieAck,
            ChunkType::SHUTDOWN_COMPLETE => ChunkRepr::ShutdownComplete { t: flags & 1 != 0 },
            ChunkType(ty) => ChunkRepr::Unknown { ty, flags, value: v },
        })
    }

    fn header(&self) -> (u8, u8) {
        match self {
            ChunkRepr::Data(d) => (0, (d.unordered as u8) << 2 | (d.begin as u8) << 1 | d.end as u8),
            ChunkRepr::Init(_) => (1, 0),
            ChunkRepr::InitAck(_) => (2, 0),
            ChunkRepr::Sack(_) => (3, 0),
            ChunkRepr::Heartbeat { .. } => (4, 0),
            ChunkRepr::HeartbeatAck { .. } => (5, 0),
            ChunkRepr::Abort { t, .. } => (6, *t as u8),
            ChunkRepr::Shutdown { .. } => (7, 0),
            ChunkRepr::ShutdownAck => (8, 0),
            ChunkRepr::Error { .. } => (9, 0),
            ChunkRepr::CookieEcho { .. } => (10, 0),
            ChunkRepr::CookieAck => (11, 0),
            ChunkRepr::ShutdownComplete { t } => (14, *t as u8),
            ChunkRepr::Unknown { ty, flags, .. } => (*ty, *flags),
        }
    }

    /// Length of the value (without chunk header and padding). A chunk that
    /// ends in a TLV does not count that TLV's padding (RFC 9260 3.2.1: the
    /// padding of the last parameter is the padding of the chunk).
    fn value_len(&self) -> usize {
        match self {
            ChunkRepr::Data(d) => 12 + d.data.len(),
            ChunkRepr::Init(i) | ChunkRepr::InitAck(i) => 16 + tlv_list_len(i.params),
            ChunkRepr::Sack(s) => 12 + 4 * s.gap_blocks.len() + 4 * s.dup_tsns.len(),
            ChunkRepr::Heartbeat { info } | ChunkRepr::HeartbeatAck { info } => tlv_list_len(info),
            ChunkRepr::Abort { causes, .. } | ChunkRepr::Error { causes } => tlv_list_len(causes),
            ChunkRepr::Shutdown { .. } => 4,
            ChunkRepr::CookieEcho { cookie } => cookie.len(),
            ChunkRepr::ShutdownAck | ChunkRepr::CookieAck | ChunkRepr::ShutdownComplete { .. } => 0,
            ChunkRepr::Unknown { value, .. } => value.len(),
        }
    }

    /// Bytes on the wire, padding included.
    pub fn buffer_len(&self) -> usize {
        pad4(CHUNK_HEADER_LEN + self.value_len())
    }

    /// Write the chunk and its padding into `buf[..buffer_len()]`; returns that length.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let (ty, flags) = self.header();
        let len = CHUNK_HEADER_LEN + self.value_len();
        let padded = pad4(len);
        let buf = &mut buf[..padded];
        buf[0] = ty;
        buf[1] = flags;
        buf[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        let v = &mut buf[4..];
        match self {
            ChunkRepr::Data(d) => {
                v[0..4].copy_from_slice(&d.tsn.to_be_bytes());
                v[4..6].copy_from_slice(&d.stream_id.to_be_bytes());
                v[6..8].copy_from_slice(&d.ssn.to_be_bytes());
                v[8..12].copy_from_slice(&d.ppid.to_be_bytes());
                v[12..12 + d.data.len()].copy_from_slice(d.data);
            }
            ChunkRepr::Init(i) | ChunkRepr::InitAck(i) => {
                v[0..4].copy_from_slice(&i.initiate_tag.to_be_bytes());
                v[4..8].copy_from_slice(&i.a_rwnd.to_be_bytes());
                v[8..10].copy_from_slice(&i.outbound_streams.to_be_bytes());
                v[10..12].copy_from_slice(&i.inbound_streams.to_be_bytes());
                v[12..16].copy_from_slice(&i.initial_tsn.to_be_bytes());
                let n = tlv_list_len(i.params);
                v[16..16 + n].copy_from_slice(&i.params[..n]);
            }
            ChunkRepr::Sack(s) => {
                v[0..4].copy_from_slice(&s.cum_tsn_ack.to_be_bytes());
                v[4..8].copy_from_slice(&s.a_rwnd.to_be_bytes());
                v[8..10].copy_from_slice(&(s.gap_blocks.len() as u16).to_be_bytes());
                v[10..12].copy_from_slice(&(s.dup_tsns.len() as u16).to_be_bytes());
                let mut at = 12;
                for (start, end) in &s.gap_blocks {
                    v[at..at + 2].copy_from_slice(&start.to_be_bytes());
                    v[at + 2..at + 4].copy_from_slice(&end.to_be_bytes());
                    at += 4;
                }
                for d in &s.dup_tsns {
                    v[at..at + 4].copy_from_slice(&d.to_be_bytes());
                    at += 4;
                }
            }
            ChunkRepr::Shutdown { cum_tsn_ack } => v[0..4].copy_from_slice(&cum_tsn_ack.to_be_bytes()),
            ChunkRepr::Heartbeat { info: b }
            | ChunkRepr::HeartbeatAck { info: b }
            | ChunkRepr::Abort { causes: b, .. }
            | ChunkRepr::Error { causes: b } => {
                let n = tlv_list_len(b);
                v[..n].copy_from_slice(&b[..n]);
            }
            ChunkRepr::CookieEcho { cookie: b } | ChunkRepr::Unknown { value: b, .. } => {
                v[..b.len()].copy_from_slice(b)
            }
            ChunkRepr::ShutdownAck | ChunkRepr::CookieAck | ChunkRepr::ShutdownComplete { .. } => {}
        }
        buf[len..padded].fill(0);
        padded
    }
}

/// Length of a TLV list without the padding of its last element; the whole
/// length if the list is not well formed.
fn tlv_list_len(b: &[u8]) -> usize {
    let mut at = 0;
    let mut end = b.len();
    while at + 4 <= b.len() {
        let len = be16(b, at + 2) as usize;
        if len < 4 || at + len > b.len() {
            return b.len();
        }
        end = at + len;
        at += pad4(len);
    }
    if at < b.len() {
        return b.len();
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(r: ChunkRepr<'_>) -> Vec<u8> {
        let mut buf = vec![0xffu8; r.buffer_len()];
        assert_eq!(r.emit(&mut buf), buf.len());
        let c = Chunk::new_checked(&buf[..]).unwrap();
        assert_eq!(ChunkRepr::parse(&c).unwrap(), r);
        buf
    }

    #[test]
    fn data_bytes() {
        let d = DataRepr {
            unordered: false,
            begin: true,
            end: true,
            tsn: 0x0102_0304,
            stream_id: 1,
            ssn: 2,
            ppid: 18,
            data: &[0xaa, 0xbb, 0xcc],
        };
        let b = round_trip(ChunkRepr::Data(d));
        assert_eq!(b, [0, 3, 0, 19, 1, 2, 3, 4, 0, 1, 0, 2, 0, 0, 0, 18, 0xaa, 0xbb, 0xcc, 0]);
    }

    #[test]
    fn control_chunks_round_trip() {
        round_trip(ChunkRepr::Init(InitRepr {
            initiate_tag: 7,
            a_rwnd: 65536,
            outbound_streams: 16,
            inbound_streams: 16,
            initial_tsn: 99,
            params: &[0, 12, 0, 6, 0, 5],
        }));
        round_trip(ChunkRepr::InitAck(InitRepr {
            initiate_tag: 8,
            a_rwnd: 1,
            outbound_streams: 2,
            inbound_streams: 3,
            initial_tsn: 4,
            params: &[0, 7, 0, 5, 9],
        }));
        round_trip(ChunkRepr::Sack(SackRepr {
            cum_tsn_ack: 5,
            a_rwnd: 6,
            gap_blocks: vec![(2, 3), (5, 5)],
            dup_tsns: vec![4],
        }));
        round_trip(ChunkRepr::Heartbeat { info: &[0, 1, 0, 8, 1, 2, 3, 4] });
        round_trip(ChunkRepr::HeartbeatAck { info: &[0, 1, 0, 8, 1, 2, 3, 4] });
        round_trip(ChunkRepr::Abort { t: true, causes: &[0, 12, 0, 4] });
        round_trip(ChunkRepr::Shutdown { cum_tsn_ack: 77 });
        round_trip(ChunkRepr::ShutdownAck);
        round_trip(ChunkRepr::Error { causes: &[0, 1, 0, 8, 0, 9, 0, 0] });
        round_trip(ChunkRepr::CookieEcho { cookie: &[1, 2, 3, 4, 5] });
        round_trip(ChunkRepr::CookieAck);
        let b = round_trip(ChunkRepr::ShutdownComplete { t: true });
        assert_eq!(b, [14, 1, 0, 4]);
        round_trip(ChunkRepr::Unknown { ty: 0xc1, flags: 3, value: &[1] });
    }

    #[test]
    fn last_parameter_padding_is_the_chunk_padding() {
        let r = ChunkRepr::Init(InitRepr {
            initiate_tag: 1,
            a_rwnd: 2,
            outbound_streams: 3,
            inbound_streams: 4,
            initial_tsn: 5,
            params: &[0, 12, 0, 6, 0, 5, 0, 0],
        });
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(buf.len(), 28);
        assert_eq!(&buf[2..4], &[0, 26], "chunk length excludes the last parameter's padding");
    }

    #[test]
    fn malformed_chunks_are_errors() {
        // DATA without payload.
        let b = [0u8, 3, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 18];
        assert!(ChunkRepr::parse(&Chunk::new_checked(&b[..]).unwrap()).is_err());
        // SACK claiming more gap blocks than present.
        let b = [3u8, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0];
        assert!(ChunkRepr::parse(&Chunk::new_checked(&b[..]).unwrap()).is_err());
        // Length field beyond the buffer.
        assert!(Chunk::new_checked(&[0u8, 0, 0, 40, 0][..]).is_err());
    }
}
