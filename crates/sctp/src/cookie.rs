//! The State Cookie (RFC 9260 5.1.3): everything the responder needs to build
//! the association when the COOKIE ECHO comes back, so that an INIT costs no
//! state. It is authenticated with a keyed SipHash-2-4 MAC whose 128-bit key is
//! secret to the endpoint (the RFC asks for a MAC with a secret key; any PRF
//! serves, and SipHash is one designed for short inputs).

use std::hash::Hasher;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::wire::{be16, be32};

/// Bytes of an encoded cookie.
pub const COOKIE_LEN: usize = 4 * 5 + 2 * 2 + 8 + 16 + 2 + 4 * 2 + 2 + 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cookie {
    pub local_tag: u32,
    pub peer_tag: u32,
    pub local_initial_tsn: u32,
    pub peer_initial_tsn: u32,
    pub peer_a_rwnd: u32,
    pub outbound_streams: u16,
    pub inbound_streams: u16,
    /// Milliseconds since the endpoint's epoch.
    pub created_ms: u64,
    pub peer: SocketAddr,
    /// Tags of an association that existed when the INIT came (RFC 9260 5.2.2).
    pub tie_local_tag: u32,
    pub tie_peer_tag: u32,
    /// Our SCTP port the INIT was addressed to.
    pub local_port: u16,
}

/// The endpoint's secret key.
#[derive(Clone, Copy)]
pub struct CookieKey(pub u64, pub u64);

impl CookieKey {
    fn mac(&self, bytes: &[u8]) -> u64 {
        #[allow(deprecated)] // std's SipHasher is the keyed SipHash-2-4 we want.
        let mut h = std::hash::SipHasher::new_with_keys(self.0, self.1);
        h.write(bytes);
        h.finish()
    }
}

impl Cookie {
    pub fn encode(&self, key: &CookieKey) -> [u8; COOKIE_LEN] {
        let mut b = [0u8; COOKIE_LEN];
        let mut at = 0;
        let mut put = |v: &[u8]| {
            b[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        };
        put(&self.local_tag.to_be_bytes());
        put(&self.peer_tag.to_be_bytes());
        put(&self.local_initial_tsn.to_be_bytes());
        put(&self.peer_initial_tsn.to_be_bytes());
        put(&self.peer_a_rwnd.to_be_bytes());
        put(&self.outbound_streams.to_be_bytes());
        put(&self.inbound_streams.to_be_bytes());
        put(&self.created_ms.to_be_bytes());
        let ip = match self.peer.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        put(&ip.octets());
        put(&self.peer.port().to_be_bytes());
        put(&self.tie_local_tag.to_be_bytes());
        put(&self.tie_peer_tag.to_be_bytes());
        put(&self.local_port.to_be_bytes());
        let mac = key.mac(&b[..COOKIE_LEN - 8]);
        b[COOKIE_LEN - 8..].copy_from_slice(&mac.to_be_bytes());
        b
    }

    /// Decode and authenticate; `None` for a forged, altered or malformed cookie.
    pub fn decode(bytes: &[u8], key: &CookieKey) -> Option<Cookie> {
        if bytes.len() != COOKIE_LEN {
            return None;
        }
        let mac = u64::from_be_bytes(bytes[COOKIE_LEN - 8..].try_into().ok()?);
        if key.mac(&bytes[..COOKIE_LEN - 8]) != mac {
            return None;
        }
        let b = bytes;
        let ip6 = Ipv6Addr::from(<[u8; 16]>::try_from(&b[32..48]).ok()?);
        let ip = match ip6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(ip6),
        };
        Some(Cookie {
            local_tag: be32(b, 0),
            peer_tag: be32(b, 4),
            local_initial_tsn: be32(b, 8),
            peer_initial_tsn: be32(b, 12),
            peer_a_rwnd: be32(b, 16),
            outbound_streams: be16(b, 20),
            inbound_streams: be16(b, 22),
            created_ms: u64::from_be_bytes(b[24..32].try_into().ok()?),
            peer: SocketAddr::new(ip, be16(b, 48)),
            tie_local_tag: be32(b, 50),
            tie_peer_tag: be32(b, 54),
            local_port: be16(b, 58),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_forgery() {
        let key = CookieKey(1, 2);
        let c = Cookie {
            local_tag: 1,
            peer_tag: 2,
            local_initial_tsn: 3,
            peer_initial_tsn: 4,
            peer_a_rwnd: 5,
            outbound_streams: 6,
            inbound_streams: 7,
            created_ms: 8,
            peer: "127.0.0.1:36412".parse().unwrap(),
            tie_local_tag: 9,
            tie_peer_tag: 10,
            local_port: 11,
        };
        let mut b = c.encode(&key);
        assert_eq!(Cookie::decode(&b, &key), Some(c));
        assert_eq!(Cookie::decode(&b, &CookieKey(1, 3)), None);
        b[5] ^= 1;
        assert_eq!(Cookie::decode(&b, &key), None);
        assert_eq!(Cookie::decode(&b[1..], &key), None);
    }
}
