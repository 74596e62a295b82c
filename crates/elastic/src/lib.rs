//! The deterministic core of the elastic MME (seed 004, MMLite): the
//! inter-host load balancer, the intra-host forwarder, the emulator's
//! traffic patterns and a discrete-event simulator that runs the same code
//! for clusters of up to hundreds of hosts. No I/O, no clock: time is an
//! argument, randomness comes from a seed.
//!
//! # Layout
//! - `procedure`: identifiers (host, slice, M-TMSI) and the procedure
//!   classes with their cost, message count and SLO.
//! - `hash`: the one hash every balancer uses.
//! - `ring`: a consistent-hashing ring with virtual nodes (primary and
//!   replica hosts per key); `maglev`: Maglev's lookup table.
//! - `report`: the moving averages a host reports (queue length, CPU share).
//! - `balancer`: the `Balancer` trait, round robin, consistent hashing,
//!   Maglev and skewed consistent hashing (Algorithm 1, Eq. 1), and the
//!   `Frontend` that tracks procedures and hosts joining and leaving.
//! - `forwarder`: Algorithm 2 (argmin Q/C, Eqs. 2-4) with priorities.
//! - `nf_scaling`: the per-host NF controller: instances of a kind from
//!   the idle pool on a persistent backlog, back on a lasting lull.
//! - `router`: the front end's routing of UE-associated S1AP messages to
//!   MME hosts by the host number their identifiers carry, heirs of gone
//!   hosts, the balancer for new UEs; and of S11 (GTPv2-C) between the
//!   hosts and the S-GW by TEID and sequence number.
//! - `controller`: the EPS controller's host scaling (start a host, drain
//!   one) from load reports and SLO violations, with hysteresis.
//! - `load`: traffic patterns T1-T4 with skew across UEs and a procedure mix.
//! - `sim`: a cluster of hosts under a load, its SLO violations, CPU spread,
//!   throughput and latency, its hosts optionally scaled by the EPS
//!   controller; the search for the hosts a scheme needs (a fixed count,
//!   or time-averaged under the controller).

pub mod balancer;
pub mod controller;
pub mod forwarder;
pub mod hash;
pub mod load;
pub mod maglev;
pub mod nf_scaling;
pub mod procedure;
pub mod report;
pub mod ring;
pub mod router;
pub mod sim;

pub use balancer::{Balancer, Estimation, Frontend, Route, RouteError, Scheme, Violation};
pub use forwarder::{Forwarder, ForwarderConfig};
pub use procedure::{HostId, MTmsi, ProcedureClass, ProcedureKind, Profiles, SliceId};
