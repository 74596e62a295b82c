//! User-space data path and slow path (issue 3).
