pub use mobicore_pfcp::*;
