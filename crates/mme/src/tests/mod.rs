//! Deterministic tests of the core: a scripted eNB, UE and HSS/S-GW under a
//! virtual clock.

mod attach;

use crate::test_ue::*;
