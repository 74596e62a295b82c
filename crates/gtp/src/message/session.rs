//! Create Session Request / Response (TS 29.274 7.2.1, 7.2.2).

use super::{Fields, MessageError};
use crate::wire::ie::*;
use mobicore_common::{Ambr, Ebi, Imsi, PdnType, Plmn};

/// Bearer Context to be created within Create Session Request (Table 7.2.1-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BearerContextToCreate {
    pub ebi: Ebi,
    pub bearer_qos: BearerQos,
    /// S1-U eNB F-TEID (instance 0), present on some handovers only.
    pub s1u_enb_fteid: Option<FteidIe>,
}

impl BearerContextToCreate {
    fn parse(v: &[u8]) -> Result<Self, MessageError> {
        let f = Fields::new(v)?;
        Ok(BearerContextToCreate {
            ebi: f.mandatory(ie_type::EBI, 0, parse_ebi)?,
            bearer_qos: f.mandatory(ie_type::BEARER_QOS, 0, BearerQos::parse)?,
            s1u_enb_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
        })
    }
    fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::EBI, 0, |b| b.push(self.ebi.0 & 0x0f));
        if let Some(ft) = &self.s1u_enb_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
        put_ie(buf, ie_type::BEARER_QOS, 0, |b| self.bearer_qos.emit(b));
    }
}

/// Create Session Request (TS 29.274 7.2.1). Conditional IEs the MME always
/// sends on E-UTRAN initial attach are kept as options here; the mapping to
/// [`mobicore_common::s11`] types says which it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionRequest {
    pub imsi: Option<Imsi>,
    pub msisdn: Option<String>,
    pub mei: Option<String>,
    pub uli: Option<Uli>,
    pub serving_network: Option<Plmn>,
    pub rat_type: u8,
    pub indication: Option<Vec<u8>>,
    /// Sender F-TEID for Control Plane (instance 0), mandatory.
    pub sender_fteid: FteidIe,
    /// PGW S5/S8 Address for Control Plane (instance 1).
    pub pgw_s5s8_fteid: Option<FteidIe>,
    pub apn: String,
    pub selection_mode: Option<u8>,
    pub pdn_type: Option<PdnType>,
    pub paa: Option<Paa>,
    pub apn_restriction: Option<u8>,
    pub apn_ambr: Option<Ambr>,
    /// Protocol Configuration Options (TS 29.274 8.13): the UE's PCO,
    /// value octets as in TS 24.008 10.5.6.3 from octet 3.
    pub pco: Option<Vec<u8>>,
    pub bearer_contexts: Vec<BearerContextToCreate>,
    pub recovery: Option<u8>,
    /// Extended PCO (TS 29.274 8.128, TS 24.301 9.9.4.26), same contents.
    pub epco: Option<Vec<u8>>,
}

impl CreateSessionRequest {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        let bearer_contexts = f.all(ie_type::BEARER_CONTEXT, 0, BearerContextToCreate::parse)?;
        if bearer_contexts.is_empty() {
            return Err(MessageError::MissingIe { ie_type: ie_type::BEARER_CONTEXT, instance: 0 });
        }
        Ok(CreateSessionRequest {
            imsi: f.optional(ie_type::IMSI, 0, parse_imsi),
            msisdn: f.optional(ie_type::MSISDN, 0, parse_tbcd_digits),
            mei: f.optional(ie_type::MEI, 0, parse_tbcd_digits),
            uli: f.optional(ie_type::ULI, 0, Uli::parse),
            serving_network: f.optional(ie_type::SERVING_NETWORK, 0, parse_plmn),
            rat_type: f.mandatory(ie_type::RAT_TYPE, 0, parse_u8)?,
            indication: f.optional(ie_type::INDICATION, 0, |v| Ok(v.to_vec())),
            sender_fteid: f.mandatory(ie_type::FTEID, 0, FteidIe::parse)?,
            pgw_s5s8_fteid: f.optional(ie_type::FTEID, 1, FteidIe::parse),
            apn: f.mandatory(ie_type::APN, 0, parse_apn)?,
            selection_mode: f.optional(ie_type::SELECTION_MODE, 0, |v| parse_u8(v).map(|x| x & 0x03)),
            pdn_type: f.optional(ie_type::PDN_TYPE, 0, |v| parse_u8(v).and_then(pdn_type_from)),
            paa: f.optional(ie_type::PAA, 0, Paa::parse),
            apn_restriction: f.optional(ie_type::APN_RESTRICTION, 0, parse_u8),
            apn_ambr: f.optional(ie_type::AMBR, 0, parse_ambr),
            pco: f.optional(ie_type::PCO, 0, parse_octets),
            bearer_contexts,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
            epco: f.optional(ie_type::EPCO, 0, parse_octets),
        })
    }

    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        if let Some(i) = &self.imsi {
            put_ie(buf, ie_type::IMSI, 0, |b| b.extend(i.to_tbcd()));
        }
        if let Some(m) = &self.msisdn {
            put_ie(buf, ie_type::MSISDN, 0, |b| emit_tbcd_digits(m, b));
        }
        if let Some(m) = &self.mei {
            put_ie(buf, ie_type::MEI, 0, |b| emit_tbcd_digits(m, b));
        }
        if let Some(u) = &self.uli {
            put_ie(buf, ie_type::ULI, 0, |b| u.emit(b));
        }
        if let Some(p) = &self.serving_network {
            put_ie(buf, ie_type::SERVING_NETWORK, 0, |b| b.extend(p.to_octets()));
        }
        put_ie(buf, ie_type::RAT_TYPE, 0, |b| b.push(self.rat_type));
        if let Some(i) = &self.indication {
            put_ie(buf, ie_type::INDICATION, 0, |b| b.extend_from_slice(i));
        }
        put_ie(buf, ie_type::FTEID, 0, |b| self.sender_fteid.emit(b));
        if let Some(ft) = &self.pgw_s5s8_fteid {
            put_ie(buf, ie_type::FTEID, 1, |b| ft.emit(b));
        }
        put_ie(buf, ie_type::APN, 0, |b| emit_apn(&self.apn, b));
        if let Some(s) = self.selection_mode {
            put_ie(buf, ie_type::SELECTION_MODE, 0, |b| b.push(s & 0x03));
        }
        if let Some(p) = self.pdn_type {
            put_ie(buf, ie_type::PDN_TYPE, 0, |b| b.push(pdn_type_value(p)));
        }
        if let Some(p) = &self.paa {
            put_ie(buf, ie_type::PAA, 0, |b| p.emit(b));
        }
        if let Some(r) = self.apn_restriction {
            put_ie(buf, ie_type::APN_RESTRICTION, 0, |b| b.push(r));
        }
        if let Some(a) = &self.apn_ambr {
            put_ie(buf, ie_type::AMBR, 0, |b| emit_ambr(a, b));
        }
        if let Some(p) = &self.pco {
            put_ie(buf, ie_type::PCO, 0, |b| b.extend_from_slice(p));
        }
        for bc in &self.bearer_contexts {
            put_ie(buf, ie_type::BEARER_CONTEXT, 0, |b| bc.emit(b));
        }
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
        if let Some(p) = &self.epco {
            put_ie(buf, ie_type::EPCO, 0, |b| b.extend_from_slice(p));
        }
    }
}

/// Bearer Context created within Create Session Response (Table 7.2.2-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BearerContextCreated {
    pub ebi: Ebi,
    pub cause: CauseIe,
    /// S1-U SGW F-TEID (instance 0).
    pub s1u_sgw_fteid: Option<FteidIe>,
    /// S5/S8-U PGW F-TEID (instance 2).
    pub s5s8_pgw_fteid: Option<FteidIe>,
    pub bearer_qos: Option<BearerQos>,
    pub charging_id: Option<u32>,
}

impl BearerContextCreated {
    fn parse(v: &[u8]) -> Result<Self, MessageError> {
        let f = Fields::new(v)?;
        Ok(BearerContextCreated {
            ebi: f.mandatory(ie_type::EBI, 0, parse_ebi)?,
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            s1u_sgw_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
            s5s8_pgw_fteid: f.optional(ie_type::FTEID, 2, FteidIe::parse),
            bearer_qos: f.optional(ie_type::BEARER_QOS, 0, BearerQos::parse),
            charging_id: f.optional(ie_type::CHARGING_ID, 0, parse_u32),
        })
    }
    fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::EBI, 0, |b| b.push(self.ebi.0 & 0x0f));
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(ft) = &self.s1u_sgw_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
        if let Some(ft) = &self.s5s8_pgw_fteid {
            put_ie(buf, ie_type::FTEID, 2, |b| ft.emit(b));
        }
        if let Some(q) = &self.bearer_qos {
            put_ie(buf, ie_type::BEARER_QOS, 0, |b| q.emit(b));
        }
        if let Some(c) = self.charging_id {
            put_ie(buf, ie_type::CHARGING_ID, 0, |b| b.extend_from_slice(&c.to_be_bytes()));
        }
    }
}

/// Create Session Response (TS 29.274 7.2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionResponse {
    pub cause: CauseIe,
    /// Sender F-TEID for Control Plane: the SGW's S11 F-TEID (instance 0).
    pub sender_fteid: Option<FteidIe>,
    /// PGW S5/S8 F-TEID for Control Plane (instance 1).
    pub pgw_s5s8_fteid: Option<FteidIe>,
    pub paa: Option<Paa>,
    pub apn_restriction: Option<u8>,
    pub apn_ambr: Option<Ambr>,
    /// PCO for the UE (TS 29.274 8.13), when the UE sent PCO.
    pub pco: Option<Vec<u8>>,
    pub bearer_contexts: Vec<BearerContextCreated>,
    pub recovery: Option<u8>,
    /// ePCO for the UE (TS 29.274 8.128), when the UE sent ePCO.
    pub epco: Option<Vec<u8>>,
}

impl CreateSessionResponse {
    pub fn rejected(cause: CauseIe) -> Self {
        CreateSessionResponse {
            cause,
            sender_fteid: None,
            pgw_s5s8_fteid: None,
            paa: None,
            apn_restriction: None,
            apn_ambr: None,
            pco: None,
            bearer_contexts: vec![],
            recovery: None,
            epco: None,
        }
    }
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(CreateSessionResponse {
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            sender_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
            pgw_s5s8_fteid: f.optional(ie_type::FTEID, 1, FteidIe::parse),
            paa: f.optional(ie_type::PAA, 0, Paa::parse),
            apn_restriction: f.optional(ie_type::APN_RESTRICTION, 0, parse_u8),
            apn_ambr: f.optional(ie_type::AMBR, 0, parse_ambr),
            pco: f.optional(ie_type::PCO, 0, parse_octets),
            bearer_contexts: f.all(ie_type::BEARER_CONTEXT, 0, BearerContextCreated::parse)?,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
            epco: f.optional(ie_type::EPCO, 0, parse_octets),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(ft) = &self.sender_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
        if let Some(ft) = &self.pgw_s5s8_fteid {
            put_ie(buf, ie_type::FTEID, 1, |b| ft.emit(b));
        }
        if let Some(p) = &self.paa {
            put_ie(buf, ie_type::PAA, 0, |b| p.emit(b));
        }
        if let Some(r) = self.apn_restriction {
            put_ie(buf, ie_type::APN_RESTRICTION, 0, |b| b.push(r));
        }
        if let Some(a) = &self.apn_ambr {
            put_ie(buf, ie_type::AMBR, 0, |b| emit_ambr(a, b));
        }
        if let Some(p) = &self.pco {
            put_ie(buf, ie_type::PCO, 0, |b| b.extend_from_slice(p));
        }
        for bc in &self.bearer_contexts {
            put_ie(buf, ie_type::BEARER_CONTEXT, 0, |b| bc.emit(b));
        }
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
        if let Some(p) = &self.epco {
            put_ie(buf, ie_type::EPCO, 0, |b| b.extend_from_slice(p));
        }
    }
}
