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
//! wake-up the I/O task sends after that flush). Left: packets already in
//! an AF_XDP ring at the moment of the switch may still be overtaken (a
//! window of one I/O iteration, not of a whole release).

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

    /// Updates both planes, the slow path first (it releases and sends
    /// End Markers); FARs that buffered keep buffering in the fast path
    /// until [`Handover::poll`] finds the release flushed.
    pub fn update(
        &mut self,
        user: &mut UserspacePlane,
        fast: &mut dyn ForwardingPlane,
        up_seid: u64,
        rules: &SessionRules,
    ) -> Result<(), PlaneError> {
        let buffering: Vec<u32> = {
            let core = user.lock();
            core.sessions
                .get(&up_seid)
                .map_or_else(Vec::new, |s| s.rules.fars.values().filter(|f| f.action.buff).map(|f| f.id).collect())
        };
        user.update(up_seid, rules)?;
        // The count read after the release: a flush that finishes beyond
        // it started after the release was queued (it may be the one
        // already running, then the next one counts).
        let started = user.flushes_started();
        self.pending.remove(&up_seid);
        let held = holding(rules, &buffering);
        if held == *rules {
            return fast.update(up_seid, rules);
        }
        fast.update(up_seid, &held)?;
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

    #[test]
    fn a_far_that_buffered_stays_buffering_in_the_fast_path_until_the_flush() {
        let mut user = UserspacePlane::new(Default::default(), Default::default());
        let mut fast = MemoryPlane::new();
        let buff = rules(Action { buff: true, nocp: true, ..Action::default() });
        let forw = rules(Action { forw: true, ..Action::default() });
        user.install(1, &buff).unwrap();
        fast.install(1, &buff).unwrap();
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
}
