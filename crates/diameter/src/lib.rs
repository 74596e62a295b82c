//! mobicore-diameter: see ARCHITECTURE.md.
