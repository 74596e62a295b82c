//! mobicore-spgwc: see ARCHITECTURE.md.
