//! Loading the C objects with aya, attaching and detaching them, and the
//! aya-backed [`MapStore`].

use super::maps::*;
use aya::maps::{Array, DevMapHash, HashMap as BpfHash, MapData, PerCpuArray, PerCpuValues};
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use std::ffi::CString;

pub static UPF_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/upf.o"));
pub static DECAP_MIN_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/decap_min.o"));
pub static ENCAP_MIN_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/encap_min.o"));
pub static REDIRECT_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/redirect.o"));
pub static PASS_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pass.o"));

/// Why the fast path could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error("loading the XDP object: {0}")]
    Load(String),
    #[error("attaching XDP to {iface}: {msg}")]
    Attach { iface: String, msg: String },
    #[error("no interface {0}")]
    NoInterface(String),
    #[error(transparent)]
    Map(#[from] MapError),
    #[error("BPF_PROG_RUN: {0}")]
    TestRun(String),
}

/// How to attach: native (driver) mode, which veth supports, or generic
/// (skb) mode as the fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    #[default]
    Native,
    Generic,
}

impl AttachMode {
    fn aya(self) -> XdpMode {
        match self {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Generic => XdpMode::Skb,
        }
    }
}

/// Interface index by name.
pub fn ifindex(name: &str) -> Result<u32, XdpError> {
    let c = CString::new(name).map_err(|_| XdpError::NoInterface(name.into()))?;
    // SAFETY: c is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(XdpError::NoInterface(name.into())),
        i => Ok(i),
    }
}

/// Map capacities (the C defaults are for production; tests shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSizes {
    pub tunnels: u32,
    pub fars: u32,
    pub qers: u32,
    pub urrs: u32,
}

impl Default for MapSizes {
    fn default() -> Self {
        MapSizes { tunnels: 262_144, fars: 262_144, qers: 262_144, urrs: 262_144 }
    }
}

impl MapSizes {
    /// Overflow positions per direction (keys whose direct reference
    /// position another key holds): at most one per tunnel.
    pub fn overflow(&self) -> u32 {
        self.tunnels.min(FAST_OVF_SIZE)
    }
    pub fn small() -> Self {
        MapSizes { tunnels: 1024, fars: 1024, qers: 1024, urrs: 1024 }
    }
}

/// One loaded XDP program (one ELF object), with the interfaces it is
/// attached to. Dropping it detaches it from every interface.
pub struct LoadedProgram {
    ebpf: Ebpf,
    name: &'static str,
    attached: Vec<(String, aya::programs::xdp::XdpLinkId)>,
}

impl LoadedProgram {
    /// Loads `obj` and its program `name` into the kernel (verifier runs here).
    pub fn load(obj: &[u8], name: &'static str, sizes: Option<MapSizes>) -> Result<Self, XdpError> {
        Self::load_with(obj, name, sizes, None)
    }

    /// [`Self::load`], with the steering maps (`steer_ul`, `steer_dl`)
    /// sized for `diversions` (upf.o only).
    pub fn load_with(
        obj: &[u8],
        name: &'static str,
        sizes: Option<MapSizes>,
        diversions: Option<u32>,
    ) -> Result<Self, XdpError> {
        let mut loader = EbpfLoader::new();
        if let Some(n) = diversions {
            loader.map_max_entries("steer_ul", n.max(1)).map_max_entries("steer_dl", n.max(1));
        }
        if let Some(s) = sizes {
            loader
                .map_max_entries("fast_ul", s.overflow())
                .map_max_entries("fast_dl", s.overflow())
                .map_max_entries("fars", s.fars)
                .map_max_entries("qers", s.qers)
                .map_max_entries("urrs", s.urrs);
        }
        let mut ebpf = loader.load(obj).map_err(|e| XdpError::Load(format!("{e:#}")))?;
        let prog: &mut Xdp = ebpf
            .program_mut(name)
            .ok_or_else(|| XdpError::Load(format!("no program {name}")))?
            .try_into()
            .map_err(|e| XdpError::Load(format!("{e}")))?;
        prog.load().map_err(|e| XdpError::Load(verifier_error(e)))?;
        Ok(LoadedProgram { ebpf, name, attached: Vec::new() })
    }

    /// Loads another program of the same object (on the same maps), e.g.
    /// a devmap egress program, and gives its descriptor.
    pub(crate) fn load_also(&mut self, name: &'static str) -> Result<aya::programs::ProgramFd, XdpError> {
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| XdpError::Load(format!("no program {name}")))?
            .try_into()
            .map_err(|e| XdpError::Load(format!("{e}")))?;
        prog.load().map_err(|e| XdpError::Load(verifier_error(e)))?;
        let fd = prog.fd().map_err(|e| XdpError::Load(format!("{e}")))?;
        fd.try_clone().map_err(|e| XdpError::Load(format!("{name}: {e}")))
    }

    pub fn program(&self) -> &Xdp {
        self.ebpf.program(self.name).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    fn program_mut(&mut self) -> &mut Xdp {
        self.ebpf.program_mut(self.name).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    /// Attaches to an interface (in the caller's network namespace).
    pub fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), XdpError> {
        let idx = ifindex(iface)?;
        let link = self
            .program_mut()
            .attach_to_if_index(idx, mode.aya())
            .map_err(|e| XdpError::Attach { iface: iface.into(), msg: verifier_error(e) })?;
        self.attached.push((iface.to_string(), link));
        Ok(())
    }

    /// Detaches from every interface (also done on drop).
    pub fn detach_all(&mut self) {
        for (_, link) in std::mem::take(&mut self.attached) {
            let _ = self.program_mut().detach(link);
        }
    }

    pub fn attached(&self) -> Vec<String> {
        self.attached.iter().map(|(i, _)| i.clone()).collect()
    }

    pub(crate) fn take_map(&mut self, name: &'static str) -> Result<aya::maps::Map, MapError> {
        self.ebpf.take_map(name).ok_or(MapError { map: name, msg: "not in the object".into() })
    }

    /// Runs the program once on `pkt` with `BPF_PROG_RUN` (no network): the
    /// verdict (XDP_ABORTED 0, DROP 1, PASS 2, TX 3, REDIRECT 4) and the
    /// packet as the program left it.
    pub fn test_run(&self, pkt: &[u8]) -> Result<(u32, Vec<u8>), XdpError> {
        let mut out = vec![0u8; pkt.len() + 512];
        let opts = TestRunOptions { data_in: Some(pkt), data_out: Some(&mut out), repeat: 1, ..Default::default() };
        let r = self.program().test_run(opts).map_err(|e| XdpError::TestRun(format!("{e}")))?;
        out.truncate(r.data_size_out as usize);
        Ok((r.return_value, out))
    }
    /// The mean run time of the program on `pkt` over `repeat` runs of
    /// `BPF_PROG_RUN` (the kernel's clock): its cost, without a network.
    pub fn time_run(&self, pkt: &[u8], repeat: u32) -> Result<std::time::Duration, XdpError> {
        let opts = TestRunOptions { data_in: Some(pkt), repeat, ..Default::default() };
        let r = self.program().test_run(opts).map_err(|e| XdpError::TestRun(format!("{e}")))?;
        Ok(r.duration)
    }
}

/// AF_XDP slow path (`xsks` / `xsk_ifindex` in bpf/far.h; only `upf.o` has them).
impl LoadedProgram {
    /// Registers the AF_XDP socket `fd`, bound to queue `queue` of
    /// `ifindex`, as the receiver of that queue's buffered downlink packets.
    /// Every socket of one program must be on the same interface.
    pub fn register_xsk(&mut self, ifindex: u32, queue: u32, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), MapError> {
        let m = self.ebpf.map_mut("xsks").ok_or(MapError { map: "xsks", msg: "not in the object".into() })?;
        aya::maps::XskMap::try_from(m).map_err(me("xsks"))?.set(queue, fd, 0).map_err(me("xsks"))?;
        let m =
            self.ebpf.map_mut("xsk_ifindex").ok_or(MapError { map: "xsk_ifindex", msg: "not in the object".into() })?;
        Array::<_, u32>::try_from(m).map_err(me("xsk_ifindex"))?.set(0, ifindex, 0).map_err(me("xsk_ifindex"))
    }

    /// Sends buffered downlink packets up the stack again (XDP_PASS)
    /// while the sockets stay open; `register_xsk` turns them back on.
    pub fn suspend_xsks(&mut self) -> Result<(), MapError> {
        let m =
            self.ebpf.map_mut("xsk_ifindex").ok_or(MapError { map: "xsk_ifindex", msg: "not in the object".into() })?;
        Array::<_, u32>::try_from(m).map_err(me("xsk_ifindex"))?.set(0, 0, 0).map_err(me("xsk_ifindex"))
    }
}

impl Drop for LoadedProgram {
    fn drop(&mut self) {
        self.detach_all();
    }
}

fn verifier_error(e: aya::programs::ProgramError) -> String {
    let s = format!("{e:#}");
    // Keep the tail of a verifier log: that is where the reason is.
    if s.len() > 4000 {
        format!("...{}", &s[s.len() - 4000..])
    } else {
        s
    }
}

fn me(map: &'static str) -> impl Fn(aya::maps::MapError) -> MapError {
    move |e| MapError { map, msg: format!("{e}") }
}

/// A `BPF_F_MMAPABLE` array of [`FastLine`]s (`fast_ul_lines`,
/// `fast_dl_lines`: reference position i and pool slot i) mapped into this
/// process, so that a reference switches with one aligned atomic store (a
/// `bpf_map_update_elem` is a `memcpy` of the whole line in the kernel,
/// which need not store four octets at once and would rewrite the other
/// half of the line).
struct LineArray {
    name: &'static str,
    map: Mapped,
    entries: u32,
}

/// The value area of a `BPF_F_MMAPABLE` array map, mapped shared
/// read-write into this process (unmapped on drop).
pub(crate) struct Mapped {
    /// Keeps the map (and the mapping's file) alive.
    _map: MapData,
    base: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value; its owners reach it only
// through &mut self (writes) or atomics.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps array `map` whose values are `value_size` octets; its entries.
    pub(crate) fn new(name: &'static str, map: aya::maps::Map, value_size: usize) -> Result<(Self, u32), MapError> {
        let aya::maps::Map::Array(data) = map else {
            return Err(MapError { map: name, msg: "not an array".into() });
        };
        let info = data.info().map_err(me(name))?;
        if info.value_size() as usize != value_size {
            return Err(MapError {
                map: name,
                msg: format!("value size {} is not {value_size} octets", info.value_size()),
            });
        }
        let entries = info.max_entries();
        let page = 4096usize;
        let len = (entries as usize * Mapped::stride(value_size)).div_ceil(page) * page;
        use std::os::fd::{AsFd, AsRawFd};
        let fd = data.fd().as_fd().as_raw_fd();
        // SAFETY: a shared read-write mapping of a BPF_F_MMAPABLE array of
        // `len` octets (its value area rounded up to pages); the kernel
        // checks the flag and the size.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(MapError { map: name, msg: format!("mmap: {}", std::io::Error::last_os_error()) });
        }
        let base =
            std::ptr::NonNull::new(p.cast::<u8>()).ok_or(MapError { map: name, msg: "mmap returned null".into() })?;
        Ok((Mapped { _map: data, base, len }, entries))
    }

    /// Octets from one value to the next: the kernel rounds an array's
    /// values up to 8 octets (kernel/bpf/arraymap.c).
    pub(crate) fn stride(value_size: usize) -> usize {
        value_size.div_ceil(8) * 8
    }

    /// The mapping's first octet (page-aligned), valid for `len` octets.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Octets of a line, and where its pool slot starts (bpf/maps.h fast_line).
const LINE: usize = std::mem::size_of::<FastLine>();
const LINE_ENTRY: usize = std::mem::offset_of!(FastLine, e);

impl LineArray {
    fn new(name: &'static str, map: aya::maps::Map) -> Result<Self, MapError> {
        let (map, entries) = Mapped::new(name, map, LINE)?;
        let mut r = LineArray { name, map, entries };
        for pos in 0..entries {
            r.set_ref(pos, FAST_REF_NONE)?;
        }
        Ok(r)
    }

    fn check(&self, i: u32, what: &str) -> Result<usize, MapError> {
        if i >= self.entries {
            return Err(MapError { map: self.name, msg: format!("{what} {i} out of range") });
        }
        Ok(i as usize * LINE)
    }

    /// One Release store: the pool slot it names, written before, is seen
    /// whole by a program that loads this reference.
    fn set_ref(&mut self, pos: u32, slot: u32) -> Result<(), MapError> {
        let at = self.check(pos, "position")?;
        // SAFETY: in bounds (checked), 64-aligned (page-aligned base,
        // stride 64), and the kernel only ever loads it.
        let a = unsafe { &*self.map.base().add(at).cast::<std::sync::atomic::AtomicU32>() };
        a.store(slot, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Writes pool slot `slot`, which no reference names (the caller's
    /// contract, bpf/maps.h): no program reads it while it is written, and
    /// the Release store of the reference that later names it orders it.
    fn put_entry(&mut self, slot: u32, e: &FastEntry) -> Result<(), MapError> {
        let at = self.check(slot, "slot")? + LINE_ENTRY;
        // SAFETY: in bounds (checked), aligned (stride 64, entry at 32),
        // and no reader can be holding this slot (see above).
        unsafe { std::ptr::write_volatile(self.map.base().add(at).cast::<FastEntry>(), *e) };
        Ok(())
    }
}

/// The maps of the loaded `upf.o`, owned (taken out of the Ebpf object).
pub struct AyaMaps {
    config: Array<MapData, UpfConfigEntry>,
    pdr_sets: Array<MapData, PdrSet>,
    fast_ul: BpfHash<MapData, u32, u32>,
    fast_dl: BpfHash<MapData, u32, u32>,
    fast_ul_lines: LineArray,
    fast_dl_lines: LineArray,
    fars: Array<MapData, FarEntry>,
    qers: Array<MapData, QerEntry>,
    urrs: PerCpuArray<MapData, UrrCounts>,
    urr_lists: Array<MapData, UrrList>,
    nexthops: BpfHash<MapData, u32, NextHop>,
    tx_ports: DevMapHash<MapData>,
    counters: PerCpuArray<MapData, CounterLine>,
    steer_ul: BpfHash<MapData, u32, SteerUlSet>,
    steer_dl: BpfHash<MapData, SteerDlKey, SteerDl>,
    ncpus: usize,
}

impl AyaMaps {
    pub(crate) fn take(p: &mut LoadedProgram) -> Result<Self, MapError> {
        fn conv<T, E: std::fmt::Display>(name: &'static str, r: Result<T, E>) -> Result<T, MapError> {
            r.map_err(|e| MapError { map: name, msg: e.to_string() })
        }
        let ncpus = aya::util::nr_cpus().map_err(|(m, e)| MapError { map: "urrs", msg: format!("{m}: {e}") })?;
        Ok(AyaMaps {
            config: conv("config", Array::try_from(p.take_map("config")?))?,
            pdr_sets: conv("pdr_sets", Array::try_from(p.take_map("pdr_sets")?))?,
            fast_ul: conv("fast_ul", BpfHash::try_from(p.take_map("fast_ul")?))?,
            fast_dl: conv("fast_dl", BpfHash::try_from(p.take_map("fast_dl")?))?,
            fast_ul_lines: LineArray::new("fast_ul_lines", p.take_map("fast_ul_lines")?)?,
            fast_dl_lines: LineArray::new("fast_dl_lines", p.take_map("fast_dl_lines")?)?,
            fars: conv("fars", Array::try_from(p.take_map("fars")?))?,
            qers: conv("qers", Array::try_from(p.take_map("qers")?))?,
            urrs: conv("urrs", PerCpuArray::try_from(p.take_map("urrs")?))?,
            urr_lists: conv("urr_lists", Array::try_from(p.take_map("urr_lists")?))?,
            nexthops: conv("nexthops", BpfHash::try_from(p.take_map("nexthops")?))?,
            tx_ports: conv("tx_ports", DevMapHash::try_from(p.take_map("tx_ports")?))?,
            counters: conv("counters", PerCpuArray::try_from(p.take_map("counters")?))?,
            steer_ul: conv("steer_ul", BpfHash::try_from(p.take_map("steer_ul")?))?,
            steer_dl: conv("steer_dl", BpfHash::try_from(p.take_map("steer_dl")?))?,
            ncpus,
        })
    }
}

impl MapStore for AyaMaps {
    fn set_config(&mut self, c: &UpfConfigEntry) -> Result<(), MapError> {
        self.config.set(0, c, 0).map_err(me("config"))
    }
    fn put_pdr_set(&mut self, idx: u32, s: &PdrSet) -> Result<(), MapError> {
        self.pdr_sets.set(idx, s, 0).map_err(me("pdr_sets"))
    }
    fn put_fast_slot(&mut self, dir: Dir, slot: u32, e: &FastEntry) -> Result<(), MapError> {
        match dir {
            Dir::Ul => self.fast_ul_lines.put_entry(slot, e),
            Dir::Dl => self.fast_dl_lines.put_entry(slot, e),
        }
    }
    fn set_fast_ref(&mut self, dir: Dir, pos: u32, slot: u32) -> Result<(), MapError> {
        match dir {
            Dir::Ul => self.fast_ul_lines.set_ref(pos, slot),
            Dir::Dl => self.fast_dl_lines.set_ref(pos, slot),
        }
    }
    fn put_fast_ovf(&mut self, dir: Dir, key: u32, pos: u32) -> Result<(), MapError> {
        // BPF_NOEXIST: an element is never updated in place (bpf/maps.h).
        let flags = 1;
        match dir {
            Dir::Ul => self.fast_ul.insert(key, pos, flags).map_err(me("fast_ul")),
            Dir::Dl => self.fast_dl.insert(key, pos, flags).map_err(me("fast_dl")),
        }
    }
    fn del_fast_ovf(&mut self, dir: Dir, key: u32) -> Result<(), MapError> {
        match dir {
            Dir::Ul => self.fast_ul.remove(&key).map_err(me("fast_ul")),
            Dir::Dl => self.fast_dl.remove(&key).map_err(me("fast_dl")),
        }
    }
    fn put_far(&mut self, idx: u32, f: &FarEntry) -> Result<(), MapError> {
        self.fars.set(idx, f, 0).map_err(me("fars"))
    }
    fn put_qer(&mut self, idx: u32, q: &QerEntry) -> Result<(), MapError> {
        self.qers.set(idx, q, 0).map_err(me("qers"))
    }
    fn put_urr_list(&mut self, idx: u32, l: &UrrList) -> Result<(), MapError> {
        self.urr_lists.set(idx, l, 0).map_err(me("urr_lists"))
    }
    fn reset_urr(&mut self, idx: u32) -> Result<(), MapError> {
        let zero = PerCpuValues::try_from(vec![UrrCounts::default(); self.ncpus])
            .map_err(|e| MapError { map: "urrs", msg: e.to_string() })?;
        self.urrs.set(idx, zero, 0).map_err(me("urrs"))
    }
    fn urr(&self, idx: u32) -> Result<UrrCounts, MapError> {
        let v = self.urrs.get(&idx, 0).map_err(me("urrs"))?;
        let mut sum = UrrCounts::default();
        for c in v.iter() {
            sum += *c;
        }
        Ok(sum)
    }
    fn put_nexthop(&mut self, dst: u32, n: &NextHop) -> Result<(), MapError> {
        self.nexthops.insert(dst, n, 0).map_err(me("nexthops"))
    }
    fn del_nexthop(&mut self, dst: u32) -> Result<(), MapError> {
        match self.nexthops.remove(&dst) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(me("nexthops")(e)),
        }
    }
    fn add_port(&mut self, ifindex: u32) -> Result<(), MapError> {
        self.tx_ports.insert(ifindex, ifindex, None, 0).map_err(|e| MapError { map: "tx_ports", msg: e.to_string() })
    }
    fn counter(&self, c: Counter) -> Result<u64, MapError> {
        let v = self.counters.get(&0, 0).map_err(me("counters"))?;
        Ok(v.iter().map(|line| line.0[c as usize]).sum())
    }
    fn put_steer_ul(&mut self, ue: u32, s: &SteerUlSet) -> Result<(), MapError> {
        self.steer_ul.insert(ue, s, 0).map_err(me("steer_ul"))
    }
    fn del_steer_ul(&mut self, ue: u32) -> Result<(), MapError> {
        match self.steer_ul.remove(&ue) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(me("steer_ul")(e)),
        }
    }
    fn put_steer_dl(&mut self, k: SteerDlKey, v: &SteerDl) -> Result<(), MapError> {
        self.steer_dl.insert(k, v, 0).map_err(me("steer_dl"))
    }
    fn del_steer_dl(&mut self, k: SteerDlKey) -> Result<(), MapError> {
        match self.steer_dl.remove(&k) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(me("steer_dl")(e)),
        }
    }
}
