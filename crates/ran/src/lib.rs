//! mobicore-ran: see ARCHITECTURE.md.
