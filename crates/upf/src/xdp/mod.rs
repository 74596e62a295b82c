//! XDP fast path: C programs in `crates/upf/bpf/`, loaded and programmed from Rust (issue 3).
