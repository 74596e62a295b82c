//! Network-triggered service request, the S-GW's part (TS 23.401 5.3.4.3):
//! the UPF reports the first downlink packet of an idle session (Session
//! Report, Downlink Data Report, TS 29.244 5.2.4.1); we send a Downlink
//! Data Notification to the MME (TS 29.274 7.2.11.1), at most one per
//! session at a time, and honour its Acknowledge: Data Notification Delay
//! and DL Buffering Duration hold the next notification back (5.3.4.2),
//! "temporarily rejected" during a handover or TAU starts a guard after
//! which the buffer goes unless a Modify Bearer came (5.3.4.3), other
//! rejections discard the buffer. A DDN Failure Indication (paging failed)
//! discards it too. Discarding is a Session Modification that turns the
//! downlink FAR to DROP, then back to BUFF + NOCP so that the next packet
//! is reported again.
//!
//! Throttling (TS 23.401 4.3.7.4.1a): an MME under load puts the DL low
//! priority traffic Throttling IE in its Acknowledge; for its delay, the
//! given share of the notifications of its low-priority bearers (ARP
//! priority level above `ddn_low_priority_arp_above`) is not sent and
//! their buffer is discarded. Which ones is decided by a running share,
//! not by chance: with a factor of f percent, exactly f of every 100 in a
//! row are dropped.

use crate::context::{Paging, SessionState};
use crate::core::{PfcpOp, SpgwcCore};
use crate::sxa_build::{self as sxa, msg};
use mobicore_common::s11::{
    DdnThrottling, DownlinkDataNotification, GtpCause, S11IncomingAnswer, S11IncomingRequest, S11Notification,
};
use mobicore_gtp::message::GtpMessage;
use mobicore_gtp::s11::{decode_incoming_answer, decode_notification, encode_incoming_request};
use std::cmp::Reverse;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// TS 29.274 8.4: "Temporarily rejected due to handover/TAU/RAU procedure
/// in progress".
const TEMPORARILY_REJECTED_MOBILITY: GtpCause = GtpCause(110);

/// The throttling one MME asked for (TS 23.401 4.3.7.4.1a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throttling {
    /// The end of the Throttling Delay.
    until: Instant,
    /// Throttling Factor, 1..=100 percent.
    factor: u8,
    /// Running share of low-priority notifications, in percent: each adds
    /// the factor, and one is dropped each time it reaches 100.
    credit: u16,
}

impl SpgwcCore {
    /// A Downlink Data Report for the session of our S11 TEID `teid`.
    pub(crate) fn on_downlink_data(&mut self, now: Instant, teid: u32) {
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        if s.paging.ddn_seq.is_some() {
            // One notification at a time (5.3.4.3 step 2).
            self.counters.incr("ddn_already_sent");
            return;
        }
        if s.paging.hold_until.is_some_and(|t| t > now) {
            s.paging.report_pending = true;
            self.counters.incr("ddn_held");
            return;
        }
        self.notify(now, teid);
    }

    /// Send the DDN of session `teid`, unless its MME's throttling drops
    /// it: then the buffered downlink goes instead (4.3.7.4.1a).
    fn notify(&mut self, now: Instant, teid: u32) {
        if self.throttled(now, teid) {
            self.counters.incr("ddn_throttled");
            self.discard_buffer(now, teid);
            return;
        }
        self.send_ddn(now, teid);
    }

    /// Whether the next notification of session `teid` is one its MME's
    /// throttling drops: never for a bearer that is not low priority.
    fn throttled(&mut self, now: Instant, teid: u32) -> bool {
        let Some(s) = self.sessions.get(&teid) else { return false };
        if s.arp.priority_level <= self.cfg.ddn_low_priority_arp_above {
            return false;
        }
        let mme = s.mme_s11_addr.ip();
        let Some(t) = self.ddn_throttling.get_mut(&mme) else { return false };
        if t.until <= now {
            // "The SGW resumes normal operations at the expiry of the
            // throttling delay."
            self.ddn_throttling.remove(&mme);
            self.counters.incr("ddn_throttling_ended");
            return false;
        }
        t.credit += u16::from(t.factor);
        if t.credit < 100 {
            return false;
        }
        t.credit -= 100;
        true
    }

    /// The Throttling IE of `mme`'s Acknowledge: it supersedes the one
    /// before and restarts the delay; a zero delay or factor ends it.
    fn set_throttling(&mut self, now: Instant, mme: IpAddr, t: DdnThrottling) {
        if t.delay_s == 0 || t.factor_percent == 0 {
            if self.ddn_throttling.remove(&mme).is_some() {
                self.counters.incr("ddn_throttling_ended");
            }
            return;
        }
        self.counters.incr("ddn_throttling_received");
        // Entries: one per MME with sessions here, gone when it ends.
        let credit = self.ddn_throttling.get(&mme).map_or(0, |o| o.credit);
        let until = now + Duration::from_secs(u64::from(t.delay_s));
        self.ddn_throttling.insert(mme, Throttling { until, factor: t.factor_percent.min(100), credit });
    }

    fn send_ddn(&mut self, now: Instant, teid: u32) {
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        let req = S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
            mme_teid: s.mme_s11.teid,
            ebi: Some(s.ebi),
            arp: Some(s.arp),
        });
        let seq = self.s11.next_seq();
        let bytes = encode_incoming_request(&req, Some(s.sgw_s11), seq).to_bytes();
        s.paging = Paging { ddn_seq: Some(seq), ..Paging::default() };
        let to = s.mme_s11_addr;
        self.counters.incr("ddn_sent");
        self.s11.send_request(now, to, seq, bytes, teid);
    }

    /// A response on S11 (the only request we send is the DDN).
    pub(crate) fn on_s11_response(&mut self, now: Instant, peer: SocketAddr, m: &GtpMessage) {
        let Some(teid) = self.s11.on_response(peer, m.seq, m.body.msg_type()) else {
            self.counters.incr("s11_unexpected_response");
            return;
        };
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        if s.paging.ddn_seq != Some(m.seq) {
            return;
        }
        s.paging.ddn_seq = None;
        let ack = match decode_incoming_answer(m) {
            Ok(S11IncomingAnswer::DownlinkDataNotificationAck(a)) => a,
            Err(_) => {
                self.counters.incr("ddn_ack_malformed");
                return;
            }
        };
        if let Some(t) = ack.throttling {
            self.set_throttling(now, peer.ip(), t);
        }
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        let hold = |s: &mut crate::context::Session, d: Duration, discard: bool| {
            s.paging.hold_until = Some(now + d);
            s.paging.discard_at_hold_end = discard;
        };
        match ack.cause {
            c if c.is_accepted() => {
                self.counters.incr("ddn_acknowledged");
                // 5.3.4.2: no further DDN for the delay; a DL Buffering
                // Duration (a UE in power saving) holds longer and ends
                // with the buffer discarded.
                if let Some(secs) = ack.dl_buffering_duration_s.filter(|&s| s > 0) {
                    hold(s, Duration::from_secs(u64::from(secs.min(86_400))), true);
                } else if let Some(ms) = ack.data_notification_delay_ms.filter(|&ms| ms > 0) {
                    hold(s, Duration::from_millis(u64::from(ms)), false);
                }
            }
            TEMPORARILY_REJECTED_MOBILITY => {
                self.counters.incr("ddn_temporarily_rejected");
                let guard = self.cfg.ddn_guard;
                hold(s, guard, true);
            }
            _ => {
                self.counters.incr("ddn_rejected");
                self.discard_buffer(now, teid);
                return;
            }
        }
        self.arm_hold(teid);
    }

    /// The DDN went unanswered (T3 x N3).
    pub(crate) fn on_ddn_timeout(&mut self, teid: u32) {
        self.counters.incr("ddn_timeout");
        if let Some(s) = self.sessions.get_mut(&teid) {
            s.paging.ddn_seq = None;
        }
    }

    /// Downlink Data Notification Failure Indication (TS 29.274 7.2.11.3):
    /// paging failed; the buffered downlink goes. Only the MME that owns
    /// the session is heard.
    pub(crate) fn on_ddn_failure(&mut self, now: Instant, peer: SocketAddr, m: &GtpMessage) {
        let Ok(S11Notification::DownlinkDataNotificationFailure(f)) = decode_notification(m) else {
            self.counters.incr("gtp_malformed");
            return;
        };
        let owned = self.sessions.get(&f.sgw_teid.0).is_some_and(|s| s.owned_by(peer.ip()));
        if !owned {
            self.counters.incr("ddn_failure_unknown_context");
            return;
        }
        self.counters.incr("ddn_failure_indication");
        self.discard_buffer(now, f.sgw_teid.0);
    }

    /// The UE is reachable again (Modify Bearer) or released (Release
    /// Access Bearers): the notification state starts afresh.
    pub(crate) fn paging_reset(&mut self, teid: u32) {
        if let Some(s) = self.sessions.get_mut(&teid) {
            if let Some(seq) = s.paging.ddn_seq {
                self.s11.cancel(seq);
            }
            s.paging = Paging::default();
        }
    }

    fn arm_hold(&mut self, teid: u32) {
        if let Some(t) = self.sessions.get(&teid).and_then(|s| s.paging.hold_until) {
            self.paging_holds.push(Reverse((t, teid)));
        }
    }

    /// Holds that ended by `now`: a discard, or the notification that
    /// waited.
    pub(crate) fn paging_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((t, teid))) = self.paging_holds.peek() {
            if t > now {
                break;
            }
            self.paging_holds.pop();
            let Some(s) = self.sessions.get_mut(&teid) else { continue };
            if s.paging.hold_until != Some(t) {
                continue; // superseded
            }
            let p = std::mem::take(&mut s.paging);
            if p.discard_at_hold_end {
                self.counters.incr("ddn_hold_discarded");
                self.discard_buffer(now, teid);
            } else if p.report_pending {
                self.notify(now, teid);
            }
        }
    }

    pub(crate) fn paging_poll_timeout(&self) -> Option<Instant> {
        self.paging_holds.peek().map(|Reverse((t, _))| *t)
    }

    /// Discard what the UPF buffers for the session and buffer afresh.
    fn discard_buffer(&mut self, now: Instant, teid: u32) {
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        s.paging = Paging::default();
        // A Modify Bearer in flight (or done) forwards the buffer instead;
        // a DROP now could land after its FORW.
        if s.state != SessionState::Active || s.s1u_enb.is_some() {
            return;
        }
        let (upf, up_seid, seid) = (s.upf, s.up_seid, s.cp_seid);
        let to = self.cfg.upfs[upf].pfcp;
        self.counters.incr("downlink_buffer_discarded");
        let op = PfcpOp::DiscardBuffer { teid, seid };
        self.pfcp_request(now, to, msg::SESSION_MODIFICATION_REQUEST, up_seid, &sxa::discard_downlink(), op);
    }

    /// The DROP of [`Self::discard_buffer`] is done: buffer and report again,
    /// unless the session was made reachable meanwhile (its FAR forwards).
    pub(crate) fn rearm_buffer(&mut self, now: Instant, teid: u32) {
        let Some(s) = self.sessions.get(&teid) else { return };
        if s.state != SessionState::Active || s.s1u_enb.is_some() {
            return;
        }
        let (upf, up_seid, seid) = (s.upf, s.up_seid, s.cp_seid);
        let to = self.cfg.upfs[upf].pfcp;
        let op = PfcpOp::RearmBuffer { teid, seid };
        self.pfcp_request(now, to, msg::SESSION_MODIFICATION_REQUEST, up_seid, &sxa::buffer_downlink(), op);
    }
}
