// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Where NAT events come from: the data plane's records (bpf/nx_log.h, ring buffer
//! nx_log_rb), the daemon's own releases (src/expiry.rs), and what the daemon observes on
//! the tables (interim records, the pool threshold). Each becomes a [`NatEvent`].

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::abi::{
    LOG_ADDRS_EXHAUSTED, LOG_BLOCK_ALLOC, LOG_BLOCK_FREE, LOG_PORTS_EXHAUSTED, LOG_QUOTA, LOG_SESS_CREATE,
    LOG_SESS_DELETE,
};
use crate::expiry::BlockRelease;
use crate::skel::types::{nx_config, nx_log_ev};

use super::{threshold, NatEvent, NatEventKind};

/// The only pool natrix has, as natPoolId names it.
pub const POOL_ID: u32 = 1;

/// CLOCK_REALTIME minus CLOCK_TAI, in nanoseconds, now: what turns the data plane's
/// times (bpf_ktime_get_tai_ns) into UTC. Read when the event is converted, so a step of
/// the system clock between an event and its export moves both clocks alike and the event
/// keeps its true time.
pub fn tai_to_utc_ns() -> i64 {
    fn now(clock: libc::clockid_t) -> i128 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec it is given and nothing else.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    }
    (now(libc::CLOCK_REALTIME) - now(libc::CLOCK_TAI)) as i64
}

/// A data plane record (the bytes of one struct nx_log_ev) as an event; `offset_ns` is
/// [`tai_to_utc_ns`]. None for a record that is too short or of a kind natrix does not make.
pub fn from_record(rec: &[u8], offset_ns: i64) -> Option<NatEvent> {
    let n = std::mem::size_of::<nx_log_ev>();
    if rec.len() < n {
        return None;
    }
    let r: nx_log_ev = bytemuck::pod_read_unaligned(&rec[..n]);
    let kind = match r.kind {
        LOG_ADDRS_EXHAUSTED => NatEventKind::AddressesExhausted,
        LOG_SESS_CREATE => NatEventKind::SessionCreate,
        LOG_SESS_DELETE => NatEventKind::SessionDelete,
        LOG_PORTS_EXHAUSTED => NatEventKind::PortsExhausted,
        LOG_QUOTA => NatEventKind::QuotaExceeded,
        LOG_BLOCK_ALLOC => NatEventKind::BlockAlloc,
        LOG_BLOCK_FREE => NatEventKind::BlockFree,
        _ => return None,
    };
    let utc_ns = i128::from(r.time) + i128::from(offset_ns);
    let mut e = NatEvent::new(kind, (utc_ns.max(0) / 1_000_000) as u64);
    e.inside = ip(r.in_ip);
    e.outside = ip(r.out_ip);
    match kind {
        NatEventKind::BlockAlloc | NatEventKind::BlockFree => {
            e.port_start = r.in_port;
            e.port_end = r.out_port;
        }
        NatEventKind::SessionCreate | NatEventKind::SessionDelete => {
            e.proto = r.proto;
            e.in_port = r.in_port;
            e.out_port = r.out_port;
            if r.rem_ip != 0 {
                e.remote = Some(SocketAddrV4::new(ip(r.rem_ip), r.rem_port));
            }
        }
        NatEventKind::QuotaExceeded => {
            e.detail = u32::from(r.detail);
            e.limit = r.limit;
        }
        NatEventKind::PortsExhausted => e.proto = r.proto,
        NatEventKind::AddressesExhausted => e.pool_id = POOL_ID,
        _ => {}
    }
    Some(e)
}

/// An address as the data plane stores it (network order in a native u32).
fn ip(v: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from_be(v))
}

/// Global block `gid`'s pool address (from `pool`, in pool-index order) and ports.
pub fn block_ports(cfg: &nx_config, pool: &[Ipv4Addr], gid: u32) -> (Ipv4Addr, u16, u16) {
    let (bpa, bs) = (u32::from(cfg.blocks_per_addr).max(1), u32::from(cfg.block_size));
    let (a, j) = (gid / bpa, gid % bpa);
    let first = u32::from(cfg.port_lo) + j * bs;
    let addr = pool.get(a as usize).copied().unwrap_or(Ipv4Addr::UNSPECIFIED);
    (addr, first as u16, (first + bs - 1) as u16)
}

/// A block the daemon's sweep released (natEvent 17), at the time it released it.
pub fn block_free(cfg: &nx_config, pool: &[Ipv4Addr], r: &BlockRelease) -> NatEvent {
    block_event(cfg, pool, NatEventKind::BlockFree, r.gid, r.owner, r.time_ms)
}

/// A block event of `kind` for block `gid` held by `owner` (as the data plane stores it).
pub fn block_event(
    cfg: &nx_config,
    pool: &[Ipv4Addr],
    kind: NatEventKind,
    gid: u32,
    owner: u32,
    time_ms: u64,
) -> NatEvent {
    let (addr, lo, hi) = block_ports(cfg, pool, gid);
    let mut e = NatEvent::new(kind, time_ms);
    e.inside = ip(owner);
    e.outside = addr;
    e.port_start = lo;
    e.port_end = hi;
    e
}

/// The pool-utilisation threshold (natEvent 18): made once when the share of blocks in use
/// reaches the threshold, again only after it fell 5 points below it.
#[derive(Debug, Default)]
pub struct Threshold {
    above: bool,
}

impl Threshold {
    /// `used` of `total` blocks are in use now; `percent` the configured threshold (0:
    /// never). Returns the event to send, if this is a crossing.
    pub fn observe(&mut self, used: u64, total: u64, percent: u8, time_ms: u64) -> Option<NatEvent> {
        if percent == 0 || total == 0 {
            return None;
        }
        let share = used * 100 / total;
        if !self.above && share >= u64::from(percent) {
            self.above = true;
            let mut e = NatEvent::new(NatEventKind::ThresholdReached, time_ms);
            e.detail = threshold::POOL_HIGH;
            e.limit = u32::from(percent);
            e.pool_id = POOL_ID;
            return Some(e);
        }
        if self.above && share + 5 < u64::from(percent) {
            self.above = false;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(f: impl FnOnce(&mut nx_log_ev)) -> Vec<u8> {
        let mut r = nx_log_ev::default();
        f(&mut r);
        bytemuck::bytes_of(&r).to_vec()
    }

    #[test]
    fn records_become_events() {
        let b = rec(|r| {
            r.time = 5_000_000_000;
            r.kind = LOG_BLOCK_ALLOC;
            r.in_ip = u32::from(Ipv4Addr::new(100, 64, 0, 2)).to_be();
            r.out_ip = u32::from(Ipv4Addr::new(203, 0, 113, 1)).to_be();
            r.in_port = 1024;
            r.out_port = 1279;
        });
        let e = from_record(&b, 1_700_000_000_000_000_000 - 37_000_000_000).unwrap();
        assert_eq!(e.kind, NatEventKind::BlockAlloc);
        assert_eq!(e.time_ms, 1_700_000_000_000 - 37_000 + 5_000);
        assert_eq!((e.inside, e.outside), (Ipv4Addr::new(100, 64, 0, 2), Ipv4Addr::new(203, 0, 113, 1)));
        assert_eq!((e.port_start, e.port_end), (1024, 1279));
        let s = rec(|r| {
            r.kind = LOG_SESS_CREATE;
            r.proto = 17;
            r.in_port = 5000;
            r.out_port = 1030;
            r.rem_ip = u32::from(Ipv4Addr::new(198, 51, 100, 7)).to_be();
            r.rem_port = 53;
        });
        let e = from_record(&s, 0).unwrap();
        assert_eq!((e.proto, e.in_port, e.out_port), (17, 5000, 1030));
        assert_eq!(e.remote, Some("198.51.100.7:53".parse().unwrap()));
        let q = rec(|r| {
            r.kind = LOG_QUOTA;
            r.detail = 3;
            r.limit = 4096;
        });
        let e = from_record(&q, 0).unwrap();
        assert_eq!((e.kind, e.detail, e.limit), (NatEventKind::QuotaExceeded, 3, 4096));
        assert_eq!(from_record(&rec(|r| r.kind = 99), 0), None);
        assert_eq!(from_record(&b[..20], 0), None);
    }

    #[test]
    fn tai_offset_is_the_kernels() {
        // CLOCK_TAI is CLOCK_REALTIME plus the kernel's TAI offset (0 until NTP sets it, 37 s
        // since 2017): whole seconds, give or take the two reads
        let off = tai_to_utc_ns();
        let secs = (off as f64 / 1e9).round();
        assert!((-100.0..=0.0).contains(&secs), "{off}");
        assert!((off as f64 - secs * 1e9).abs() < 50e6, "{off}");
    }

    #[test]
    fn threshold_crosses_once() {
        let mut t = Threshold::default();
        assert!(t.observe(89, 100, 90, 1).is_none());
        let e = t.observe(90, 100, 90, 2).unwrap();
        assert_eq!((e.kind, e.detail, e.limit, e.pool_id), (NatEventKind::ThresholdReached, 1, 90, 1));
        assert!(t.observe(95, 100, 90, 3).is_none());
        assert!(t.observe(86, 100, 90, 4).is_none()); // not 5 points below yet
        assert!(t.observe(84, 100, 90, 5).is_none()); // re-armed
        assert!(t.observe(91, 100, 90, 6).is_some());
        assert!(t.observe(100, 100, 0, 7).is_none());
    }
}
