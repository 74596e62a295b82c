//! ECM-IDLE: the mobile reachable and implicit detach timers (TS 24.301
//! 5.3.7, TS 23.401 4.3.5.2) and the implicit detach they end in.

use crate::mme::Mme;

impl Mme {
    pub(crate) fn on_mobile_reachable_expiry(&mut self, _id: u32) {}

    pub(crate) fn on_implicit_detach_expiry(&mut self, _id: u32) {}
}
