//! URRs on the wire: Create URR / Update URR into [`Urr`] (TS 29.244
//! 7.5.2.4, 7.5.4.4), the Usage Report IE (7.5.5.2, 7.5.7.2, 7.5.8.3),
//! NTP time stamps (8.2.48, 8.2.49) and the URR ID of Query URR / Remove
//! URR in both encodings.

use super::meter::Regrant;
use super::{UrrTriggers, UsageMeasurement};
use crate::rules::{Urr, VolumeLimit};
use rs_pfcp::error::PfcpError;
use rs_pfcp::ie::create_urr::CreateUrr;
use rs_pfcp::ie::reporting_triggers::ReportingTriggers;
use rs_pfcp::ie::update_urr::UpdateUrr;
use rs_pfcp::ie::volume_quota::VolumeQuota;
use rs_pfcp::ie::volume_threshold::VolumeThreshold;
use rs_pfcp::ie::{Ie, IeType};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Seconds from 1900-01-01 (NTP era 0) to 1970-01-01.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// A time as the 32-bit seconds of an NTP timestamp (TS 29.244 8.2.48;
/// era wrap-around as in RFC 5905).
pub fn ntp_seconds(t: SystemTime) -> u32 {
    let unix = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    (unix.wrapping_add(NTP_UNIX_OFFSET) & 0xffff_ffff) as u32
}

/// Maps the engine's `Instant`s to wall-clock time: one pair of readings
/// taken together.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    pub at: Instant,
    pub wall: SystemTime,
}

impl WallClock {
    pub fn wall(&self, t: Instant) -> SystemTime {
        if t >= self.at {
            self.wall + (t - self.at)
        } else {
            self.wall.checked_sub(self.at - t).unwrap_or(UNIX_EPOCH)
        }
    }
}

/// The payload of the first IE of type `t` in a grouped IE's payload
/// (enterprise IEs skipped); never panics.
pub fn find_ie(mut payload: &[u8], t: u16) -> Option<&[u8]> {
    while payload.len() >= 4 {
        let ty = u16::from_be_bytes([payload[0], payload[1]]);
        let len = u16::from_be_bytes([payload[2], payload[3]]) as usize;
        let body = payload.get(4..4 + len)?;
        if ty == t {
            return Some(body);
        }
        payload = &payload[4 + len..];
    }
    None
}

/// The URR ID of a Query URR or Remove URR IE. TS 29.244 7.5.4.10 and
/// 7.5.4.7 make both grouped IEs holding a URR ID IE; rs-pfcp 0.5 writes
/// the bare 4-octet value. Both are accepted.
pub fn grouped_urr_id(payload: &[u8], group: IeType) -> Result<u32, PfcpError> {
    let bytes = if payload.len() == 4 { Some(payload) } else { find_ie(payload, IeType::UrrId as u16) };
    match bytes.and_then(|b| b.get(..4)) {
        Some(b) => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(PfcpError::missing_ie_in_grouped(IeType::UrrId, group)),
    }
}

fn triggers(t: &ReportingTriggers) -> UrrTriggers {
    UrrTriggers {
        perio: t.contains(ReportingTriggers::PERIO),
        volth: t.contains(ReportingTriggers::VOLTH),
        timth: t.contains(ReportingTriggers::TIMTH),
        quhti: t.contains(ReportingTriggers::QUHTI),
        volqu: t.contains(ReportingTriggers::VOLQU),
        timqu: t.contains(ReportingTriggers::TIMQU),
    }
}

fn threshold(v: &VolumeThreshold) -> VolumeLimit {
    VolumeLimit {
        total: v.total_volume.filter(|_| v.tovol),
        uplink: v.uplink_volume.filter(|_| v.ulvol),
        downlink: v.downlink_volume.filter(|_| v.dlvol),
    }
}

fn quota(v: &VolumeQuota) -> VolumeLimit {
    VolumeLimit {
        total: v.total_volume.filter(|_| v.has_total_volume()),
        uplink: v.uplink_volume.filter(|_| v.has_uplink_volume()),
        downlink: v.downlink_volume.filter(|_| v.has_downlink_volume()),
    }
}

/// Quota Holding Time (IE 71), which rs-pfcp's Create / Update URR do not
/// read: taken from the raw grouped payload.
fn quota_holding_time(raw: &[u8]) -> Option<u32> {
    let b = find_ie(raw, IeType::QuotaHoldingTime as u16)?.get(..4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A Create URR (TS 29.244 7.5.2.4); `raw` is its payload.
pub fn urr_from_create(c: &CreateUrr, raw: &[u8]) -> Urr {
    Urr {
        id: c.urr_id.id,
        measure_volume: c.measurement_method.volume,
        measure_duration: c.measurement_method.duration,
        triggers: triggers(&c.reporting_triggers),
        volume_threshold: c.volume_threshold.as_ref().map(threshold),
        volume_quota: c.volume_quota.as_ref().map(quota),
        time_threshold: c.time_threshold.map(|t| t.value),
        time_quota: c.time_quota.as_ref().map(|t| t.quota_seconds),
        measurement_period: c.measurement_period.map(|t| t.value),
        inactivity_detection_time: c.inactivity_detection_time.map(|t| t.value),
        quota_holding_time: quota_holding_time(raw),
    }
}

/// Applies an Update URR (TS 29.244 7.5.4.4) to `urr`: the IEs present
/// replace the old values. Returns the quotas granted anew.
pub fn apply_update(u: &UpdateUrr, raw: &[u8], urr: &mut Urr) -> Regrant {
    if let Some(m) = &u.measurement_method {
        urr.measure_volume = m.volume;
        urr.measure_duration = m.duration;
    }
    if let Some(t) = &u.reporting_triggers {
        urr.triggers = triggers(t);
    }
    if let Some(v) = &u.volume_threshold {
        urr.volume_threshold = Some(threshold(v));
    }
    if let Some(v) = &u.volume_quota {
        urr.volume_quota = Some(quota(v));
    }
    if let Some(t) = u.time_threshold {
        urr.time_threshold = Some(t.value);
    }
    if let Some(t) = &u.time_quota {
        urr.time_quota = Some(t.quota_seconds);
    }
    if let Some(t) = u.measurement_period {
        urr.measurement_period = Some(t.value);
    }
    if let Some(t) = u.inactivity_detection_time {
        urr.inactivity_detection_time = Some(t.value);
    }
    if let Some(q) = quota_holding_time(raw) {
        urr.quota_holding_time = Some(q);
    }
    Regrant { volume: u.volume_quota.is_some(), time: u.time_quota.is_some() }
}

/// The conditional IEs an enabled trigger needs (TS 29.244 7.5.2.4-1):
/// the missing one, if any.
pub fn missing_conditional(urr: &Urr) -> Option<IeType> {
    let t = &urr.triggers;
    if t.perio && urr.measurement_period.is_none() {
        return Some(IeType::MeasurementPeriod);
    }
    if t.volth && urr.volume_threshold.is_none() {
        return Some(IeType::VolumeThreshold);
    }
    if t.timth && urr.time_threshold.is_none() {
        return Some(IeType::TimeThreshold);
    }
    None
}

/// A Usage Report IE of type `ie_type` (78 in a Session Modification
/// Response, 79 in a Session Deletion Response, 80 in a Session Report
/// Request), with times through `clock`.
pub fn usage_report_ie(u: &UsageMeasurement, ie_type: IeType, clock: &WallClock) -> Ie {
    use rs_pfcp::ie::duration_measurement::DurationMeasurement;
    use rs_pfcp::ie::end_time::EndTime;
    use rs_pfcp::ie::query_urr_reference::QueryURRReference;
    use rs_pfcp::ie::start_time::StartTime;
    use rs_pfcp::ie::ur_seqn::UrSeqn;
    use rs_pfcp::ie::urr_id::UrrId;
    use rs_pfcp::ie::usage_report::UsageReport;
    use rs_pfcp::ie::usage_report_trigger::UsageReportTrigger;
    use rs_pfcp::ie::volume_measurement::VolumeMeasurement;
    let t = u.trigger.0.to_le_bytes();
    let mut rep =
        UsageReport::new(UrrId::new(u.urr_id), UrSeqn::new(u.seqn), UsageReportTrigger::from_octets(t[..3].to_vec()));
    if u.volume {
        // TS 29.244 8.2.44: TOVOL, ULVOL, DLVOL, TONOP, ULNOP, DLNOP.
        rep.volume_measurement = Some(VolumeMeasurement::new(
            0x3f,
            Some(u.uplink_octets.saturating_add(u.downlink_octets)),
            Some(u.uplink_octets),
            Some(u.downlink_octets),
            Some(u.uplink_packets.saturating_add(u.downlink_packets)),
            Some(u.uplink_packets),
            Some(u.downlink_packets),
        ));
    }
    if u.duration {
        rep.duration_measurement = Some(DurationMeasurement::new(u.duration_secs));
    }
    rep.start_time = Some(StartTime::new(ntp_seconds(clock.wall(u.start))));
    rep.end_time = Some(EndTime::new(ntp_seconds(clock.wall(u.end))));
    rep.query_urr_reference = u.query_reference.map(QueryURRReference::new);
    Ie::new(ie_type, rep.marshal())
}
