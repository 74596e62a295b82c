//! ECM-IDLE on the UE side: the NAS signalling connection, T3412 (periodic
//! tracking area updating, TS 24.301 5.3.5), the cell the UE camps on, and
//! the attach a UE owes the network after a reject or a detach that asks
//! for one.
//!
//! The eNB tells the UE when its connection is established
//! ([`Ue::connection_established`]) and released ([`Ue::connection_released`]);
//! it reads [`Ue::t3412_deadline`] to wake the UE for its periodic TAU,
//! [`Ue::s_tmsi`] and [`Ue::establishment_cause`] for the INITIAL UE
//! MESSAGE, and [`Ue::take_reattach`] after a release.

use std::time::{Duration, Instant};

use oxirush_nas::nas_eps::{NasT3412Value, Tai};

use super::{EmmState, Procedure, Ue, Waiting};

/// The UE's idle-mode state.
#[derive(Debug, Clone, Default)]
pub struct IdleState {
    /// A NAS signalling connection exists (EMM-CONNECTED, TS 24.301 5.1.4).
    pub(super) connected: bool,
    /// T3412 as the network gave it (ATTACH / TAU ACCEPT); `None` when
    /// deactivated or not given.
    pub(super) t3412: Option<Duration>,
    /// When T3412 expires; running only in EMM-IDLE.
    pub(super) t3412_deadline: Option<Instant>,
    /// An attach is due once the connection is released (TS 24.301
    /// 5.5.2.3.2 re-attach required, 5.6.1.5 / 5.5.3.2.5 #9, #10, #40).
    pub(super) reattach: bool,
    /// The TAI of the cell the UE camps on.
    pub(super) cell: Option<Tai>,
    /// The last visited registered TAI (TS 24.301 5.5.3.2.2).
    pub(super) last_visited: Option<Tai>,
}

/// The RRC establishment cause a UE gives for a new connection, per the
/// NAS procedure that needs it (TS 24.301 Annex D, TS 36.331 6.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RrcCause {
    #[default]
    MoSignalling,
    MoData,
    MtAccess,
}

impl Ue {
    /// Whether the UE has a NAS signalling connection (ECM-CONNECTED).
    pub fn is_connected(&self) -> bool {
        self.idle.connected
    }

    /// Registered and without a connection: ECM-IDLE, EMM-REGISTERED.
    pub fn is_idle(&self) -> bool {
        !self.idle.connected && self.emm == EmmState::Registered
    }

    /// The eNB set up an RRC connection and an S1 connection for the UE:
    /// EMM-CONNECTED; T3412 stops (TS 24.301 5.3.5).
    pub fn connection_established(&mut self) {
        self.idle.connected = true;
        self.idle.t3412_deadline = None;
    }

    /// Back in EMM-IDLE: T3412 restarts with its last value if the UE is
    /// registered (TS 24.301 5.3.5).
    pub(super) fn released_to_idle(&mut self, now: Instant) {
        self.idle.connected = false;
        self.idle.t3412_deadline = match (self.emm, self.idle.t3412) {
            (EmmState::Registered, Some(t)) => Some(now + t),
            _ => None,
        };
    }

    /// T3412 as given by the network.
    pub fn t3412(&self) -> Option<Duration> {
        self.idle.t3412
    }

    /// When the running T3412 expires (only in EMM-IDLE).
    pub fn t3412_deadline(&self) -> Option<Instant> {
        self.idle.t3412_deadline
    }

    /// Keep T3412 from ATTACH ACCEPT or TAU ACCEPT (TS 24.301 5.3.5): a
    /// deactivated timer means no periodic updating.
    pub(super) fn set_t3412(&mut self, value: &NasT3412Value) {
        self.idle.t3412 = value.to_seconds().filter(|s| *s > 0).map(Duration::from_secs);
    }

    /// The UE camps on a cell of TAI `tai`.
    pub fn camp(&mut self, tai: Tai) {
        self.idle.cell = Some(tai);
    }

    /// The TAI of the cell the UE camps on.
    pub fn cell(&self) -> Option<Tai> {
        self.idle.cell
    }

    /// A registered UE in a cell of `tac` (of the PLMN of the cell it camps
    /// on) outside its TAI list must update its tracking area (TS 24.301
    /// 5.5.3.2.2 a).
    pub fn needs_tau(&self, tac: u16) -> bool {
        let plmn = self.idle.cell.map(|c| c.plmn());
        self.emm == EmmState::Registered
            && !self.tais.iter().any(|t| t.tac() == tac && plmn.is_none_or(|p| p == t.plmn()))
    }

    /// The S-TMSI (MMEC, M-TMSI) of the UE's GUTI, which NAS gives the
    /// lower layers for every initial message of a registered UE (TS 24.301
    /// 5.6.1.2, 5.5.3.2.2), none for an attach.
    pub fn s_tmsi(&self) -> Option<(u8, u32)> {
        if self.procedure() == Some(Procedure::Attach) || self.emm == EmmState::Deregistered {
            return None;
        }
        self.guti.map(|g| (g.mme_code(), g.m_tmsi()))
    }

    /// The RRC establishment cause of the procedure the UE opens a
    /// connection for (TS 24.301 Annex D.1.1).
    pub fn establishment_cause(&self) -> RrcCause {
        match self.procedure() {
            Some(Procedure::ServiceRequest) => RrcCause::MoData,
            Some(Procedure::PagingResponse) => RrcCause::MtAccess,
            _ => RrcCause::MoSignalling,
        }
    }

    /// Whether an attach is due (the eNB starts it once the UE is idle).
    pub fn wants_reattach(&self) -> bool {
        self.idle.reattach
    }

    /// Take the pending attach, if any.
    pub fn take_reattach(&mut self) -> bool {
        std::mem::take(&mut self.idle.reattach)
    }

    /// The eNB set up the UE's bearers (INITIAL CONTEXT SETUP done): the
    /// end of a service request (TS 24.301 5.6.1.4: the user plane radio
    /// bearers set up) or of a TAU with the active flag.
    pub fn context_setup(&mut self, now: Instant) {
        if self.waiting().is_some_and(|(_, w)| w == Waiting::Bearers) {
            // AS security is active: so is the NAS signalling connection's.
            self.secured_connection = true;
            self.finish(now, Ok(()));
        }
    }

    /// Delete the registration as a reject cause or a paging with IMSI
    /// asks (TS 24.301 5.5.3.2.5, 5.6.1.5, 5.6.2.2.2): GUTI, TAI list,
    /// last visited registered TAI and KSI (the security context) when
    /// `forget`, the bearers always; EMM-DEREGISTERED.
    pub(super) fn deregister_locally(&mut self, forget: bool) {
        if forget {
            self.guti = None;
            self.tais.clear();
            self.idle.last_visited = None;
            self.security = None;
        }
        self.bearer = None;
        self.emm = EmmState::Deregistered;
        self.idle.t3412_deadline = None;
    }

    /// What a SERVICE REJECT or TRACKING AREA UPDATE REJECT cause makes the
    /// UE do (TS 24.301 5.6.1.5, 5.5.3.2.5): the same for both.
    pub(super) fn on_reject_cause(&mut self, cause: u8) {
        match cause {
            // Illegal UE / ME, EPS services not allowed: the USIM is invalid
            // for EPS (GUTI, TAI list, last visited TAI and KSI deleted); no
            // attach.
            3 | 6 | 7 | 8 => self.deregister_locally(true),
            // UE identity cannot be derived by the network: the same, then a
            // new attach.
            9 => {
                self.deregister_locally(true);
                self.idle.reattach = true;
            }
            // Implicitly detached, no EPS bearer context activated:
            // EMM-DEREGISTERED.NORMAL-SERVICE (GUTI and security context
            // kept), then a new attach.
            10 | 40 => {
                self.deregister_locally(false);
                self.idle.reattach = true;
            }
            // PLMN / TA not allowed, EPS services not allowed in this PLMN:
            // no service here.
            11 | 12 | 14 => self.deregister_locally(true),
            // Roaming not allowed in this TA, no suitable cells, congestion
            // and the abnormal cases (5.6.1.6, 5.5.3.2.6): still registered.
            _ => {}
        }
    }

    /// S1AP PAGING with the UE's IMSI (TS 24.301 5.6.2.2.2): the UE detaches
    /// locally, forgets its GUTI and KSI, and must attach (the eNB starts
    /// the attach at once).
    pub fn paged_with_imsi(&mut self) {
        self.deregister_locally(true);
        self.idle.reattach = true;
    }
}
