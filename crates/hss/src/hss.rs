//! The HSS core without I/O: typed S6a requests in, typed answers out
//! (TS 29.272 5.2). The Diameter shell decodes and encodes around it.

use crate::auth;
use crate::store::SubscriberStore;
use crate::subscriber::Subscriber;
use mobicore_common::counters::Counters;
use mobicore_common::s6a::*;
use mobicore_common::{Arp, Imsi};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Most vectors one AIR gets (TS 33.401 6.1.2 recommends one; S6a allows
/// up to 5 per Number-Of-Requested-Vectors).
pub const MAX_VECTORS: u32 = 5;

/// The HSS procedures over a shared [`SubscriberStore`]. Cheap to clone:
/// each connection task holds its own (its own RNG, the same store).
#[derive(Clone)]
pub struct Hss {
    store: SubscriberStore,
    rng: StdRng,
    counters: Counters,
}

impl Hss {
    /// An HSS whose RANDs come from the operating system's generator.
    pub fn new(store: SubscriberStore, counters: Counters) -> Self {
        Hss { store, rng: StdRng::from_os_rng(), counters }
    }

    /// An HSS with a seeded RNG (deterministic tests).
    pub fn with_seed(store: SubscriberStore, seed: u64) -> Self {
        Hss { store, rng: StdRng::seed_from_u64(seed), counters: Counters::new() }
    }

    pub fn store(&self) -> &SubscriberStore {
        &self.store
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A clone for another task, with an independent RNG.
    pub fn fork(&mut self) -> Self {
        let seed = self.rng.random();
        Hss { store: self.store.clone(), rng: StdRng::seed_from_u64(seed), counters: self.counters.clone() }
    }

    pub fn handle(&mut self, req: S6aRequest) -> S6aAnswer {
        match req {
            S6aRequest::AuthenticationInformation(r) => S6aAnswer::AuthenticationInformation(self.air(&r)),
            S6aRequest::UpdateLocation(r) => S6aAnswer::UpdateLocation(self.ulr(&r)),
            S6aRequest::PurgeUe(r) => S6aAnswer::PurgeUe(self.pur(&r)),
        }
    }

    /// AIR (TS 29.272 5.2.3.1.3).
    fn air(&mut self, r: &AuthInfoRequest) -> Result<Vec<EutranVector>, S6aError> {
        let n = r.num_vectors.clamp(1, MAX_VECTORS) as usize;
        let mut rands = [[0u8; 16]; MAX_VECTORS as usize];
        for rand in rands.iter_mut().take(n) {
            self.rng.fill(rand);
        }
        let counters = &self.counters;
        let out = self.store.update(&r.imsi, |s: &mut Subscriber| {
            let opc = s.opc.ok_or(S6aError::AuthenticationDataUnavailable)?;
            let m = auth::milenage(&s.k, &opc);
            if let Some(rs) = &r.resync {
                // TS 33.102 6.3.5: verify MAC-S, then reset SQN_HE to SQN_MS.
                // An AUTS that does not verify gives no vectors
                // (DIAMETER_AUTHENTICATION_DATA_UNAVAILABLE).
                match auth::resync_sqn_ms(&m, rs) {
                    Some(sqn_ms) => {
                        counters.incr("hss_resync");
                        s.sqn = sqn_ms;
                    }
                    None => {
                        counters.incr("hss_resync_mac_failure");
                        return Err(S6aError::AuthenticationDataUnavailable);
                    }
                }
            }
            let mut vectors = Vec::with_capacity(n);
            for rand in rands.iter().take(n) {
                let sqn = auth::next_sqn(s.sqn);
                let v = auth::eutran_vector(&m, *rand, sqn, s.amf, &r.visited_plmn)
                    .ok_or(S6aError::AuthenticationDataUnavailable)?;
                s.sqn = sqn;
                vectors.push(v);
            }
            Ok(vectors)
        });
        out.unwrap_or_else(|| {
            self.counters.incr("hss_user_unknown");
            Err(S6aError::UserUnknown)
        })
    }

    /// ULR (TS 29.272 5.2.1.1.3): the subscription data.
    /// The terminal the MME names (Terminal-Information) is stored with the
    /// subscriber.
    fn ulr(&mut self, r: &UpdateLocationRequest) -> Result<SubscriptionData, S6aError> {
        let s = self.lookup(&r.imsi)?;
        if let Some(t) = &r.terminal_information {
            if s.terminal.as_ref() != Some(t) {
                self.store.update(&r.imsi, |s| s.terminal = Some(t.clone()));
            }
        }
        if s.apns.is_empty() {
            return Err(S6aError::UnknownEpsSubscription);
        }
        let apns = s
            .apns
            .iter()
            .enumerate()
            .map(|(i, a)| ApnConfiguration {
                context_identifier: i as u32 + 1,
                service_selection: a.name.clone(),
                pdn_type: a.pdn_type,
                qci: a.qci,
                arp: Arp {
                    priority_level: a.arp_priority,
                    pre_emption_capability: a.pre_emption_capability,
                    pre_emption_vulnerability: a.pre_emption_vulnerability,
                },
                ambr: a.ambr,
                pdn_gw: a.pdn_gw,
                served_party_ipv4: a.static_ipv4,
            })
            .collect();
        Ok(SubscriptionData { msisdn: s.msisdn.clone(), ue_ambr: s.ue_ambr, default_context_identifier: 1, apns })
    }

    /// PUR (TS 29.272 5.2.1.3.3).
    fn pur(&mut self, r: &PurgeUeRequest) -> Result<(), S6aError> {
        self.lookup(&r.imsi).map(|_| ())
    }

    fn lookup(&self, imsi: &Imsi) -> Result<Subscriber, S6aError> {
        self.store.get(imsi).ok_or_else(|| {
            self.counters.incr("hss_user_unknown");
            S6aError::UserUnknown
        })
    }
}
