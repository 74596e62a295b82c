//! SDF filters (TS 29.244 8.2.5): the one Flow Description parser of the
//! workspace lives in [`mobicore_pfcp::flow`], shared with the steering
//! encoding ([`mobicore_pfcp::steering`]).

pub use mobicore_pfcp::flow::*;
