//! Handing a session's downlink from the slow path back to the XDP fast
//! path without reordering (TS 29.244 5.2.1: buffered packets are
//! forwarded in order when the FAR turns to FORW).
//!
//! The slow path releases a session's buffer into its transmit queue when
//! the FAR turns FORW; its I/O task sends that queue a moment later. Were
//! the fast path switched at once, a packet arriving meanwhile would leave
//! by XDP ahead of the released ones. So a FAR that buffered stays BUFF in
//! the fast path (its packets keep reaching the slow path, over AF_XDP or
//! the TUN device, and leave behind the released ones) until a flush of the
//! I/O task that started after the release has finished; then the fast
//! path gets the full rules ([`Handover::poll`], driven by the reports
//! wake-up the I/O task sends after that flush). Packets still in an
//! AF_XDP ring at the switch are not overtaken: the program sends the
//! session's next packets behind them until the I/O task has sent them
//! ([`crate::xdp::order`]). With that count in place and nothing buffered,
//! the fast path switches at once, the slow path first.
//!
//! A path switch (FORW to FORW on another tunnel) goes the other way
//! round: the fast path switches first, then the slow path queues the End
//! Marker, and the I/O task sends it only after an RCU grace period
//! ([`super::io::end_marker_gate`]), so it leaves behind every G-PDU an
//! XDP run sent on the old tunnel (the handover target waits for it).

use super::UserspacePlane;
use crate::rules::{Action, ForwardingPlane, PlaneError, SessionRules};
use std::collections::HashMap;

/// The sessions whose fast path still buffers, with the rules it gets once
/// the slow path has flushed.
#[derive(Debug, Default)]
pub struct Handover {
    /// up_seid -> (full rules, the I/O flush count that must be passed).
    pending: HashMap<u64, (SessionRules, u64)>,
}

/// `rules` with every FAR of `buffering` that now forwards kept buffering.
fn holding(rules: &SessionRules, buffering: &[u32]) -> SessionRules {
    let mut held = rules.clone();
    for id in buffering {
        if let Some(f) = held.fars.get_mut(id) {
            if f.action.forw && !f.action.buff {
                f.action = Action { buff: true, ..Action::default() };
            }
        }
    }
    held
}

impl Handover {
    pub fn new() -> Self {
        Handover::default()
    }

    /// Sessions waiting for their fast-path switch.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Updates both planes, the fast path first: the slow path queues the
    /// End Markers of changed tunnels (TS 29.281 7.3.2), and they must
    /// follow every packet the fast path sent on the old tunnel; the I/O
    /// task lets an RCU grace period pass before it sends them, so no XDP
    /// run that read the old rules is still under way ([`end_marker_gate`]).
    /// FARs that buffered keep buffering in the fast path until
    /// [`Handover::poll`] finds the slow path's release flushed; with
    /// nothing buffered and the slow path's packets counted
    /// ([`UserspacePlane::in_order`]) they forward at once.
    ///
    /// [`end_marker_gate`]: super::io::end_marker_gate
    pub fn update(
        &mut self,
        user: &mut UserspacePlane,
        fast: &mut dyn ForwardingPlane,
        up_seid: u64,
        rules: &SessionRules,
    ) -> Result<(), PlaneError> {
        let held = {
            let mut core = user.lock();
            core.check_update(up_seid, rules)?;
            let buffering: Vec<u32> = core
                .sessions
                .get(&up_seid)
                .map_or_else(Vec::new, |s| s.rules.fars.values().filter(|f| f.action.buff).map(|f| f.id).collect());
            let held = holding(rules, &buffering);
            if held != *rules && core.buffered(up_seid).0 == 0 && user.in_order() {
                // Nothing to release: the slow path turns first, under the
                // same lock as the check (no packet can be buffered in
                // between); what it still holds of the session (ring,
                // transmit queue) is counted, and the fast path sends the
                // session's packets behind it ([`crate::xdp::order`]).
                core.update(std::time::Instant::now(), up_seid, rules)?;
                drop(core);
                self.pending.remove(&up_seid);
                user.notified().notify_one();
                return fast.update(up_seid, rules);
            }
            held
        };
        self.pending.remove(&up_seid);
        fast.update(up_seid, &held)?;
        user.update(up_seid, rules)?;
        if held == *rules {
            return Ok(());
        }
        // The count read after the release: a flush that finishes beyond
        // it started after the release was queued (it may be the one
        // already running, then the next one counts).
        let started = user.flushes_started();
        self.pending.insert(up_seid, (rules.clone(), started));
        user.want_flush_ack(true);
        Ok(())
    }

    /// Gives the fast path the full rules of every session whose release
    /// the slow path has flushed.
    pub fn poll(&mut self, user: &UserspacePlane, fast: &mut dyn ForwardingPlane) {
        let done = user.flushes_done();
        self.pending.retain(|seid, (rules, started)| {
            if done > *started {
                if let Err(e) = fast.update(*seid, rules) {
                    tracing::warn!(up_seid = seid, error = %e, "fast path switch after the buffer release failed");
                }
                false
            } else {
                true
            }
        });
        if self.pending.is_empty() {
            user.want_flush_ack(false);
        }
    }

    /// Forgets a removed session.
    pub fn remove(&mut self, up_seid: u64) {
        self.pending.remove(&up_seid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Far, MemoryPlane};

    fn rules(a: Action) -> SessionRules {
        let mut r = SessionRules::default();
        r.fars.insert(2, Far { id: 2, action: a, ..Far::default() });
        r.fars.insert(1, Far { id: 1, action: Action { forw: true, ..Action::default() }, ..Far::default() });
        r
    }

    /// Both planes with session 1 buffering (FAR 2), nothing buffered yet;
    /// and the session's rules once FAR 2 forwards.
    fn buffering(in_order: bool) -> (UserspacePlane, MemoryPlane, SessionRules) {
        let mut user = UserspacePlane::new(Default::default(), Default::default());
        user.set_in_order(in_order);
        let mut fast = MemoryPlane::new();
        let buff = rules(Action { buff: true, nocp: true, ..Action::default() });
        user.install(1, &buff).unwrap();
        fast.install(1, &buff).unwrap();
        (user, fast, rules(Action { forw: true, ..Action::default() }))
    }

    #[test]
    fn a_far_that_buffered_stays_buffering_in_the_fast_path_until_the_flush() {
        let (mut user, mut fast, forw) = buffering(false);
        let mut h = Handover::new();
        h.update(&mut user, &mut fast, 1, &forw).unwrap();
        assert_eq!(h.pending(), 1);
        let now = fast.get(1).unwrap();
        assert!(now.fars[&2].action.buff && !now.fars[&2].action.forw, "held: {:?}", now.fars[&2]);
        assert!(now.fars[&1].action.forw, "other FARs take the new rules at once");
        h.poll(&user, &mut fast);
        assert_eq!(h.pending(), 1, "no flush yet");
        user.flush_started();
        user.flush_done();
        h.poll(&user, &mut fast);
        assert_eq!(h.pending(), 0);
        assert_eq!(fast.get(1).unwrap(), forw);
    }

    #[test]
    fn with_nothing_buffered_and_the_slow_path_counted_the_fast_path_forwards_at_once() {
        let (mut user, mut fast, forw) = buffering(true);
        let mut h = Handover::new();
        h.update(&mut user, &mut fast, 1, &forw).unwrap();
        assert_eq!(h.pending(), 0);
        assert_eq!(fast.get(1).unwrap(), forw);
        assert_eq!(user.lock().sessions[&1].rules, forw);
    }

    #[test]
    fn a_flush_already_running_at_the_release_does_not_count() {
        let mut user = UserspacePlane::new(Default::default(), Default::default());
        let mut fast = MemoryPlane::new();
        let buff = rules(Action { buff: true, ..Action::default() });
        let forw = rules(Action { forw: true, ..Action::default() });
        user.install(1, &buff).unwrap();
        fast.install(1, &buff).unwrap();
        user.flush_started(); // took the queue before the release
        let mut h = Handover::new();
        h.update(&mut user, &mut fast, 1, &forw).unwrap();
        user.flush_done();
        h.poll(&user, &mut fast);
        assert_eq!(h.pending(), 1);
        user.flush_started();
        user.flush_done();
        h.poll(&user, &mut fast);
        assert_eq!(h.pending(), 0);
    }

    #[test]
    fn updates_without_a_buffering_far_go_straight_through() {
        let mut user = UserspacePlane::new(Default::default(), Default::default());
        let mut fast = MemoryPlane::new();
        let forw = rules(Action { forw: true, ..Action::default() });
        user.install(1, &forw).unwrap();
        fast.install(1, &forw).unwrap();
        let mut h = Handover::new();
        let drop = rules(Action { drop: true, ..Action::default() });
        h.update(&mut user, &mut fast, 1, &drop).unwrap();
        assert_eq!(h.pending(), 0);
        assert_eq!(fast.get(1).unwrap(), drop);
        // BUFF -> BUFF (nothing to release yet) also goes through.
        let buff = rules(Action { buff: true, ..Action::default() });
        h.update(&mut user, &mut fast, 1, &buff).unwrap();
        h.update(&mut user, &mut fast, 1, &buff).unwrap();
        assert_eq!(h.pending(), 0);
    }

    /// A fast path that records, at each update, how many End Markers the
    /// slow path had queued by then.
    struct Watching {
        user: UserspacePlane,
        plane: MemoryPlane,
        end_markers_queued: Vec<usize>,
    }

    impl ForwardingPlane for Watching {
        fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
            self.plane.install(up_seid, rules)
        }
        fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
            let queued = self.user.lock().transmits.iter().filter(|t| t.is_end_marker()).count();
            self.end_markers_queued.push(queued);
            self.plane.update(up_seid, rules)
        }
        fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
            self.plane.remove(up_seid)
        }
    }

    #[test]
    fn a_path_switch_moves_the_fast_path_before_the_end_marker_is_queued() {
        use crate::rules::GtpuTunnel;
        let mut user = UserspacePlane::new(Default::default(), Default::default());
        let to = |teid, last| {
            let mut r = rules(Action { forw: true, ..Action::default() });
            r.fars.get_mut(&1).unwrap().outer_header_creation =
                Some(GtpuTunnel { teid, ipv4: std::net::Ipv4Addr::new(10, 0, 0, last) });
            r
        };
        user.install(1, &to(0x100, 1)).unwrap();
        let mut fast = Watching { user: user.clone(), plane: MemoryPlane::new(), end_markers_queued: vec![] };
        fast.install(1, &to(0x100, 1)).unwrap();
        let mut h = Handover::new();
        h.update(&mut user, &mut fast, 1, &to(0x200, 2)).unwrap();
        assert_eq!(fast.end_markers_queued, [0], "the fast path switched after the End Marker was queued");
        let queued: Vec<_> = std::iter::from_fn(|| user.lock().poll_transmit()).collect();
        assert!(matches!(&queued[..], [t] if t.is_end_marker()), "{queued:?}");
        // A refused update changes neither plane.
        let mut clash = to(0x300, 3);
        clash.pdrs = Default::default();
        assert!(h.update(&mut user, &mut fast, 99, &clash).is_err());
        assert_eq!(fast.end_markers_queued.len(), 1);
        assert_eq!(fast.plane.get(1).unwrap(), to(0x200, 2));
    }
}
