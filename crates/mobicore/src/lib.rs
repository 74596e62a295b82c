//! `mobicore`: a software-defined LTE packet core in one binary. The
//! library half holds the commands so integration tests can drive them.
//!
//! # Layout
//! - `cli`: the command line (clap).
//! - `config`: the one TOML config file, a section per network function.
//! - `allinone`: starts every network function in this process on loopback.
//! - `demo`: `mobicore demo`, the end-to-end story with a summary.
//! - `bench`: `mobicore bench ...`, measurements with their baselines
//!   (`bench_pfcp`: the PFCP session bench; `bench_slowpath`: TUN versus
//!   AF_XDP for buffered downlink packets; `bench_relocation`: seed 000
//!   Figs 6-8; `bench_divert`: seed 000 Figs 10-16, the steering switch's
//!   data-path cost; `bench_mobility`: the mobility phases with data;
//!   `bench_breakout`: seed 001 Fig. 3, the MEC router's local breakout
//!   per frame size; `bench_mme`: seed 004 Figs 6-7 on real MME
//!   processes, Figs 10-11 from the elastic MME's simulator).
//! - `elastic_mme`: `mobicore mme-frontend` and `mobicore mme-host`, the
//!   elastic MME as real processes (issue 13): front end, hosts, their
//!   link, the UE contexts in a shared store.
//! - `subscriber`: `mobicore subscriber ...`, the HSS's embedded store.
//! - `capture`: tshark capture and its verdict.
//! - `report`: percentiles, tables, JSON.
//! - `procs`: child processes of benches and tests, killed on drop.
//! - `responder`: the pre-built-reply MME stand-in, `bench attach`'s
//!   like-for-like baseline.

pub mod allinone;
pub mod bench;
pub mod bench_breakout;
pub mod bench_divert;
pub mod bench_mme;
pub mod bench_mobility;
pub mod bench_pfcp;
pub mod bench_relocation;
pub mod bench_slowpath;
pub mod breakout;
pub mod capture;
pub mod cli;
pub mod config;
pub mod demo;
pub mod edge;
pub mod elastic_mme;
pub mod plot;
pub mod procs;
pub mod report;
pub mod responder;
pub mod subscriber;
