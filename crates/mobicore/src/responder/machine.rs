//! The responder's state machine, without I/O: S1AP PDUs in, S1AP PDUs
//! out, each answer taken from the UE's pre-built [`UeReplies`]. It checks
//! no MAC and keeps no NAS COUNT: the UE's step says what its next uplink
//! NAS message is, and the reply to it is already built.

use super::replies::{index_of, ResponderPlan, UeReplies};
use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::Imsi;
use mobicore_mme::s1ap_build;
use oxirush_nas::nas_eps::{Direction, NasEmmMessage, NasEpsMessage};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, S1apPduKind};
use std::collections::{HashMap, VecDeque};

/// EMM message types (TS 24.301 9.8) the responder looks at in plain PDUs.
const AUTHENTICATION_RESPONSE: u8 = 0x53;
/// Security header types (TS 24.301 9.3.1).
const SHT_PLAIN: u8 = 0;
const SHT_NEW_CONTEXT_CIPHERED: u8 = 4;

/// What the shell feeds the responder.
#[derive(Debug)]
pub enum ResponderEvent {
    /// An eNB's association is up.
    Up { assoc: AssocId, outbound_streams: u16 },
    /// An S1AP PDU on a stream.
    Data { assoc: AssocId, stream: u16, data: Bytes },
    /// The association is gone.
    Down { assoc: AssocId },
}

/// What the responder asks the shell to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    pub assoc: AssocId,
    pub stream: u16,
    pub data: Bytes,
}

/// Where a UE is in the attach and detach the emulator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Deregistered,
    /// AUTHENTICATION REQUEST sent.
    Authentication,
    /// SECURITY MODE COMMAND sent.
    SecurityMode,
    /// INITIAL CONTEXT SETUP REQUEST (ATTACH ACCEPT) sent.
    AttachAccept,
    /// ATTACH COMPLETE received.
    Registered,
    /// DETACH ACCEPT and UE CONTEXT RELEASE COMMAND sent.
    Releasing,
    /// UE CONTEXT RELEASE COMPLETE received: done.
    Released,
}

#[derive(Debug, Clone, Copy)]
struct UeState {
    step: Step,
    assoc: AssocId,
    enb_ue_id: u32,
    stream: u16,
}

/// Totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    pub enbs: u64,
    /// ATTACH COMPLETEs received.
    pub attached: u64,
    /// DETACH REQUESTs answered.
    pub detached: u64,
    /// UE CONTEXT RELEASE COMPLETEs received.
    pub released: u64,
    /// UEs whose eNB-UE-S1AP-ID was not the expected one (replies wrapped
    /// again at run time).
    pub patched: u64,
}

pub struct Responder {
    plan: ResponderPlan,
    replies: Vec<UeReplies>,
    ues: Vec<Option<UeState>>,
    by_imsi: HashMap<Imsi, usize>,
    /// Outbound streams per association.
    enbs: HashMap<AssocId, u16>,
    s1_setup_response: Bytes,
    actions: VecDeque<Send>,
    counters: Counters,
    stats: ResponderStats,
}

impl Responder {
    /// A responder for the UEs of `replies` (UE `i` of the plan at `i`).
    pub fn new(plan: ResponderPlan, replies: Vec<UeReplies>) -> Option<Self> {
        let s1_setup_response = Bytes::from(s1ap_build::s1_setup_response(&plan.mme)?);
        let by_imsi = replies.iter().enumerate().map(|(i, r)| (r.imsi.clone(), i)).collect();
        Some(Responder {
            plan,
            ues: vec![None; replies.len()],
            replies,
            by_imsi,
            enbs: HashMap::new(),
            s1_setup_response,
            actions: VecDeque::new(),
            counters: Counters::new(),
            stats: ResponderStats::default(),
        })
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn stats(&self) -> ResponderStats {
        self.stats
    }

    /// The step of UE `index`.
    pub fn step(&self, index: usize) -> Step {
        self.ues.get(index).copied().flatten().map_or(Step::Deregistered, |u| u.step)
    }

    #[must_use]
    pub fn poll_action(&mut self) -> Option<Send> {
        self.actions.pop_front()
    }

    pub fn handle(&mut self, ev: ResponderEvent) {
        match ev {
            ResponderEvent::Up { assoc, outbound_streams } => {
                self.enbs.insert(assoc, outbound_streams.max(1));
            }
            ResponderEvent::Data { assoc, stream, data } => self.on_data(assoc, stream, &data),
            ResponderEvent::Down { assoc } => {
                self.enbs.remove(&assoc);
            }
        }
    }

    fn on_data(&mut self, assoc: AssocId, stream: u16, data: &[u8]) {
        self.enbs.entry(assoc).or_insert_with(|| stream.saturating_add(1).max(2));
        let Ok(pdu) = S1AP_PDU::decode_borrowed(data) else {
            return self.counters.incr("responder_s1ap_malformed");
        };
        let r = match pdu.kind() {
            S1apPduKind::Initiating_S1Setup => {
                self.stats.enbs += 1;
                let data = self.s1_setup_response.clone();
                self.actions.push_back(Send { assoc, stream: 0, data });
                Ok(())
            }
            S1apPduKind::Initiating_initialUEMessage => self.on_initial_ue_message(assoc, stream, &pdu),
            S1apPduKind::Initiating_uplinkNASTransport => self.on_uplink_nas(assoc, &pdu),
            S1apPduKind::Successful_InitialContextSetup => Ok(()),
            S1apPduKind::Successful_UEContextRelease => self.on_release_complete(assoc, &pdu),
            S1apPduKind::Initiating_UEContextReleaseRequest => self.on_release_request(assoc, &pdu),
            S1apPduKind::Initiating_ErrorIndication => {
                self.counters.incr("responder_error_indication_received");
                Ok(())
            }
            _ => {
                self.counters.incr("responder_unexpected_s1ap");
                Ok(())
            }
        };
        if r.is_err() {
            self.counters.incr("responder_s1ap_missing_ie");
        }
    }

    /// INITIAL UE MESSAGE with the ATTACH REQUEST: the UE by its IMSI, and
    /// its AUTHENTICATION REQUEST.
    fn on_initial_ue_message(
        &mut self,
        assoc: AssocId,
        stream: u16,
        pdu: &S1APPDU<'_>,
    ) -> Result<(), oxirush_s1ap::Error> {
        extract_s1ap_ies!(pdu, InitialUEMessage,
            req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
            req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
        );
        let request = match NasEpsMessage::decode_with_direction(&nas, Direction::Uplink) {
            Ok(NasEpsMessage::Emm(_, NasEmmMessage::AttachRequest(r))) => r,
            _ => return self.refuse("responder_not_an_imsi_attach"),
        };
        let imsi = request.eps_mobile_identity.as_imsi().and_then(|i| i.to_string().parse::<Imsi>().ok());
        let Some(&index) = imsi.as_ref().and_then(|i| self.by_imsi.get(i)) else {
            return self.refuse("responder_unknown_imsi");
        };
        if self.ues[index].is_some() {
            // The replies are for one attach of each UE.
            return self.refuse("responder_repeated_attach");
        }
        if request.ue_network_capability != mobicore_ran::ue::Ue::ue_network_capability() {
            // The SECURITY MODE COMMAND replays the emulator's capability.
            self.counters.incr("responder_other_ue_capability");
        }
        let replies = &mut self.replies[index];
        if replies.enb_ue_id != enb_ue_id {
            if !replies.patch(&self.plan, enb_ue_id) {
                return self.refuse("responder_encode_error");
            }
            self.stats.patched += 1;
        }
        let stream = self.ue_stream(assoc, stream);
        self.ues[index] = Some(UeState { step: Step::Authentication, assoc, enb_ue_id, stream });
        let data = self.replies[index].authentication_request.clone();
        self.actions.push_back(Send { assoc, stream, data });
        Ok(())
    }

    /// Count an Initial UE Message the responder has no reply for; it
    /// stays unanswered (the emulator's guard timer ends the procedure).
    fn refuse(&mut self, what: &'static str) -> Result<(), oxirush_s1ap::Error> {
        self.counters.incr(what);
        Ok(())
    }

    /// A stream for UE-associated signalling (TS 36.412 7: not 0 where
    /// there is another).
    fn ue_stream(&self, assoc: AssocId, stream: u16) -> u16 {
        let out = self.enbs.get(&assoc).copied().unwrap_or(1);
        match out {
            1 => 0,
            _ if stream != 0 && stream < out => stream,
            _ => 1,
        }
    }

    /// The UE an MME-UE-S1AP-ID names, checked against the association
    /// and eNB-UE-S1AP-ID.
    fn ue_of(&mut self, assoc: AssocId, mme_ue_id: u32, enb_ue_id: u32) -> Option<usize> {
        let index = index_of(mme_ue_id).and_then(|i| usize::try_from(i).ok());
        let found = index.filter(|&i| {
            self.ues.get(i).copied().flatten().is_some_and(|u| u.assoc == assoc && u.enb_ue_id == enb_ue_id)
        });
        if found.is_none() {
            self.counters.incr("responder_unknown_ue");
        }
        found
    }

    /// UPLINK NAS TRANSPORT: the UE's step says which message it is.
    fn on_uplink_nas(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> Result<(), oxirush_s1ap::Error> {
        extract_s1ap_ies!(pdu, UplinkNASTransport,
            req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
            req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
            req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
        );
        let Some(index) = self.ue_of(assoc, mme_ue_id, enb_ue_id) else { return Ok(()) };
        let Some(ue) = self.ues[index].as_mut() else { return Ok(()) };
        let header = nas.first().map_or(u8::MAX, |b| b >> 4);
        let replies = &self.replies[index];
        let (send, next): (Vec<Bytes>, Step) = match ue.step {
            Step::Authentication if header == SHT_PLAIN && nas.get(1) == Some(&AUTHENTICATION_RESPONSE) => {
                (vec![replies.security_mode_command.clone()], Step::SecurityMode)
            }
            Step::SecurityMode if header == SHT_NEW_CONTEXT_CIPHERED => {
                (vec![replies.initial_context_setup.clone()], Step::AttachAccept)
            }
            Step::AttachAccept if header != SHT_PLAIN => {
                self.stats.attached += 1;
                (vec![], Step::Registered)
            }
            Step::Registered if header != SHT_PLAIN => {
                self.stats.detached += 1;
                let mut v = Vec::with_capacity(2);
                if !self.plan.switch_off {
                    v.push(replies.detach_accept.clone());
                }
                v.push(replies.release_command.clone());
                (v, Step::Releasing)
            }
            Step::Authentication | Step::SecurityMode => {
                // AUTHENTICATION FAILURE, SECURITY MODE REJECT, ...: the
                // attach is over; release the connection.
                self.counters.incr("responder_attach_failed");
                let cause = Cause::nas(CauseNas::unspecified);
                let release = s1ap_build::ue_context_release_command(mme_ue_id, enb_ue_id, cause);
                (release.map(Bytes::from).into_iter().collect(), Step::Releasing)
            }
            _ => {
                self.counters.incr("responder_unexpected_nas");
                (vec![], ue.step)
            }
        };
        ue.step = next;
        let stream = ue.stream;
        self.actions.extend(send.into_iter().map(|data| Send { assoc, stream, data }));
        Ok(())
    }

    /// UE CONTEXT RELEASE COMPLETE.
    fn on_release_complete(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> Result<(), oxirush_s1ap::Error> {
        extract_s1ap_ies!(pdu, UEContextReleaseComplete,
            req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
            req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let Some(index) = self.ue_of(assoc, mme_ue_id, enb_ue_id) else { return Ok(()) };
        if let Some(ue) = self.ues[index].as_mut() {
            ue.step = Step::Released;
            self.stats.released += 1;
        }
        Ok(())
    }

    /// UE CONTEXT RELEASE REQUEST (the eNB gave up on a procedure): the
    /// command, built now.
    fn on_release_request(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> Result<(), oxirush_s1ap::Error> {
        extract_s1ap_ies!(pdu, UEContextReleaseRequest,
            req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
            req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        );
        self.counters.incr("responder_release_requested");
        let Some(index) = self.ue_of(assoc, mme_ue_id, enb_ue_id) else { return Ok(()) };
        let Some(ue) = self.ues[index].as_mut() else { return Ok(()) };
        ue.step = Step::Releasing;
        let stream = ue.stream;
        let cause = Cause::radioNetwork(CauseRadioNetwork::release_due_to_eutran_generated_reason);
        if let Some(d) = s1ap_build::ue_context_release_command(mme_ue_id, enb_ue_id, cause) {
            self.actions.push_back(Send { assoc, stream, data: Bytes::from(d) });
        }
        Ok(())
    }
}
