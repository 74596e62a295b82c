//! GTPv2-C information elements (TS 29.274 8.1, 8.2): the TLV wire view
//! and a `Repr` for every IE type the S11 messages use.

use super::{Error, Result};
use mobicore_common::{tbcd_decode, tbcd_encode, Ambr, Arp, Ebi, Ecgi, Imsi, PdnType, Plmn, Tai};
use std::net::{Ipv4Addr, Ipv6Addr};

/// IE type values (TS 29.274 Table 8.1-1).
pub mod ie_type {
    pub const IMSI: u8 = 1;
    pub const CAUSE: u8 = 2;
    pub const RECOVERY: u8 = 3;
    pub const APN: u8 = 71;
    pub const AMBR: u8 = 72;
    pub const EBI: u8 = 73;
    pub const MEI: u8 = 75;
    pub const MSISDN: u8 = 76;
    pub const INDICATION: u8 = 77;
    /// Protocol Configuration Options (TS 29.274 8.13).
    pub const PCO: u8 = 78;
    pub const PAA: u8 = 79;
    pub const BEARER_QOS: u8 = 80;
    pub const RAT_TYPE: u8 = 82;
    pub const SERVING_NETWORK: u8 = 83;
    pub const ULI: u8 = 86;
    pub const FTEID: u8 = 87;
    /// Delay Value (TS 29.274 8.27): the Data Notification Delay.
    pub const DELAY_VALUE: u8 = 92;
    pub const BEARER_CONTEXT: u8 = 93;
    pub const CHARGING_ID: u8 = 94;
    pub const CHARGING_CHARACTERISTICS: u8 = 95;
    pub const PDN_TYPE: u8 = 99;
    pub const UE_TIME_ZONE: u8 = 114;
    pub const APN_RESTRICTION: u8 = 127;
    pub const SELECTION_MODE: u8 = 128;
    /// Throttling (TS 29.274 8.85): DL low priority traffic Throttling.
    pub const THROTTLING: u8 = 154;
    /// Allocation/Retention Priority (TS 29.274 8.86).
    pub const ARP: u8 = 155;
    /// EPC Timer (TS 29.274 8.87): the DL Buffering Duration.
    pub const EPC_TIMER: u8 = 156;
    pub const SIGNALLING_PRIORITY_INDICATION: u8 = 157;
    /// Integer Number (TS 29.274 8.115): the DL Buffering Suggested Packet Count.
    pub const INTEGER_NUMBER: u8 = 187;
    /// Extended Protocol Configuration Options (TS 29.274 8.128).
    pub const EPCO: u8 = 197;
}

/// Indication flags (TS 29.274 8.12), octet 5: DAF "Dual Address Bearer
/// Flag", set when the PDN type is IPv4v6 and dual address bearers are
/// allowed.
pub const INDICATION_DAF: u8 = 0x80;

/// One IE as found on the wire: type, instance and value octets (TS 29.274 8.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawIe<'a> {
    pub ie_type: u8,
    pub instance: u8,
    pub value: &'a [u8],
}

/// Iterates the IEs of a message body or a grouped IE.
pub struct IeIter<'a> {
    rest: &'a [u8],
}

impl<'a> IeIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        IeIter { rest: buf }
    }
}

impl<'a> Iterator for IeIter<'a> {
    type Item = Result<RawIe<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < 4 {
            self.rest = &[];
            return Some(Err(Error::Truncated));
        }
        let len = u16::from_be_bytes([self.rest[1], self.rest[2]]) as usize;
        if self.rest.len() < 4 + len {
            // TS 29.274 7.7.7: an IE running past the message (or its
            // grouped IE) has an invalid length.
            let (ie_type, instance) = (self.rest[0], self.rest[3] & 0x0f);
            self.rest = &[];
            return Some(Err(Error::IeLength { ie_type, instance }));
        }
        let ie = RawIe { ie_type: self.rest[0], instance: self.rest[3] & 0x0f, value: &self.rest[4..4 + len] };
        self.rest = &self.rest[4 + len..];
        Some(Ok(ie))
    }
}

/// Appends one IE: header, then whatever `value` writes; fixes the length.
pub fn put_ie(buf: &mut Vec<u8>, ie_type: u8, instance: u8, value: impl FnOnce(&mut Vec<u8>)) {
    let start = buf.len();
    buf.extend_from_slice(&[ie_type, 0, 0, instance & 0x0f]);
    value(buf);
    let len = (buf.len() - start - 4) as u16;
    buf[start + 1..start + 3].copy_from_slice(&len.to_be_bytes());
}

fn need(v: &[u8], n: usize) -> Result<()> {
    if v.len() < n {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

/// IMSI (TS 29.274 8.3), TBCD digits.
pub fn parse_imsi(v: &[u8]) -> Result<Imsi> {
    Imsi::from_tbcd(v).map_err(|_| Error::Value("IMSI"))
}

/// Digit strings in TBCD: MSISDN (8.11) and MEI (8.10).
pub fn parse_tbcd_digits(v: &[u8]) -> Result<String> {
    if v.is_empty() {
        return Err(Error::Truncated);
    }
    tbcd_decode(v).ok_or(Error::Value("TBCD digits"))
}
pub fn emit_tbcd_digits(digits: &str, buf: &mut Vec<u8>) {
    buf.extend(tbcd_encode(digits));
}

/// Cause (TS 29.274 8.4) with its optional offending IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CauseIe {
    pub value: u8,
    /// PCE, BCE, CS flags (octet 6, bits 3..1).
    pub flags: u8,
    /// Offending IE type and instance (TS 29.274 8.4, octets 7-10).
    pub offending: Option<(u8, u8)>,
}

impl CauseIe {
    pub fn new(value: u8) -> Self {
        CauseIe { value, flags: 0, offending: None }
    }
    pub fn parse(v: &[u8]) -> Result<Self> {
        need(v, 2)?;
        let offending = if v.len() >= 6 { Some((v[2], v[5] & 0x0f)) } else { None };
        Ok(CauseIe { value: v[0], flags: v[1] & 0x07, offending })
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&[self.value, self.flags & 0x07]);
        if let Some((t, i)) = self.offending {
            buf.extend_from_slice(&[t, 0, 0, i & 0x0f]);
        }
    }
}

/// APN (TS 29.274 8.6, TS 23.003 9.1): DNS labels.
pub fn parse_apn(v: &[u8]) -> Result<String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some((&l, tail)) = rest.split_first() {
        let l = l as usize;
        if l == 0 || tail.len() < l {
            return Err(Error::Value("APN label"));
        }
        let label = std::str::from_utf8(&tail[..l]).map_err(|_| Error::Value("APN label"))?;
        if label.contains('.') {
            return Err(Error::Value("APN label"));
        }
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(label);
        rest = &tail[l..];
    }
    Ok(out)
}
pub fn emit_apn(apn: &str, buf: &mut Vec<u8>) {
    for label in apn.split('.').filter(|l| !l.is_empty()) {
        let l = &label.as_bytes()[..label.len().min(63)];
        buf.push(l.len() as u8);
        buf.extend_from_slice(l);
    }
}

/// AMBR (TS 29.274 8.7): uplink then downlink, kbit/s on the wire.
pub fn parse_ambr(v: &[u8]) -> Result<Ambr> {
    need(v, 8)?;
    let ul = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) as u64;
    let dl = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) as u64;
    Ok(Ambr { uplink: ul * 1000, downlink: dl * 1000 })
}
pub fn emit_ambr(a: &Ambr, buf: &mut Vec<u8>) {
    let kbps = |b: u64| (b / 1000).min(u32::MAX as u64) as u32;
    buf.extend_from_slice(&kbps(a.uplink).to_be_bytes());
    buf.extend_from_slice(&kbps(a.downlink).to_be_bytes());
}

/// EBI (TS 29.274 8.8).
pub fn parse_ebi(v: &[u8]) -> Result<Ebi> {
    need(v, 1)?;
    Ok(Ebi(v[0] & 0x0f))
}

/// One-octet IEs: Recovery (8.5), RAT Type (8.17), APN Restriction (8.57).
pub fn parse_u8(v: &[u8]) -> Result<u8> {
    need(v, 1)?;
    Ok(v[0])
}

/// Opaque value octets (PCO 8.13, ePCO 8.128: the TS 24.008 / TS 24.301
/// contents are read by whoever uses them); at least one octet.
pub fn parse_octets(v: &[u8]) -> Result<Vec<u8>> {
    need(v, 1)?;
    Ok(v.to_vec())
}

/// Charging ID (TS 29.274 8.29).
pub fn parse_u32(v: &[u8]) -> Result<u32> {
    need(v, 4)?;
    Ok(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

/// PDN Type (TS 29.274 8.34) and the PDN type field of the PAA.
pub fn pdn_type_from(v: u8) -> Result<PdnType> {
    match v & 0x07 {
        1 => Ok(PdnType::Ipv4),
        2 => Ok(PdnType::Ipv6),
        3 => Ok(PdnType::Ipv4v6),
        _ => Err(Error::Value("PDN type")),
    }
}
pub fn pdn_type_value(t: PdnType) -> u8 {
    match t {
        PdnType::Ipv4 => 1,
        PdnType::Ipv6 => 2,
        PdnType::Ipv4v6 => 3,
    }
}

/// PDN Address Allocation (TS 29.274 8.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paa {
    pub pdn_type: PdnType,
    pub ipv4: Option<Ipv4Addr>,
    /// Prefix length and IPv6 prefix.
    pub ipv6: Option<(u8, Ipv6Addr)>,
}

impl Paa {
    pub fn ipv4(a: Ipv4Addr) -> Self {
        Paa { pdn_type: PdnType::Ipv4, ipv4: Some(a), ipv6: None }
    }
    pub fn parse(v: &[u8]) -> Result<Self> {
        need(v, 1)?;
        let pdn_type = pdn_type_from(v[0])?;
        let v6 = |o: &[u8]| -> Result<(u8, Ipv6Addr)> {
            need(o, 17)?;
            let mut a = [0u8; 16];
            a.copy_from_slice(&o[1..17]);
            Ok((o[0], Ipv6Addr::from(a)))
        };
        let v4 = |o: &[u8]| -> Result<Ipv4Addr> {
            need(o, 4)?;
            Ok(Ipv4Addr::new(o[0], o[1], o[2], o[3]))
        };
        let b = &v[1..];
        Ok(match pdn_type {
            PdnType::Ipv4 => Paa { pdn_type, ipv4: Some(v4(b)?), ipv6: None },
            PdnType::Ipv6 => Paa { pdn_type, ipv4: None, ipv6: Some(v6(b)?) },
            PdnType::Ipv4v6 => Paa { pdn_type, ipv6: Some(v6(b)?), ipv4: Some(v4(&b[17..])?) },
        })
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.push(pdn_type_value(self.pdn_type));
        if matches!(self.pdn_type, PdnType::Ipv6 | PdnType::Ipv4v6) {
            let (l, a) = self.ipv6.unwrap_or((64, Ipv6Addr::UNSPECIFIED));
            buf.push(l);
            buf.extend_from_slice(&a.octets());
        }
        if matches!(self.pdn_type, PdnType::Ipv4 | PdnType::Ipv4v6) {
            buf.extend_from_slice(&self.ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
        }
    }
}

/// Bearer Level QoS (TS 29.274 8.15); bit rates in kbit/s as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BearerQos {
    pub arp: Arp,
    pub qci: u8,
    pub mbr_ul: u64,
    pub mbr_dl: u64,
    pub gbr_ul: u64,
    pub gbr_dl: u64,
}

impl BearerQos {
    pub fn new(qci: u8, arp: Arp) -> Self {
        BearerQos { arp, qci, mbr_ul: 0, mbr_dl: 0, gbr_ul: 0, gbr_dl: 0 }
    }
    pub fn parse(v: &[u8]) -> Result<Self> {
        need(v, 22)?;
        // PCI / PVI bit set means "disabled" (TS 29.274 8.15, TS 29.212 5.3.46/47).
        let arp = Arp {
            priority_level: (v[0] >> 2) & 0x0f,
            pre_emption_capability: v[0] & 0x40 == 0,
            pre_emption_vulnerability: v[0] & 0x01 == 0,
        };
        let rate = |o: &[u8]| o.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64);
        Ok(BearerQos {
            arp,
            qci: v[1],
            mbr_ul: rate(&v[2..7]),
            mbr_dl: rate(&v[7..12]),
            gbr_ul: rate(&v[12..17]),
            gbr_dl: rate(&v[17..22]),
        })
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let a = &self.arp;
        let o = (if a.pre_emption_capability { 0 } else { 0x40 })
            | ((a.priority_level & 0x0f) << 2)
            | (if a.pre_emption_vulnerability { 0 } else { 0x01 });
        buf.push(o);
        buf.push(self.qci);
        for r in [self.mbr_ul, self.mbr_dl, self.gbr_ul, self.gbr_dl] {
            buf.extend_from_slice(&r.min(0xff_ffff_ffff).to_be_bytes()[3..8]);
        }
    }
}

/// Serving Network (TS 29.274 8.18).
pub fn parse_plmn(v: &[u8]) -> Result<Plmn> {
    Plmn::from_octets(v).map_err(|_| Error::Value("PLMN"))
}

/// User Location Information (TS 29.274 8.21): we keep TAI and ECGI and skip
/// the other location kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uli {
    pub tai: Option<Tai>,
    pub ecgi: Option<Ecgi>,
}

impl Uli {
    pub fn parse(v: &[u8]) -> Result<Self> {
        need(v, 1)?;
        let flags = v[0];
        let mut o = 1;
        let mut uli = Uli { tai: None, ecgi: None };
        // Field order and sizes: CGI 7, SAI 7, RAI 7, TAI 5, ECGI 7, LAI 5,
        // Macro eNB ID 6, Extended Macro eNB ID 6 (flag bits 1..8).
        for (bit, size) in [(0x01, 7), (0x02, 7), (0x04, 7), (0x08, 5), (0x10, 7), (0x20, 5), (0x40, 6), (0x80, 6)] {
            if flags & bit == 0 {
                continue;
            }
            need(v, o + size)?;
            let f = &v[o..o + size];
            if bit == 0x08 {
                uli.tai = Some(Tai { plmn: parse_plmn(f)?, tac: u16::from_be_bytes([f[3], f[4]]) });
            } else if bit == 0x10 {
                let eci = u32::from_be_bytes([f[3], f[4], f[5], f[6]]) & 0x0fff_ffff;
                uli.ecgi = Some(Ecgi { plmn: parse_plmn(f)?, eci });
            }
            o += size;
        }
        Ok(uli)
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let flags = if self.tai.is_some() { 0x08 } else { 0 } | if self.ecgi.is_some() { 0x10 } else { 0 };
        buf.push(flags);
        if let Some(t) = self.tai {
            buf.extend_from_slice(&t.plmn.to_octets());
            buf.extend_from_slice(&t.tac.to_be_bytes());
        }
        if let Some(e) = self.ecgi {
            buf.extend_from_slice(&e.plmn.to_octets());
            buf.extend_from_slice(&(e.eci & 0x0fff_ffff).to_be_bytes());
        }
    }
}

/// F-TEID interface types (TS 29.274 8.22).
pub mod interface_type {
    pub const S1U_ENB_GTPU: u8 = 0;
    pub const S1U_SGW_GTPU: u8 = 1;
    pub const S5S8_PGW_GTPC: u8 = 7;
    pub const S11_MME_GTPC: u8 = 10;
    pub const S11S4_SGW_GTPC: u8 = 11;
    /// eNodeB GTP-U interface for DL data forwarding.
    pub const ENB_GTPU_DL_FORWARDING: u8 = 19;
    /// SGW/UPF GTP-U interface for DL data forwarding.
    pub const SGW_GTPU_DL_FORWARDING: u8 = 23;
}

/// Fully Qualified TEID (TS 29.274 8.22).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FteidIe {
    pub interface_type: u8,
    pub teid: u32,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

impl FteidIe {
    pub fn v4(interface_type: u8, teid: u32, ipv4: Ipv4Addr) -> Self {
        FteidIe { interface_type, teid, ipv4: Some(ipv4), ipv6: None }
    }
    pub fn parse(v: &[u8]) -> Result<Self> {
        need(v, 5)?;
        let (has4, has6) = (v[0] & 0x80 != 0, v[0] & 0x40 != 0);
        let mut o = 5;
        let ipv4 = if has4 {
            need(v, o + 4)?;
            o += 4;
            Some(Ipv4Addr::new(v[o - 4], v[o - 3], v[o - 2], v[o - 1]))
        } else {
            None
        };
        let ipv6 = if has6 {
            need(v, o + 16)?;
            let mut a = [0u8; 16];
            a.copy_from_slice(&v[o..o + 16]);
            Some(Ipv6Addr::from(a))
        } else {
            None
        };
        Ok(FteidIe { interface_type: v[0] & 0x3f, teid: u32::from_be_bytes([v[1], v[2], v[3], v[4]]), ipv4, ipv6 })
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let f = (if self.ipv4.is_some() { 0x80 } else { 0 })
            | (if self.ipv6.is_some() { 0x40 } else { 0 })
            | (self.interface_type & 0x3f);
        buf.push(f);
        buf.extend_from_slice(&self.teid.to_be_bytes());
        if let Some(a) = self.ipv4 {
            buf.extend_from_slice(&a.octets());
        }
        if let Some(a) = self.ipv6 {
            buf.extend_from_slice(&a.octets());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apn_dns_labels() {
        let mut b = vec![];
        emit_apn("internet.mnc001.mcc001.gprs", &mut b);
        assert_eq!(&b[..9], b"\x08internet");
        assert_eq!(parse_apn(&b).unwrap(), "internet.mnc001.mcc001.gprs");
        assert!(parse_apn(&[5, b'a']).is_err());
        assert!(parse_apn(&[0]).is_err());
    }

    #[test]
    fn fteid_bytes() {
        let f = FteidIe::v4(interface_type::S11_MME_GTPC, 0x11223344, Ipv4Addr::new(127, 0, 0, 1));
        let mut b = vec![];
        f.emit(&mut b);
        assert_eq!(b, [0x8a, 0x11, 0x22, 0x33, 0x44, 127, 0, 0, 1]);
        assert_eq!(FteidIe::parse(&b).unwrap(), f);
        assert_eq!(FteidIe::parse(&b[..7]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn bearer_qos_bytes() {
        let q = BearerQos::new(
            9,
            Arp { priority_level: 8, pre_emption_capability: false, pre_emption_vulnerability: true },
        );
        let mut b = vec![];
        q.emit(&mut b);
        assert_eq!(b.len(), 22);
        assert_eq!(&b[..2], &[0x40 | (8 << 2), 9]);
        assert_eq!(BearerQos::parse(&b).unwrap(), q);
    }

    #[test]
    fn cause_with_offending_ie() {
        let c = CauseIe { value: 70, flags: 0, offending: Some((ie_type::FTEID, 0)) };
        let mut b = vec![];
        c.emit(&mut b);
        assert_eq!(b, [70, 0, 87, 0, 0, 0]);
        assert_eq!(CauseIe::parse(&b).unwrap(), c);
    }

    #[test]
    fn ie_iter_truncated() {
        let mut it = IeIter::new(&[1, 0, 5, 0, 1]);
        assert_eq!(it.next(), Some(Err(Error::IeLength { ie_type: 1, instance: 0 })));
        assert_eq!(it.next(), None);
        assert_eq!(IeIter::new(&[1, 0]).next(), Some(Err(Error::Truncated)));
    }
}
