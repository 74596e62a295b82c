//! Several URRs on one PDR (bpf/maps.h "Several URRs on one PDR"): the
//! list slots over [`MemoryMaps`] (run everywhere), and the counting with
//! `BPF_PROG_RUN` (root).

use super::maps::*;
use super::tests::{
    bearer, eth, inner_udp, is_root, open_qer, pd, plane, run, ul_frame, urr, DN, FORW, TEID, UE, XDP_PASS, XDP_TX,
};
use super::*;
use crate::rules::{Pdr, INTERFACE_CORE};
use std::time::Duration;

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("note: skipped, BPF_PROG_RUN needs root");
            return;
        }
    };
}

/// The bearer of `tests::bearer` with URR ids `ul` on the uplink PDR and
/// `dl` on the downlink PDR (every URR measuring volume).
fn with_urrs(ul: &[u32], dl: &[u32]) -> SessionRules {
    let mut r = bearer(FORW, open_qer());
    r.pdrs.get_mut(&1).unwrap().urr_ids = ul.to_vec();
    r.pdrs.get_mut(&2).unwrap().urr_ids = dl.to_vec();
    r.urrs.clear();
    for id in ul.iter().chain(dl) {
        r.urrs.insert(*id, urr(*id));
    }
    r
}

fn memory_plane() -> XdpPlane<MemoryMaps> {
    XdpPlane::with_maps(MemoryMaps::default(), XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(tests::S1U) })
        .unwrap()
}

#[test]
fn pdrs_with_several_urrs_point_to_a_list_shared_by_equal_lists() {
    let t0 = Instant::now();
    let mut p = memory_plane();
    p.apply_at(1, &with_urrs(&[1, 2], &[1, 2]), &SdfTable::new(), t0).unwrap();
    let m = p.maps();
    let (ul, dl) = (m.fast(Dir::Ul, TEID).unwrap().urr_idx, m.fast(Dir::Dl, be_addr(UE)).unwrap().urr_idx);
    assert_eq!(ul, dl, "one list for the same URRs");
    assert_ne!(ul & URR_IDX_LIST, 0);
    let list = m.urr_lists[&(ul & !URR_IDX_LIST)];
    let (u1, u2) = (p.sessions[&1].slots.urr[&1], p.sessions[&1].slots.urr[&2]);
    assert_eq!(list, UrrList { idx: [u1, u2, IDX_NONE, IDX_NONE] });
    // Unchanged URRs keep the list slot (and the fast entries their slots).
    let fast = p.fast_slot(PdrKey::Teid(TEID));
    p.apply_at(1, &with_urrs(&[1, 2], &[1, 2]), &SdfTable::new(), t0 + Duration::from_millis(1)).unwrap();
    assert_eq!(p.maps().fast(Dir::Ul, TEID).unwrap().urr_idx, ul);
    assert_eq!(p.fast_slot(PdrKey::Teid(TEID)), fast);
    // One URR more on the uplink: a fresh list there, the old one stays for the downlink.
    p.apply_at(1, &with_urrs(&[1, 2, 3], &[1, 2]), &SdfTable::new(), t0 + Duration::from_millis(2)).unwrap();
    let m = p.maps();
    let ul3 = m.fast(Dir::Ul, TEID).unwrap().urr_idx;
    assert_ne!(ul3, ul);
    assert_eq!(m.fast(Dir::Dl, be_addr(UE)).unwrap().urr_idx, dl);
    assert_eq!(m.urr_lists[&(ul3 & !URR_IDX_LIST)].idx[..3], [u1, u2, p.sessions[&1].slots.urr[&3]]);
    // Back to one URR: a plain slot, both lists into quarantine.
    p.apply_at(1, &with_urrs(&[1], &[1]), &SdfTable::new(), t0 + Duration::from_millis(3)).unwrap();
    assert_eq!(p.maps().fast(Dir::Ul, TEID).unwrap().urr_idx, u1);
    assert_eq!(p.slot_pools()[5].in_use(), 0);
    assert_eq!(p.slot_pools()[5].quarantined(), 2);
}

#[test]
fn more_urrs_than_a_list_holds_send_the_pdr_to_the_slow_path() {
    let mut p = memory_plane();
    p.install(1, &with_urrs(&[1, 2, 3, 4, 5], &[1, 2, 3, 4])).unwrap();
    assert_eq!(p.maps().fast(Dir::Ul, TEID).unwrap().urr_idx, URR_IDX_SLOW);
    assert_ne!(p.maps().fast(Dir::Dl, be_addr(UE)).unwrap().urr_idx & URR_IDX_LIST, 0, "four fit in a list");
    // A URR id listed twice counts once.
    p.update(1, &with_urrs(&[1, 2, 3, 4, 5], &[1, 1])).unwrap();
    assert_eq!(p.maps().fast(Dir::Dl, be_addr(UE)).unwrap().urr_idx, p.sessions[&1].slots.urr[&1]);
}

// ---- BPF_PROG_RUN ----------------------------------------------------------

#[test]
fn two_urrs_on_one_pdr_both_count() {
    need_root!();
    // URR 1 for the session, URR 2 for a rating group on both PDRs; URR 3
    // on the uplink only.
    let p = plane(&with_urrs(&[1, 2, 3], &[1, 2]));
    let ul = inner_udp(UE, DN, 53, 100);
    let dl = inner_udp(DN, UE, 5000, 200);
    for _ in 0..3 {
        assert_eq!(run(&p, &ul_frame(TEID, &ul)).0, XDP_TX);
    }
    assert_eq!(run(&p, &eth(&dl)).0, XDP_TX);
    let both = UrrCounts { ul_bytes: 3 * ul.len() as u64, ul_pkts: 3, dl_bytes: dl.len() as u64, dl_pkts: 1 };
    assert_eq!(p.urr_usage(7, 1), Some(both));
    assert_eq!(p.urr_usage(7, 2), Some(both));
    assert_eq!(p.urr_usage(7, 3), Some(UrrCounts { dl_bytes: 0, dl_pkts: 0, ..both }));
    assert_eq!(p.counter(Counter::PassManyUrrs).unwrap(), 0);
}

#[test]
fn two_urrs_count_on_the_pdr_set_path_too() {
    need_root!();
    // A downlink SDF PDR (port 5000) with URRs 1 and 4 in front of the
    // default downlink PDR with URR 1: the key has a PDR set.
    let mut r = with_urrs(&[1], &[1]);
    r.pdrs.insert(
        3,
        Pdr {
            id: 3,
            precedence: 10,
            pdi: pd(INTERFACE_CORE, None, &["permit out 17 from any to assigned 5000"]),
            outer_header_removal: None,
            far_id: Some(2),
            qer_ids: vec![],
            urr_ids: vec![1, 4],
        },
    );
    r.urrs.insert(4, urr(4));
    let p = plane(&r);
    let video = inner_udp(DN, UE, 5000, 300);
    let other = inner_udp(DN, UE, 6000, 100);
    assert_eq!(run(&p, &eth(&video)).0, XDP_TX);
    assert_eq!(run(&p, &eth(&other)).0, XDP_TX);
    let u1 = p.urr_usage(7, 1).unwrap();
    let u4 = p.urr_usage(7, 4).unwrap();
    assert_eq!((u1.dl_pkts, u1.dl_bytes), (2, (video.len() + other.len()) as u64));
    assert_eq!((u4.dl_pkts, u4.dl_bytes), (1, video.len() as u64));
}

#[test]
fn five_urrs_pass_to_the_slow_path_uncounted() {
    need_root!();
    let mut p = plane(&with_urrs(&[1, 2, 3, 4, 5], &[1, 2, 3, 4]));
    let ul = inner_udp(UE, DN, 53, 100);
    let dl = inner_udp(DN, UE, 5000, 200);
    assert_eq!(run(&p, &ul_frame(TEID, &ul)).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassManyUrrs).unwrap(), 1);
    assert_eq!(run(&p, &eth(&dl)).0, XDP_TX);
    for id in 1..=4 {
        assert_eq!(
            p.urr_usage(7, id).unwrap(),
            UrrCounts { dl_bytes: dl.len() as u64, dl_pkts: 1, ..Default::default() },
            "URR {id}"
        );
    }
    assert_eq!(p.urr_usage(7, 5).unwrap(), UrrCounts::default(), "the slow path counts URR 5's packets");
    // Adding a second URR to a running PDR keeps the first one's count.
    p.update(7, &with_urrs(&[1, 2], &[1])).unwrap();
    assert_eq!(run(&p, &ul_frame(TEID, &ul)).0, XDP_TX);
    assert_eq!(p.urr_usage(7, 1).unwrap().ul_pkts, 1);
    assert_eq!(p.urr_usage(7, 1).unwrap().dl_pkts, 1, "URR 1 kept its slot");
    assert_eq!(p.urr_usage(7, 2).unwrap().ul_pkts, 1);
}
