//! Deterministic tests of the eNB and UE state machines against a scripted
//! MME (no sockets, no sleeps).

mod attach;
mod detach;
mod fuzz;
mod handover;
mod mme;
mod reselection;
mod security;
mod shell;
mod wire;
