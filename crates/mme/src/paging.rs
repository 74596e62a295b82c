//! Network-triggered service request, the MME's part (TS 23.401 5.3.4.3):
//! Downlink Data Notification from the S-GW, S1AP Paging (TS 36.413 8.5)
//! to the eNBs of the UE's TAI list, T3413 (TS 24.301 5.6.2), DDN Failure
//! Indication when paging fails.

use crate::context::{GuardKind, Step};
use crate::mme::{Mme, MmeAction};
use crate::s1ap_build;
use mobicore_common::s11::{
    DdnThrottling, DownlinkDataNotificationAck, DownlinkDataNotificationFailure, GtpCause, S11IncomingAnswer,
    S11IncomingRequest, S11Notification,
};

/// Why a UE is paged; both may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Paging {
    /// A Downlink Data Notification: its failure is reported (5.3.4.3).
    pub ddn: bool,
    /// An operator's detach waits for the UE (TS 24.301 5.5.2.3.1), with
    /// "re-attach required" or not.
    pub detach: Option<bool>,
}

impl Mme {
    /// A request of the S-GW; each gets exactly one answer.
    pub(crate) fn on_s11_incoming(&mut self, txn: u64, request: S11IncomingRequest) {
        match request {
            S11IncomingRequest::DownlinkDataNotification(ddn) => {
                let cause = self.on_ddn(ddn.mme_teid.0, ddn.arp.map(|a| a.priority_level));
                let ack = DownlinkDataNotificationAck {
                    cause,
                    data_notification_delay_ms: None,
                    dl_buffering_duration_s: None,
                    dl_buffering_suggested_packets: None,
                    throttling: self.ddn_throttling(),
                };
                self.push(MmeAction::S11Answer { txn, answer: S11IncomingAnswer::DownlinkDataNotificationAck(ack) });
            }
        }
    }

    /// DOWNLINK DATA NOTIFICATION (TS 23.401 5.3.4.3 steps 2-4): the cause
    /// of the acknowledgement, paging the UE if it is idle.
    fn on_ddn(&mut self, mme_teid: u32, arp_level: Option<u8>) -> GtpCause {
        // The header TEID is the MME's S11 TEID, the MME-UE-S1AP-ID.
        let Some(ue) = self.ues.get(&mme_teid) else {
            self.counters.incr("ddn_context_not_found");
            return GtpCause::CONTEXT_NOT_FOUND;
        };
        if let Step::TauAccept { old_mtmsi, release: true } = ue.step {
            // A TAU from idle is under way on a new S1 connection: the
            // bearers come up on it instead of its release (as with the
            // active flag, TS 23.401 5.3.3.2 step 22).
            self.counters.incr("ddn_during_tau");
            if let Some(u) = self.ues.get_mut(&mme_teid) {
                u.step = Step::TauAccept { old_mtmsi, release: false };
            }
            self.reestablish_bearers(mme_teid);
            return GtpCause::REQUEST_ACCEPTED;
        }
        let mobility = matches!(ue.step, Step::Handover | Step::TauAccept { .. });
        if mobility {
            // 5.3.4.3: the MME may reject while a mobility procedure runs;
            // the S-GW notifies again when it is over.
            self.counters.incr("ddn_rejected_mobility");
            return GtpCause::TEMPORARILY_REJECTED_MOBILITY;
        }
        if matches!(ue.step, Step::ReleaseAccessBearers) {
            // An S1 release under way (TS 23.401 5.3.5): the S-GW buffers
            // from its Release Access Bearers on, and this DDN may overtake
            // the response. The UE is paged once the release is done.
            self.counters.incr("ddn_during_release");
            if let Some(u) = self.ues.get_mut(&mme_teid) {
                u.paging.get_or_insert_with(Paging::default).ddn = true;
            }
            return GtpCause::REQUEST_ACCEPTED;
        }
        if ue.s1.is_some() {
            // Connected (or connecting): the bearers come up without paging.
            self.counters.incr("ddn_ue_connected");
            return GtpCause::REQUEST_ACCEPTED;
        }
        if self.overloaded() && arp_level.zip(self.cfg.ddn_throttling.reject_arp_above).is_some_and(|(l, t)| l > t) {
            // 4.3.7.4.1a: low priority traffic of an idle UE, rejected
            // under load (the S-GW discards what it buffered).
            self.counters.incr("ddn_rejected_low_priority");
            return GtpCause::UNABLE_TO_PAGE_UE;
        }
        self.counters.incr("ddn_received");
        self.page(mme_teid, Paging { ddn: true, detach: None });
        GtpCause::REQUEST_ACCEPTED
    }

    /// More pagings run than `[mme.ddn_throttling] pagings_above`.
    fn overloaded(&self) -> bool {
        self.cfg.ddn_throttling.pagings_above.is_some_and(|n| self.paged.len() > n)
    }

    /// TS 23.401 4.3.7.4.1a: while more pagings run than the configured
    /// threshold, the MME asks the S-GW to throttle the DDNs of its
    /// low-priority bearers.
    fn ddn_throttling(&self) -> Option<DdnThrottling> {
        let t = self.cfg.ddn_throttling;
        if !self.overloaded() {
            return None;
        }
        self.counters.incr("ddn_throttling_requested");
        Some(DdnThrottling { delay_s: t.delay_seconds, factor_percent: t.factor_percent })
    }

    /// Pagings running now (T3413).
    pub fn pagings(&self) -> usize {
        self.paged.len()
    }

    /// Page the idle UE `id` for `why`; a paging that runs already is not
    /// repeated, only given the new reason.
    pub(crate) fn page(&mut self, id: u32, why: Paging) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let running = ue.paging.is_some();
        let p = ue.paging.get_or_insert_with(Paging::default);
        p.ddn |= why.ddn;
        p.detach = p.detach.or(why.detach);
        if running {
            self.counters.incr("paging_already_running");
            return;
        }
        self.paged.insert(id);
        self.send_paging(id);
        self.start_guard(id, GuardKind::T3413, self.cfg.t3413.period(), 0);
    }

    /// S1AP PAGING (TS 36.413 8.5) to every eNB that completed S1 Setup and
    /// serves a TAC of the UE's TAI list (the one it was last given, which
    /// a later connection in another cell does not change).
    fn send_paging(&mut self, id: u32) {
        let Some(ue) = self.ues.get(&id) else { return };
        let (Some(guti), Some(imsi)) = (ue.guti, ue.imsi.as_ref()) else { return };
        // TS 36.304 7.1: UE_ID = IMSI mod 1024.
        let index = imsi.as_str().parse::<u64>().map_or(0, |v| (v % 1024) as u16);
        // TS 23.401 5.3.4.3 step 3a: the eNBs of the tracking areas in which
        // the UE is registered, the list it was given last.
        let tacs = if ue.tai_list.is_empty() { self.tai_list_of(id) } else { ue.tai_list.clone() };
        let paging = s1ap_build::paging(&s1ap_build::PagingData {
            ue_identity_index: index,
            mmec: guti.gummei.mme_code,
            m_tmsi: guti.m_tmsi.0,
            plmn: self.cfg.plmn,
            tacs: &tacs,
        });
        let Some(data) = paging else {
            self.counters.incr("s1ap_encode_error");
            return;
        };
        let mut targets: Vec<_> = self
            .enbs
            .values()
            .filter(|e| e.setup && e.tacs.iter().any(|t| tacs.contains(t)))
            .map(|e| e.assoc)
            .collect();
        targets.sort_by_key(|a| a.0);
        if targets.is_empty() {
            self.counters.incr("paging_no_enb");
        }
        for assoc in targets {
            self.counters.incr("paging_sent");
            // Non UE-associated signalling: stream 0 (TS 36.412 7).
            self.push_s1(assoc, 0, Some(data.clone()));
        }
    }

    /// The TACs of a new TAI list for the UE (ATTACH and TAU ACCEPT): the
    /// served ones, and the one of the cell it is in, so that it need not
    /// update where it registered (TS 23.401 4.3.5.3).
    pub(crate) fn tai_list_of(&self, id: u32) -> Vec<u16> {
        let mut tacs = self.cfg.served_tacs.clone();
        if tacs.is_empty() {
            tacs.push(1);
        }
        let current = self.ues.get(&id).and_then(|u| u.tai).filter(|t| t.plmn == self.cfg.plmn);
        if let Some(t) = current {
            if !tacs.contains(&t.tac) {
                tacs.push(t.tac);
            }
        }
        // TS 24.301 9.9.3.33: at most 16 TAIs in a list of one PLMN.
        tacs.truncate(16);
        tacs
    }

    /// The UE answered (SERVICE REQUEST, TAU, attach, detach): T3413 stops
    /// (TS 24.301 5.6.2.2.1); what the paging was for is returned.
    pub(crate) fn paging_answered(&mut self, id: u32) -> Option<Paging> {
        self.stop_guard(id, GuardKind::T3413);
        self.paged.remove(&id);
        let p = self.ues.get_mut(&id)?.paging.take();
        if p.is_some() {
            self.counters.incr("paging_answered");
        }
        p
    }

    /// T3413 expired (TS 24.301 5.6.2.2.2): page again, or after the last
    /// attempt give up: DDN Failure Indication (TS 23.401 5.3.4.3 step 5,
    /// cause UE not responding) for each PDN connection, and a detach that
    /// waited is done locally (5.5.2.3.1).
    pub(crate) fn on_t3413_expiry(&mut self, id: u32, count: u8) {
        let Some(ue) = self.ues.get(&id) else { return };
        if ue.s1.is_some() || ue.paging.is_none() {
            return;
        }
        if count < self.cfg.t3413.max_retransmissions {
            self.counters.incr("paging_repeated");
            self.send_paging(id);
            self.start_guard(id, GuardKind::T3413, self.cfg.t3413.period(), count + 1);
            return;
        }
        self.counters.incr("paging_failed");
        self.paged.remove(&id);
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let why = ue.paging.take().unwrap_or_default();
        if why.ddn {
            let teids: Vec<_> = ue.sessions.iter().map(|s| s.sgw_s11.teid).collect();
            for sgw_teid in teids {
                self.counters.incr("ddn_failure_indication");
                let failure = DownlinkDataNotificationFailure { sgw_teid, cause: GtpCause::UE_NOT_RESPONDING };
                let notification = S11Notification::DownlinkDataNotificationFailure(failure);
                self.push(MmeAction::S11Notify { notification });
            }
        }
        if why.detach.is_some() {
            self.counters.incr("network_detach_local");
            self.delete_session_detached(id);
            self.remove_ue(id);
        }
    }
}
