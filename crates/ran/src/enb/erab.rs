//! E-RAB management for PDN connections after attach (TS 36.413 8.2.1,
//! 8.2.3), each with the UE-AMBR it leaves (TS 23.401 4.7.3, kept in the
//! UE's context): E-RAB SETUP REQUEST sets up the bearer of a new PDN connection
//! and hands the UE its ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST; E-RAB
//! RELEASE COMMAND releases a bearer and hands the UE its DEACTIVATE EPS
//! BEARER CONTEXT REQUEST. The UE's side is [`crate::ue::pdn`].

use std::time::Instant;

use mobicore_common::{Fteid, Teid};

use super::context::{EnbError, Erab};
use super::s1ap_build::{self, ErabSetup};
use super::s1ap_handler::ErabToSetup;
use super::Enb;

impl Enb {
    /// UE `index` asks for a PDN connection to `apn` on its S1 connection
    /// ([`crate::ue::Procedure::PdnConnectivity`]).
    pub fn start_pdn_connectivity(&mut self, now: Instant, index: u64, apn: &str) -> Result<(), EnbError> {
        let ctx = self.connected_ue(index)?;
        ctx.ue.start_pdn_connectivity(now, apn)?;
        self.begin_procedure(now, index);
        Ok(())
    }

    /// UE `index` gives up the PDN connection of default bearer `ebi`
    /// ([`crate::ue::Procedure::PdnDisconnect`]).
    pub fn start_pdn_disconnect(&mut self, now: Instant, index: u64, ebi: u8) -> Result<(), EnbError> {
        let ctx = self.connected_ue(index)?;
        ctx.ue.start_pdn_disconnect(now, ebi)?;
        self.begin_procedure(now, index);
        Ok(())
    }

    fn connected_ue(&mut self, index: u64) -> Result<&mut super::UeContext, EnbError> {
        if !self.is_ready() {
            return Err(EnbError::NotReady);
        }
        let ctx = self.ues.get_mut(&index).ok_or(EnbError::UnknownUe(index))?;
        if ctx.s1.is_none() {
            return Err(EnbError::NotConnected(index));
        }
        Ok(ctx)
    }

    /// The E-RABs the MME asks for, each with an S1-U TEID of ours, and
    /// their items for the answer (INITIAL CONTEXT SETUP, E-RAB SETUP).
    pub(super) fn set_up_erabs(&mut self, req: &[ErabToSetup]) -> (Vec<Erab>, Vec<ErabSetup>) {
        let erabs: Vec<Erab> = req
            .iter()
            .map(|e| Erab {
                e_rab_id: e.e_rab_id,
                qci: e.qci,
                sgw: e.sgw_address.map(|ipv4| Fteid { teid: Teid(e.sgw_teid), ipv4 }),
                enb: Fteid { teid: Teid(self.allocate_teid()), ipv4: self.cfg.s1u_addr },
            })
            .collect();
        let answer = erabs.iter().map(Erab::setup).collect();
        (erabs, answer)
    }

    /// The answer to an INITIAL CONTEXT SETUP REQUEST that repeats the one
    /// UE `index`'s bearers were set up by (same KeNB, E-RABs set up
    /// already): an MME host that took the UE over sends it again when
    /// the one that sent it died before it knew it went. The E-RABs stay
    /// as they are.
    pub(super) fn repeated_ics(&self, index: u64, kenb: &[u8; 32], req: &[ErabToSetup]) -> Option<Vec<ErabSetup>> {
        let ctx = self.ues.get(&index).filter(|c| c.kenb.as_ref() == Some(kenb))?;
        let set_up = |id: u8| ctx.erabs.iter().find(|e| e.e_rab_id == id);
        if ctx.erabs.is_empty() || !req.iter().all(|e| set_up(e.e_rab_id).is_some()) {
            return None;
        }
        Some(ctx.erabs.iter().map(Erab::setup).collect())
    }

    /// E-RAB SETUP REQUEST (8.2.1.2): each E-RAB gets a TEID of ours and
    /// is answered in the RESPONSE; the NAS PDUs go to the UE.
    pub(super) fn erab_setup(
        &mut self,
        now: Instant,
        mme_ue_id: u32,
        enb_ue_id: u32,
        ambr: Option<(u64, u64)>,
        req: Vec<ErabToSetup>,
    ) {
        let Some(index) = self.associate(mme_ue_id, enb_ue_id) else { return };
        let (set_up, answer) = self.set_up_erabs(&req);
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let stream = ctx.s1.map_or(0, |s| s.stream);
        ctx.ambr = ambr.or(ctx.ambr);
        for e in set_up {
            ctx.erabs.retain(|old| old.e_rab_id != e.e_rab_id);
            ctx.erabs.push(e);
        }
        for nas in req.iter().filter_map(|e| e.nas.as_deref()) {
            ctx.ue.handle_downlink(now, nas);
        }
        self.push_pdu(stream, s1ap_build::erab_setup_response(mme_ue_id, enb_ue_id, &answer));
        self.drive(index);
    }

    /// E-RAB RELEASE COMMAND (8.2.3.2): the E-RABs go, the RESPONSE lists
    /// them, and the NAS PDU goes to the UE.
    pub(super) fn erab_release(
        &mut self,
        now: Instant,
        mme_ue_id: u32,
        enb_ue_id: u32,
        ambr: Option<(u64, u64)>,
        e_rab_ids: Vec<u8>,
        nas: Option<Vec<u8>>,
    ) {
        let Some(index) = self.associate(mme_ue_id, enb_ue_id) else { return };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let stream = ctx.s1.map_or(0, |s| s.stream);
        ctx.ambr = ambr.or(ctx.ambr);
        ctx.erabs.retain(|e| !e_rab_ids.contains(&e.e_rab_id));
        if let Some(nas) = nas {
            ctx.ue.handle_downlink(now, &nas);
        }
        self.push_pdu(stream, s1ap_build::erab_release_response(mme_ue_id, enb_ue_id, &e_rab_ids));
        self.drive(index);
    }
}

impl Erab {
    /// How the eNB answers that it set this E-RAB up.
    fn setup(&self) -> ErabSetup {
        ErabSetup { e_rab_id: self.e_rab_id, address: self.enb.ipv4, teid: self.enb.teid.0 }
    }
}
