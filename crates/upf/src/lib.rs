//! mobicore-upf: see ARCHITECTURE.md.
