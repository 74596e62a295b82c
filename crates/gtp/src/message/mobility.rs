//! Downlink Data Notification (TS 29.274 7.2.11.1), its Acknowledge
//! (7.2.11.2) and Failure Indication (7.2.11.3); Create Indirect Data
//! Forwarding Tunnel (7.2.18/7.2.19) and Delete Indirect Data Forwarding
//! Tunnel (7.2.27/7.2.28).

use super::{Fields, MessageError};
use crate::wire::ie::*;
use mobicore_common::{Arp, Ebi};

/// Allocation/Retention Priority (TS 29.274 8.86): PCI, PL, PVI as in the
/// first octet of Bearer QoS (a set PCI / PVI bit means "disabled").
pub fn parse_arp(v: &[u8]) -> Result<Arp, crate::wire::Error> {
    let o = *v.first().ok_or(crate::wire::Error::Truncated)?;
    Ok(Arp {
        priority_level: (o >> 2) & 0x0f,
        pre_emption_capability: o & 0x40 == 0,
        pre_emption_vulnerability: o & 0x01 == 0,
    })
}
pub fn emit_arp(a: &Arp, buf: &mut Vec<u8>) {
    buf.push(
        (if a.pre_emption_capability { 0 } else { 0x40 })
            | ((a.priority_level & 0x0f) << 2)
            | (if a.pre_emption_vulnerability { 0 } else { 0x01 }),
    );
}

/// Integer Number (TS 29.274 8.115): a big-endian unsigned integer of 1 to
/// 4 octets (DL Buffering Suggested Packet Count uses 1 or 2).
pub fn parse_integer_number(v: &[u8]) -> Result<u32, crate::wire::Error> {
    if v.is_empty() || v.len() > 4 {
        return Err(crate::wire::Error::Value("Integer Number"));
    }
    Ok(v.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)))
}

/// Bearer Context of a Create Indirect Data Forwarding Tunnel Request
/// (Table 7.2.18-2) or Response (Table 7.2.19-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardingBearerContext {
    pub ebi: Ebi,
    /// Mandatory in the response, absent in the request.
    pub cause: Option<CauseIe>,
    /// eNodeB F-TEID for DL data forwarding (request, instance 0,
    /// interface type 19).
    pub enb_dl_fteid: Option<FteidIe>,
    /// S-GW F-TEID for DL data forwarding (instance 1, interface type 23):
    /// in the response the S-GW's tunnel the source eNB forwards to.
    pub sgw_dl_fteid: Option<FteidIe>,
}

impl ForwardingBearerContext {
    fn parse(v: &[u8]) -> Result<Self, MessageError> {
        let f = Fields::new(v)?;
        Ok(ForwardingBearerContext {
            ebi: f.mandatory(ie_type::EBI, 0, parse_ebi)?,
            cause: f.optional(ie_type::CAUSE, 0, CauseIe::parse),
            enb_dl_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
            sgw_dl_fteid: f.optional(ie_type::FTEID, 1, FteidIe::parse),
        })
    }
    fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::EBI, 0, |b| b.push(self.ebi.0 & 0x0f));
        if let Some(c) = &self.cause {
            put_ie(buf, ie_type::CAUSE, 0, |b| c.emit(b));
        }
        if let Some(ft) = &self.enb_dl_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
        if let Some(ft) = &self.sgw_dl_fteid {
            put_ie(buf, ie_type::FTEID, 1, |b| ft.emit(b));
        }
    }
}

/// Create Indirect Data Forwarding Tunnel Request (TS 29.274 7.2.18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateIndirectDataForwardingTunnelRequest {
    /// Sender F-TEID for Control Plane (conditional).
    pub sender_fteid: Option<FteidIe>,
    /// At least one (mandatory).
    pub bearer_contexts: Vec<ForwardingBearerContext>,
    pub recovery: Option<u8>,
}

impl CreateIndirectDataForwardingTunnelRequest {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        let bearer_contexts = f.all(ie_type::BEARER_CONTEXT, 0, ForwardingBearerContext::parse)?;
        if bearer_contexts.is_empty() {
            return Err(MessageError::MissingIe { ie_type: ie_type::BEARER_CONTEXT, instance: 0 });
        }
        Ok(CreateIndirectDataForwardingTunnelRequest {
            sender_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
            bearer_contexts,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        if let Some(ft) = &self.sender_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
        for bc in &self.bearer_contexts {
            put_ie(buf, ie_type::BEARER_CONTEXT, 0, |b| bc.emit(b));
        }
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
    }
}

/// Create Indirect Data Forwarding Tunnel Response (TS 29.274 7.2.19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateIndirectDataForwardingTunnelResponse {
    pub cause: CauseIe,
    pub sender_fteid: Option<FteidIe>,
    pub bearer_contexts: Vec<ForwardingBearerContext>,
    pub recovery: Option<u8>,
}

impl CreateIndirectDataForwardingTunnelResponse {
    pub fn rejected(cause: CauseIe) -> Self {
        CreateIndirectDataForwardingTunnelResponse {
            cause,
            sender_fteid: None,
            bearer_contexts: vec![],
            recovery: None,
        }
    }
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(CreateIndirectDataForwardingTunnelResponse {
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            sender_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
            bearer_contexts: f.all(ie_type::BEARER_CONTEXT, 0, ForwardingBearerContext::parse)?,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(ft) = &self.sender_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
        for bc in &self.bearer_contexts {
            put_ie(buf, ie_type::BEARER_CONTEXT, 0, |b| bc.emit(b));
        }
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
    }
}

/// Downlink Data Notification (TS 29.274 7.2.11.1); every IE conditional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DownlinkDataNotification {
    pub cause: Option<CauseIe>,
    /// The bearer the downlink data arrived on.
    pub ebi: Option<Ebi>,
    /// ARP of that bearer.
    pub arp: Option<Arp>,
    /// Sender F-TEID for Control Plane: the S-GW's S11 F-TEID of the UE
    /// (the MME answers to its TEID).
    pub sender_fteid: Option<FteidIe>,
}

impl DownlinkDataNotification {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(DownlinkDataNotification {
            cause: f.optional(ie_type::CAUSE, 0, CauseIe::parse),
            ebi: f.optional(ie_type::EBI, 0, parse_ebi),
            arp: f.optional(ie_type::ARP, 0, parse_arp),
            sender_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        if let Some(c) = &self.cause {
            put_ie(buf, ie_type::CAUSE, 0, |b| c.emit(b));
        }
        if let Some(e) = self.ebi {
            put_ie(buf, ie_type::EBI, 0, |b| b.push(e.0 & 0x0f));
        }
        if let Some(a) = &self.arp {
            put_ie(buf, ie_type::ARP, 0, |b| emit_arp(a, b));
        }
        if let Some(ft) = &self.sender_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
    }
}

/// Downlink Data Notification Acknowledge (TS 29.274 7.2.11.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownlinkDataNotificationAck {
    pub cause: CauseIe,
    /// Data Notification Delay: a Delay Value (8.27), units of 50 ms.
    pub delay: Option<u8>,
    pub recovery: Option<u8>,
    /// DL Buffering Duration: an EPC Timer (8.87), the octet as sent.
    pub dl_buffering_duration: Option<u8>,
    /// DL Buffering Suggested Packet Count: an Integer Number (8.115).
    pub dl_buffering_suggested_packets: Option<u16>,
    /// DL low priority traffic Throttling (8.85).
    pub throttling: Option<ThrottlingIe>,
}

impl DownlinkDataNotificationAck {
    pub fn rejected(cause: CauseIe) -> Self {
        DownlinkDataNotificationAck {
            cause,
            delay: None,
            recovery: None,
            dl_buffering_duration: None,
            dl_buffering_suggested_packets: None,
            throttling: None,
        }
    }
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(DownlinkDataNotificationAck {
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            delay: f.optional(ie_type::DELAY_VALUE, 0, parse_u8),
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
            dl_buffering_duration: f.optional(ie_type::EPC_TIMER, 0, parse_u8),
            dl_buffering_suggested_packets: f
                .optional(ie_type::INTEGER_NUMBER, 0, parse_integer_number)
                .map(|n| n.min(u32::from(u16::MAX)) as u16),
            throttling: f.optional(ie_type::THROTTLING, 0, ThrottlingIe::parse),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(d) = self.delay {
            put_ie(buf, ie_type::DELAY_VALUE, 0, |b| b.push(d));
        }
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
        // Table 7.2.11.2-1 order: the Throttling IE follows Recovery.
        if let Some(t) = &self.throttling {
            put_ie(buf, ie_type::THROTTLING, 0, |b| t.emit(b));
        }
        if let Some(t) = self.dl_buffering_duration {
            put_ie(buf, ie_type::EPC_TIMER, 0, |b| b.push(t));
        }
        if let Some(n) = self.dl_buffering_suggested_packets {
            put_ie(buf, ie_type::INTEGER_NUMBER, 0, |b| b.extend_from_slice(&n.to_be_bytes()));
        }
    }
}

/// Throttling (TS 29.274 8.85): octet 5 the Throttling Delay, its unit in
/// bits 8-6 and its value in bits 5-1 (the units of the EPC Timer, 8.87),
/// octet 6 the Throttling Factor, a percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottlingIe {
    /// Throttling Delay unit, 3 bits: 000 2 s, 001 1 min, 010 10 min,
    /// 011 1 h, 100 10 h, 111 deactivated, others 1 min.
    pub delay_unit: u8,
    /// Throttling Delay value, 5 bits.
    pub delay_value: u8,
    /// Throttling Factor as sent: 0..=100 percent, other values read as 0.
    pub factor: u8,
}

impl ThrottlingIe {
    /// The IE for a delay of `seconds` (the finest unit that holds it,
    /// rounded up; at most 31 x 10 hours) and `factor` percent.
    pub fn new(seconds: u32, factor: u8) -> Self {
        let octet = epc_timer_octet(seconds);
        ThrottlingIe { delay_unit: octet >> 5, delay_value: octet & 0x1f, factor }
    }
    pub fn parse(v: &[u8]) -> Result<Self, crate::wire::Error> {
        let [delay, factor, ..] = *v else { return Err(crate::wire::Error::Truncated) };
        Ok(ThrottlingIe { delay_unit: delay >> 5, delay_value: delay & 0x1f, factor })
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&[self.delay_octet(), self.factor]);
    }
    fn delay_octet(&self) -> u8 {
        (self.delay_unit & 0x07) << 5 | (self.delay_value & 0x1f)
    }
    /// The Throttling Delay in seconds; `None` when deactivated (unit 111).
    pub fn delay_seconds(&self) -> Option<u32> {
        epc_timer_seconds(self.delay_octet())
    }
    /// The Throttling Factor in percent; a value above 100 reads as 0
    /// (8.85).
    pub fn factor_percent(&self) -> u8 {
        if self.factor <= 100 {
            self.factor
        } else {
            0
        }
    }
}

/// Downlink Data Notification Failure Indication (TS 29.274 7.2.11.3):
/// Cause (mandatory); no response message exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownlinkDataNotificationFailureIndication {
    pub cause: CauseIe,
}

impl DownlinkDataNotificationFailureIndication {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(DownlinkDataNotificationFailureIndication { cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)? })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
    }
}

/// EPC Timer (TS 29.274 8.87) in seconds: bits 8-6 the unit, bits 5-1 the
/// value; `None` for "infinite" (unit 111). Units other than those defined
/// are read as 1 minute, as the clause says.
pub fn epc_timer_seconds(octet: u8) -> Option<u32> {
    let value = u32::from(octet & 0x1f);
    let unit = match octet >> 5 {
        0 => 2,
        1 => 60,
        2 => 600,
        3 => 3600,
        4 => 36_000,
        7 => return None,
        _ => 60,
    };
    Some(value * unit)
}

/// The EPC Timer octet for `seconds` (TS 29.274 8.87): the finest unit
/// that holds it, rounded up; at most 31 x 10 hours.
pub fn epc_timer_octet(seconds: u32) -> u8 {
    for (code, unit) in [(0u8, 2u32), (1, 60), (2, 600), (3, 3600), (4, 36_000)] {
        let v = seconds.div_ceil(unit);
        if v <= 31 {
            return (code << 5) | v as u8;
        }
    }
    (4 << 5) | 31
}
