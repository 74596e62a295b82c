//! Named counters for input that was dropped, rejected or answered with an
//! error, so that bad input is always counted (and exported as metrics).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The counters by name; a fast fixed hash (names are ours, not a peer's).
type Table = HashMap<&'static str, Arc<AtomicU64>, foldhash::fast::FixedState>;

/// A set of counters shared by a network function's tasks.
#[derive(Clone, Default)]
pub struct Counters {
    inner: Arc<Mutex<Table>>,
}

impl Counters {
    pub fn new() -> Self {
        Self::default()
    }
    /// The counter of this name, created at zero on first use.
    pub fn get(&self, name: &'static str) -> Arc<AtomicU64> {
        self.inner.lock().unwrap().entry(name).or_default().clone()
    }
    pub fn incr(&self, name: &'static str) {
        self.add(name, 1);
    }
    pub fn add(&self, name: &'static str, n: u64) {
        // Hot in every NF: no handle cloned, one lookup once it exists.
        let mut t = self.inner.lock().unwrap();
        match t.get(name) {
            Some(c) => c.fetch_add(n, Ordering::Relaxed),
            None => t.entry(name).or_default().fetch_add(n, Ordering::Relaxed),
        };
    }
    pub fn value(&self, name: &'static str) -> u64 {
        self.inner.lock().unwrap().get(name).map_or(0, |c| c.load(Ordering::Relaxed))
    }
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.inner.lock().unwrap().iter().map(|(k, v)| (*k, v.load(Ordering::Relaxed))).collect()
    }
    /// Prometheus text exposition, one `mobicore_<prefix>_<name>` per counter.
    pub fn prometheus(&self, prefix: &str) -> String {
        self.snapshot().into_iter().map(|(k, v)| format!("mobicore_{prefix}_{k} {v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn counts_and_exports() {
        let c = Counters::new();
        c.incr("s1ap_malformed");
        c.incr("s1ap_malformed");
        assert_eq!(c.value("s1ap_malformed"), 2);
        assert_eq!(c.value("other"), 0);
        c.add("octets", 1400);
        c.add("octets", 64);
        assert_eq!(c.value("octets"), 1464);
        assert_eq!(c.prometheus("mme"), "mobicore_mme_octets 1464\nmobicore_mme_s1ap_malformed 2\n");
    }
}
