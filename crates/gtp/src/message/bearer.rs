//! Modify Bearer (TS 29.274 7.2.7/7.2.8), Delete Session (7.2.9/7.2.10) and
//! Release Access Bearers (7.2.21/7.2.22).

use super::{Fields, MessageError};
use crate::wire::ie::*;
use mobicore_common::{Ebi, Plmn};

/// Bearer Context to be modified (Table 7.2.7-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BearerContextToModify {
    pub ebi: Ebi,
    /// S1-U eNB F-TEID (instance 0).
    pub s1u_enb_fteid: Option<FteidIe>,
}

impl BearerContextToModify {
    fn parse(v: &[u8]) -> Result<Self, MessageError> {
        let f = Fields::new(v)?;
        Ok(BearerContextToModify {
            ebi: f.mandatory(ie_type::EBI, 0, parse_ebi)?,
            s1u_enb_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
        })
    }
    fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::EBI, 0, |b| b.push(self.ebi.0 & 0x0f));
        if let Some(ft) = &self.s1u_enb_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
    }
}

/// Modify Bearer Request (TS 29.274 7.2.7); all its IEs are conditional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModifyBearerRequest {
    pub indication: Option<Vec<u8>>,
    pub uli: Option<Uli>,
    pub serving_network: Option<Plmn>,
    pub rat_type: Option<u8>,
    pub sender_fteid: Option<FteidIe>,
    pub bearer_contexts: Vec<BearerContextToModify>,
    pub recovery: Option<u8>,
}

impl ModifyBearerRequest {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(ModifyBearerRequest {
            indication: f.optional(ie_type::INDICATION, 0, |v| Ok(v.to_vec())),
            uli: f.optional(ie_type::ULI, 0, Uli::parse),
            serving_network: f.optional(ie_type::SERVING_NETWORK, 0, parse_plmn),
            rat_type: f.optional(ie_type::RAT_TYPE, 0, parse_u8),
            sender_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
            bearer_contexts: f.all(ie_type::BEARER_CONTEXT, 0, BearerContextToModify::parse)?,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        if let Some(i) = &self.indication {
            put_ie(buf, ie_type::INDICATION, 0, |b| b.extend_from_slice(i));
        }
        if let Some(u) = &self.uli {
            put_ie(buf, ie_type::ULI, 0, |b| u.emit(b));
        }
        if let Some(p) = &self.serving_network {
            put_ie(buf, ie_type::SERVING_NETWORK, 0, |b| b.extend(p.to_octets()));
        }
        if let Some(r) = self.rat_type {
            put_ie(buf, ie_type::RAT_TYPE, 0, |b| b.push(r));
        }
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

/// Bearer Context modified (Table 7.2.8-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BearerContextModified {
    pub ebi: Ebi,
    pub cause: CauseIe,
    /// S1-U SGW F-TEID (instance 0).
    pub s1u_sgw_fteid: Option<FteidIe>,
}

impl BearerContextModified {
    fn parse(v: &[u8]) -> Result<Self, MessageError> {
        let f = Fields::new(v)?;
        Ok(BearerContextModified {
            ebi: f.mandatory(ie_type::EBI, 0, parse_ebi)?,
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            s1u_sgw_fteid: f.optional(ie_type::FTEID, 0, FteidIe::parse),
        })
    }
    fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::EBI, 0, |b| b.push(self.ebi.0 & 0x0f));
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(ft) = &self.s1u_sgw_fteid {
            put_ie(buf, ie_type::FTEID, 0, |b| ft.emit(b));
        }
    }
}

/// Modify Bearer Response (TS 29.274 7.2.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModifyBearerResponse {
    pub cause: CauseIe,
    pub msisdn: Option<String>,
    pub bearer_contexts: Vec<BearerContextModified>,
    pub recovery: Option<u8>,
}

impl ModifyBearerResponse {
    pub fn rejected(cause: CauseIe) -> Self {
        ModifyBearerResponse { cause, msisdn: None, bearer_contexts: vec![], recovery: None }
    }
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(ModifyBearerResponse {
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            msisdn: f.optional(ie_type::MSISDN, 0, parse_tbcd_digits),
            bearer_contexts: f.all(ie_type::BEARER_CONTEXT, 0, BearerContextModified::parse)?,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(m) = &self.msisdn {
            put_ie(buf, ie_type::MSISDN, 0, |b| emit_tbcd_digits(m, b));
        }
        for bc in &self.bearer_contexts {
            put_ie(buf, ie_type::BEARER_CONTEXT, 0, |b| bc.emit(b));
        }
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
    }
}

/// Delete Session Request (TS 29.274 7.2.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteSessionRequest {
    /// Linked EPS Bearer ID (EBI instance 0), conditional.
    pub linked_ebi: Option<Ebi>,
    pub uli: Option<Uli>,
    pub indication: Option<Vec<u8>>,
}

impl DeleteSessionRequest {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(DeleteSessionRequest {
            linked_ebi: f.optional(ie_type::EBI, 0, parse_ebi),
            uli: f.optional(ie_type::ULI, 0, Uli::parse),
            indication: f.optional(ie_type::INDICATION, 0, |v| Ok(v.to_vec())),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        if let Some(e) = self.linked_ebi {
            put_ie(buf, ie_type::EBI, 0, |b| b.push(e.0 & 0x0f));
        }
        if let Some(u) = &self.uli {
            put_ie(buf, ie_type::ULI, 0, |b| u.emit(b));
        }
        if let Some(i) = &self.indication {
            put_ie(buf, ie_type::INDICATION, 0, |b| b.extend_from_slice(i));
        }
    }
}

/// Release Access Bearers Request (TS 29.274 7.2.21); no mandatory IE.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReleaseAccessBearersRequest {
    pub indication: Option<Vec<u8>>,
}

impl ReleaseAccessBearersRequest {
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(ReleaseAccessBearersRequest { indication: f.optional(ie_type::INDICATION, 0, |v| Ok(v.to_vec())) })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        if let Some(i) = &self.indication {
            put_ie(buf, ie_type::INDICATION, 0, |b| b.extend_from_slice(i));
        }
    }
}

/// Delete Session Response (7.2.10) and Release Access Bearers Response
/// (7.2.22): Cause, optionally Recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CauseOnlyResponse {
    pub cause: CauseIe,
    pub recovery: Option<u8>,
}

impl CauseOnlyResponse {
    pub fn new(cause: u8) -> Self {
        CauseOnlyResponse { cause: CauseIe::new(cause), recovery: None }
    }
    pub(super) fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(CauseOnlyResponse {
            cause: f.mandatory(ie_type::CAUSE, 0, CauseIe::parse)?,
            recovery: f.optional(ie_type::RECOVERY, 0, parse_u8),
        })
    }
    pub(super) fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::CAUSE, 0, |b| self.cause.emit(b));
        if let Some(r) = self.recovery {
            put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(r));
        }
    }
}
