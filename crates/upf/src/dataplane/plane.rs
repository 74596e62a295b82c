//! [`UserspacePlane`]: the handle the PFCP node programs. The packet core
//! sits behind a mutex shared with the I/O task; every rule change wakes
//! that task so released packets and End Markers go out at once.

use super::{DatapathConfig, UserPlane};
use crate::rules::{ForwardingPlane, PlaneError, PlaneReport, SessionRules};
use mobicore_common::counters::Counters;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;

/// A cloneable handle on one [`UserPlane`].
#[derive(Clone)]
pub struct UserspacePlane {
    core: Arc<Mutex<UserPlane>>,
    /// Woken when the core has something to send (released packets, End
    /// Markers) or to report.
    pub(crate) wake: Arc<Notify>,
    /// Woken when reports for the PFCP node are waiting.
    pub(crate) reports_ready: Arc<Notify>,
    /// Flushes of the I/O task started / finished, and whether a finished
    /// one should wake the PFCP node (a fast-path switch waits on it,
    /// see [`super::handover`]).
    flushes: Arc<[AtomicU64; 2]>,
    flush_ack: Arc<AtomicBool>,
    /// An XDP fast path forwards beside this plane: End Markers wait for
    /// a grace period ([`super::io::end_marker_gate`]).
    fast_path: Arc<AtomicBool>,
    /// Whether the fast path's packets wait behind the slow path's own
    /// ([`crate::xdp::order`]: AF_XDP sockets with the program's counts).
    in_order: Arc<AtomicBool>,
}

impl UserspacePlane {
    pub fn new(cfg: DatapathConfig, counters: Counters) -> Self {
        UserspacePlane {
            core: Arc::new(Mutex::new(UserPlane::new(cfg, counters))),
            wake: Arc::new(Notify::new()),
            reports_ready: Arc::new(Notify::new()),
            flushes: Arc::new([AtomicU64::new(0), AtomicU64::new(0)]),
            flush_ack: Arc::new(AtomicBool::new(false)),
            fast_path: Arc::new(AtomicBool::new(false)),
            in_order: Arc::new(AtomicBool::new(false)),
        }
    }
    /// Whether an XDP fast path forwards beside this plane.
    pub fn set_fast_path(&self, on: bool) {
        self.fast_path.store(on, Ordering::Release);
    }
    pub fn fast_path(&self) -> bool {
        self.fast_path.load(Ordering::Acquire)
    }
    /// Set by the I/O task that takes what the program hands it off the
    /// program's counts ([`crate::xdp::order`]).
    pub fn set_in_order(&self, on: bool) {
        self.in_order.store(on, Ordering::Release);
    }
    pub fn in_order(&self) -> bool {
        self.in_order.load(Ordering::Acquire)
    }
    /// The I/O task takes the transmit queue (call with the core locked).
    pub fn flush_started(&self) {
        self.flushes[0].fetch_add(1, Ordering::AcqRel);
    }
    /// The I/O task has sent what it took.
    pub fn flush_done(&self) {
        self.flushes[1].fetch_add(1, Ordering::AcqRel);
        if self.flush_ack.load(Ordering::Acquire) {
            self.reports_ready.notify_one();
        }
    }
    pub fn flushes_started(&self) -> u64 {
        self.flushes[0].load(Ordering::Acquire)
    }
    pub fn flushes_done(&self) -> u64 {
        self.flushes[1].load(Ordering::Acquire)
    }
    /// Whether finished flushes wake the PFCP node.
    pub fn want_flush_ack(&self, on: bool) {
        self.flush_ack.store(on, Ordering::Release);
    }
    /// The packet core (for the I/O shell and tests).
    pub fn lock(&self) -> MutexGuard<'_, UserPlane> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Woken when there is output after a rule change.
    pub fn notified(&self) -> Arc<Notify> {
        self.wake.clone()
    }
    /// Woken when reports for the PFCP node are waiting.
    pub fn reports_ready(&self) -> Arc<Notify> {
        self.reports_ready.clone()
    }
}

impl ForwardingPlane for UserspacePlane {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.lock().install(up_seid, rules)
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        let r = self.lock().update(Instant::now(), up_seid, rules);
        self.wake.notify_one();
        r
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        self.lock().remove(up_seid)
    }
    fn poll_report(&mut self) -> Option<PlaneReport> {
        self.lock().poll_report()
    }
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<crate::urr::UsageCounts> {
        self.lock().urr_counts(up_seid, urr_id)
    }
}
