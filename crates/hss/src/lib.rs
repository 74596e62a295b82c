//! mobicore-hss: see ARCHITECTURE.md.
