//! mobicore-sctp: see ARCHITECTURE.md.
