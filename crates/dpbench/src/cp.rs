//! A UPF's PFCP node (the sans-I/O [`UpfCore`]) driven in memory as the
//! controller drives it over the wire: an association, then requests
//! whose answers must carry "Request accepted". The node programs an XDP
//! plane that the bench shares ([`SharedPlane`]) to read its counters and
//! to attach and detach it.

use crate::DpBenchError;
use mobicore_upf::pfcp::{decode, encode, first, msg};
use mobicore_upf::rules::{Diversion, MecSession, PlaneError, SessionRules};
use mobicore_upf::xdp::XdpPlane;
use mobicore_upf::{ForwardingPlane, UpfConfig, UpfCore};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

/// Where the requests come from (never on the wire).
pub const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// An XDP plane shared by a PFCP node (which programs it) and the bench.
#[derive(Clone)]
pub struct SharedPlane(pub Arc<Mutex<XdpPlane>>);

impl SharedPlane {
    pub fn new(p: XdpPlane) -> SharedPlane {
        SharedPlane(Arc::new(Mutex::new(p)))
    }

    pub fn lock(&self) -> MutexGuard<'_, XdpPlane> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ForwardingPlane for SharedPlane {
    fn install(&mut self, s: u64, r: &SessionRules) -> Result<(), PlaneError> {
        self.lock().install(s, r)
    }
    fn update(&mut self, s: u64, r: &SessionRules) -> Result<(), PlaneError> {
        self.lock().update(s, r)
    }
    fn remove(&mut self, s: u64) -> Result<(), PlaneError> {
        self.lock().remove(s)
    }
    fn install_diversion(&mut self, s: u64, d: &Diversion) -> Result<(), PlaneError> {
        self.lock().install_diversion(s, d)
    }
    fn remove_diversion(&mut self, s: u64) -> Result<(), PlaneError> {
        self.lock().remove_diversion(s)
    }
    fn install_mec(&mut self, s: u64, m: &MecSession) -> Result<(), PlaneError> {
        self.lock().install_mec(s, m)
    }
    fn remove_mec(&mut self, s: u64) -> Result<(), PlaneError> {
        self.lock().remove_mec(s)
    }
}

/// The node and the next sequence number.
pub struct PfcpDriver {
    node: UpfCore,
    seq: u32,
}

impl PfcpDriver {
    /// A node of `cfg` on `plane`, associated with [`CP`].
    pub fn associate(cfg: UpfConfig, plane: SharedPlane) -> Result<PfcpDriver, DpBenchError> {
        let node = UpfCore::new(cfg, Box::new(plane), SystemTime::now(), mobicore_common::counters::Counters::new());
        let mut d = PfcpDriver { node, seq: 0 };
        let ies = [
            rs_pfcp::ie::node_id::NodeId::new_ipv4(CP).to_ie(),
            rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp::new(SystemTime::now()).to_ie(),
        ];
        let seq = d.next_seq();
        d.request(&encode(msg::ASSOCIATION_SETUP_REQUEST, None, seq, &ies))?;
        Ok(d)
    }

    /// The sequence number of the next request.
    pub fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    /// One request; Err unless the answer accepts it; the UP SEID of the
    /// answer's F-SEID, if any.
    pub fn request(&mut self, b: &[u8]) -> Result<Option<u64>, DpBenchError> {
        let from = SocketAddr::from(SocketAddrV4::new(CP, 8805));
        self.node.handle_datagram(Instant::now(), from, b);
        let (_, out) =
            self.node.poll_transmit().ok_or_else(|| DpBenchError::Plane("the PFCP node did not answer".into()))?;
        let (_, ies) = decode(&out).map_err(|e| DpBenchError::Plane(format!("the PFCP node's answer: {e:?}")))?;
        let cause = first(&ies, rs_pfcp::ie::IeType::Cause).and_then(|c| c.payload.first().copied());
        if cause != Some(1) {
            return Err(DpBenchError::Plane(format!("the PFCP node refused a request (cause {cause:?})")));
        }
        Ok(first(&ies, rs_pfcp::ie::IeType::Fseid)
            .and_then(|f| rs_pfcp::ie::fseid::Fseid::unmarshal(&f.payload).ok())
            .map(|f| u64::from(f.seid)))
    }

    /// A Session Establishment Request for `s` (`cp_seid` ours); the UP SEID.
    pub fn establish_mec(&mut self, cp_seid: u64, s: &MecSession) -> Result<u64, DpBenchError> {
        let seq = self.next_seq();
        self.request(&mobicore_upf::pfcp::mec::establishment_request(seq, CP, cp_seid, CP, s))?
            .ok_or_else(|| DpBenchError::Plane("no UP F-SEID in the answer".into()))
    }
}
