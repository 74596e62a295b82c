//! mobicore-gtp: see ARCHITECTURE.md.
