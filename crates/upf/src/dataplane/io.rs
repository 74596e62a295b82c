//! I/O shell (below).
