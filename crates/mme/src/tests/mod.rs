//! Deterministic tests of the core: a scripted eNB, UE and HSS/S-GW under a
//! virtual clock.

mod attach;
mod esm;
mod failures;
mod prop;
mod s1;
mod s1_interop;
mod stored;
mod trust;
mod tshark;

use crate::test_ue::*;
