//! mobicore-mme: see ARCHITECTURE.md.
