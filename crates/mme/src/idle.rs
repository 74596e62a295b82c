//! ECM-IDLE: the mobile reachable and implicit detach timers (TS 24.301
//! 5.3.7, TS 23.401 4.3.5.2) and the implicit detach they end in.

use crate::context::GuardKind;
use crate::mme::Mme;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The M-TMSIs of recently implicitly detached UEs, so that a later SERVICE
/// REQUEST or TAU with one gets #10 "implicitly detached" (TS 24.301
/// 5.6.1.5, 5.5.3.2.5) rather than #9. Bounded in count and age.
#[derive(Debug, Default)]
pub struct DetachedMemory {
    since: HashMap<u32, Instant>,
    order: VecDeque<(u32, Instant)>,
}

impl DetachedMemory {
    /// Remember `m_tmsi`, forgetting the oldest beyond `max`.
    pub fn insert(&mut self, m_tmsi: u32, now: Instant, max: usize) {
        if max == 0 {
            return;
        }
        self.since.insert(m_tmsi, now);
        self.order.push_back((m_tmsi, now));
        while self.since.len() > max {
            self.pop_oldest();
        }
    }

    /// Whether `m_tmsi` was detached implicitly less than `ttl` ago.
    pub fn contains(&mut self, m_tmsi: u32, now: Instant, ttl: Duration) -> bool {
        while let Some(&(_, t)) = self.order.front() {
            if now.saturating_duration_since(t) < ttl {
                break;
            }
            self.pop_oldest();
        }
        self.since.contains_key(&m_tmsi)
    }

    /// Forget `m_tmsi` (handed out again, or answered).
    pub fn remove(&mut self, m_tmsi: u32) {
        self.since.remove(&m_tmsi);
    }

    pub fn len(&self) -> usize {
        self.since.len()
    }

    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    fn pop_oldest(&mut self) {
        if let Some((m, t)) = self.order.pop_front() {
            // A later insert of the same M-TMSI keeps it.
            if self.since.get(&m) == Some(&t) {
                self.since.remove(&m);
            }
        }
    }
}

impl Mme {
    /// The UE went ECM-IDLE and stays EMM-REGISTERED: the mobile reachable
    /// timer starts (TS 24.301 5.3.7).
    pub(crate) fn start_mobile_reachable(&mut self, id: u32) {
        let period = self.cfg.mobile_reachable();
        self.stop_guard(id, GuardKind::ImplicitDetach);
        self.start_guard(id, GuardKind::MobileReachable, period, 0);
    }

    /// The UE signalled (it is reachable): both timers stop (5.3.7).
    pub(crate) fn ue_reachable(&mut self, id: u32) {
        self.stop_guard(id, GuardKind::MobileReachable);
        self.stop_guard(id, GuardKind::ImplicitDetach);
    }

    /// TS 24.301 5.3.7: at the mobile reachable timer's expiry the network
    /// starts the implicit detach timer (paging is still possible meanwhile).
    pub(crate) fn on_mobile_reachable_expiry(&mut self, id: u32) {
        if self.ues.get(&id).is_some_and(|u| u.s1.is_none()) {
            self.counters.incr("mobile_reachable_expiry");
            let period = Duration::from_secs(self.cfg.implicit_detach_seconds);
            self.start_guard(id, GuardKind::ImplicitDetach, period, 0);
        }
    }

    /// TS 24.301 5.3.7, TS 23.401 5.3.8.3: implicit detach: the PDN
    /// connections are deleted at the S-GW and the context goes, without
    /// signalling to the UE; its M-TMSI is remembered for #10.
    pub(crate) fn on_implicit_detach_expiry(&mut self, id: u32) {
        let Some(ue) = self.ues.get(&id) else { return };
        if ue.s1.is_some() {
            return;
        }
        self.counters.incr("implicit_detach");
        if let Some(g) = ue.guti {
            let (now, max) = (self.now, self.cfg.implicitly_detached_max);
            self.implicitly_detached.insert(g.m_tmsi.0, now, max);
        }
        self.delete_session_detached(id);
        self.remove_ue(id);
    }

    /// Whether a UE with this M-TMSI was detached implicitly lately.
    pub(crate) fn was_implicitly_detached(&mut self, m_tmsi: u32) -> bool {
        let ttl = Duration::from_secs(self.cfg.implicitly_detached_seconds);
        let now = self.now;
        self.implicitly_detached.contains(m_tmsi, now, ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detached_memory_is_bounded_in_count_and_age() {
        let t0 = Instant::now();
        let mut m = DetachedMemory::default();
        for i in 0..10 {
            m.insert(i, t0 + Duration::from_secs(u64::from(i)), 4);
        }
        assert_eq!(m.len(), 4);
        let ttl = Duration::from_secs(100);
        assert!(!m.contains(5, t0 + Duration::from_secs(10), ttl));
        assert!(m.contains(6, t0 + Duration::from_secs(10), ttl));
        // Age: 6 was remembered at t0+6, 9 at t0+9.
        assert!(!m.contains(6, t0 + Duration::from_secs(107), ttl));
        assert!(m.contains(9, t0 + Duration::from_secs(107), ttl));
        assert!(!m.contains(9, t0 + Duration::from_secs(200), ttl));
        assert!(m.is_empty());
    }
}
