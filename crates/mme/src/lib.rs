//! mobicore-mme: the MME of the EPC (see ARCHITECTURE.md), as a sans-I/O
//! core ([`Mme`]: events in, actions out, time passed in) and a thin tokio
//! shell ([`run`]).
//!
//! # Layout
//! - [`config`]: [`MmeConfig`], typed, with defaults.
//! - [`context`]: eNB and UE contexts, [`UeRef`], [`MmeStats`].
//! - [`mme`]: the core: [`MmeEvent`], [`MmeAction`], dispatch, NAS timers and
//!   the helpers every procedure uses (send NAS, release a UE).
//! - procedures, each an `impl Mme` block: [`s1_setup`], [`attach`],
//!   [`identity`], [`authentication`], [`security_mode`],
//!   [`esm_information`], [`esm`] (default bearer, PDN type, PGW, GTP ->
//!   ESM causes), [`pdn_connectivity`] and [`pdn_disconnect`] (after
//!   attach), [`detach`] (UE- and network-initiated), [`ue_context_release`].
//! - idle mode and mobility: [`idle`] (mobile reachable, implicit detach),
//!   [`service_request`] (the INITIAL UE MESSAGE of a stored UE: Service
//!   Request, TAU and detach from idle), [`tau`], [`paging`] (DDN, S1AP
//!   Paging, T3413), [`path_switch`] (X2), [`s1_handover`],
//!   [`cancel_location`] (the HSS's CLR); DDN throttling under load in
//!   [`paging`].
//! - S1AP procedures of the eNB's: [`reset`] (S1 Reset),
//!   [`enb_configuration_update`], [`ue_capability`] (UE Capability Info
//!   Indication, the UE Radio Capability in Initial Context Setup).
//! - S1AP: [`s1ap_handler`] (decode, the error handling of TS 36.413 10,
//!   dispatch), [`s1ap_build`], [`erab_build`] (E-RAB setup and release).
//! - NAS: [`nas_handler`] (security, replay protection, dispatch),
//!   [`nas_build`].
//! - [`shell`]: [`run`], the tokio task driving the core.
//! - [`admin`]: the admin HTTP endpoint (operator's network detach), which
//!   hands commands to the shell.
//! - the UE context outside the process (issue 13, the elastic MME):
//!   [`context_codec`] (a UE context as a versioned record of octets),
//!   [`transfer`] (export, import and eviction of one UE, the journal of
//!   touched UEs), [`stored`] (records in a `mobicore_store::Store`, cold
//!   or hot, with compare-and-set), [`routing`] (what the elastic MME's
//!   front end and hosts read of an uplink S1AP PDU to route it).

pub mod admin;
pub mod attach;
pub mod authentication;
pub mod cancel_location;
pub mod config;
pub mod context;
pub mod context_codec;
pub mod detach;
pub mod enb_configuration_update;
pub mod erab_build;
pub mod esm;
pub mod esm_information;
pub mod identity;
pub mod idle;
pub mod mme;
pub mod nas_build;
pub mod nas_handler;
pub mod paging;
pub mod path_switch;
pub mod pdn_connectivity;
pub mod pdn_disconnect;
pub mod reset;
pub mod routing;
pub mod s1_handover;
pub mod s1_setup;
pub mod s1ap_build;
pub mod s1ap_handler;
pub mod security_mode;
pub mod service_request;
pub mod shell;
pub mod stored;
pub mod tau;
pub mod transfer;
pub mod ue_capability;
pub mod ue_context_release;

#[cfg(test)]
mod test_ue;
#[cfg(test)]
mod tests;

pub use config::{DdnThrottlingConfig, Eea, Eia, MmeConfig, NasTimerConfig};
pub use context::{MmeStats, UeRef};
pub use mme::{Mme, MmeAction, MmeEvent, OperatorCommand, OperatorOutcome};
pub use shell::{run, MmeError, OperatorRequest, PeerEvents, Peers};
