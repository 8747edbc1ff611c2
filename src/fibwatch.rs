// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Keeps the data plane's FIB cache honest (bpf/nx_fwd.h): a thread of the daemon listens
//! to the kernel's routing notifications (rtnetlink) and changes the cache's generation
//! word whenever the routing may answer differently, which makes every cached answer
//! stale at once. It also tells the cache whether the routing answers on the destination
//! alone, so that the cache may leave the source out of its key.
//!
//! What changes the word:
//! - a route, policy rule or nexthop object added or removed (IPv4), an address, a link
//!   (state, MTU, ...): every such message;
//! - a neighbour: only when an IPv4 neighbour's link-layer address or validity changes
//!   from what this thread last saw of it (a neighbour that merely turns stale answers
//!   the same); one it has not seen before counts as changed;
//! - lost notifications (the socket's buffer overflowed): everything is assumed changed.
//!
//! "The destination alone" (NX_FIBC_BY_DST) holds when the IPv4 policy rules are the
//! kernel's three defaults and no route is multipath (ECMP hashes the source). It is
//! checked from full dumps at start, then again at most once a second after a route, rule
//! or nexthop message; until a check says otherwise the bit is off (the safe key).
//!
//! The thread also writes a sign of life (the tick, every 200 ms at most): the data plane
//! trusts NX_FIBC_BY_DST only within NX_FIBC_ALIVE ticks (~1 s) of it, since a daemon
//! that crashed cannot report a policy rule added after it. Without a daemon the
//! generation stays as it is and fib_cache.max_age bounds how long an answer lives; on a
//! clean stop the bit is turned off first.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::tables::MmapWords;

/// NX_FIBC_BY_DST and NX_FIBC_GEN_STEP of bpf/nx_types.h; the word is the first u64 of
/// struct nx_fibc_gen, the sign of life the second.
pub use crate::abi::{FIBC_BY_DST as BY_DST, FIBC_GEN_STEP as GEN_STEP};

// linux/rtnetlink.h, linux/neighbour.h, linux/fib_rules.h, linux/netlink.h
const RTMGRP_LINK: u32 = 1 << 0;
const RTMGRP_NEIGH: u32 = 1 << 2;
const RTMGRP_IPV4_IFADDR: u32 = 1 << 4;
const RTMGRP_IPV4_ROUTE: u32 = 1 << 6;
const RTMGRP_IPV4_RULE: u32 = 1 << 7;
const RTMGRP_NEXTHOP: u32 = 1 << 31; // RTNLGRP_NEXTHOP = 32
const GROUPS: u32 =
    RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV4_RULE | RTMGRP_NEXTHOP;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const RTM_GETRULE: u16 = 34;
const RTM_NEWNEXTHOP: u16 = 104;
const RTM_DELNEXTHOP: u16 = 105;
const RTA_MULTIPATH: u16 = 9;
const RTA_NH_ID: u16 = 30;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
const FRA_SUPPRESS_PREFIXLEN: u16 = 14;
const FRA_PROTOCOL: u16 = 21;
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;
const AF_INET: u8 = libc::AF_INET as u8;
const FR_ACT_TO_TBL: u8 = 1;
/// The three rules every IPv4 namespace starts with: (priority, table).
const DEFAULT_RULES: [(u32, u32); 3] = [(0, 255), (32766, 254), (32767, 253)];
/// How often the full dumps behind NX_FIBC_BY_DST may run while routes keep changing.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// The generation word's next value: a new generation, with or without BY_DST.
pub fn next_word(word: u64, by_dst: bool) -> u64 {
    let gen = (word & 0xffff_ffff).wrapping_add(GEN_STEP) & 0xffff_fffe;
    gen | by_dst as u64
}

fn nl_socket(groups: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned from here on.
    let fd =
        unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: zeroed sockaddr_nl is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    sa.nl_groups = groups;
    // SAFETY: sa is a sockaddr_nl of the size given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if groups != 0 {
        // a burst of notifications (a routing daemon installing a table) must not overflow
        let size: libc::c_int = 4 << 20;
        // SAFETY: setsockopt with an int option. Failure only leaves the default size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
    }
    Ok(fd)
}

/// One netlink message: type and payload (after the 16-byte header).
struct Msg<'a> {
    ty: u16,
    body: &'a [u8],
}

fn messages(buf: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        if off + 16 > buf.len() {
            return None;
        }
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        let ty = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap());
        if len < 16 || off + len > buf.len() {
            return None;
        }
        let m = Msg { ty, body: &buf[off + 16..off + len] };
        off += (len + 3) & !3;
        Some(m)
    })
}

/// The attributes (type, payload) after a fixed header of `hdr` bytes.
fn attrs(body: &[u8], hdr: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut off = hdr;
    std::iter::from_fn(move || {
        if off + 4 > body.len() {
            return None;
        }
        let len = u16::from_ne_bytes(body[off..off + 2].try_into().unwrap()) as usize;
        let ty = u16::from_ne_bytes(body[off + 2..off + 4].try_into().unwrap()) & 0x3fff;
        if len < 4 || off + len > body.len() {
            return None;
        }
        let a = (ty, &body[off + 4..off + len]);
        off += (len + 3) & !3;
        Some(a)
    })
}

fn u32_of(b: &[u8]) -> Option<u32> {
    b.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
}

/// Sends a dump request of `ty` for IPv4 and calls `each` with every message of the answer.
fn dump(ty: u16, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let fd = nl_socket(0)?;
    let mut req = [0u8; 28];
    req[0..4].copy_from_slice(&28u32.to_ne_bytes());
    req[4..6].copy_from_slice(&ty.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = AF_INET; // rtmsg / fib_rule_hdr: family first, the rest zero
                       // SAFETY: sending a buffer we own.
    if unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 1 << 16];
    // bounded: a dump ends with NLMSG_DONE; this many reads of 64 KiB is ~10^7 routes
    for _ in 0..200_000 {
        // SAFETY: receiving into a buffer we own.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        for m in messages(&buf[..n as usize]) {
            match m.ty {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let e = m.body.get(..4).map(|b| i32::from_ne_bytes(b.try_into().unwrap())).unwrap_or(0);
                    if e != 0 {
                        return Err(io::Error::from_raw_os_error(-e));
                    }
                }
                _ => each(m.body),
            }
        }
    }
    Err(io::Error::other("netlink dump did not end"))
}

/// Whether an RTM_NEWRULE body is one of the kernel's default IPv4 rules, untouched.
fn is_default_rule(body: &[u8]) -> bool {
    // fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action, flags
    if body.len() < 12 || body[0] != AF_INET {
        return true; // not IPv4: not ours to judge
    }
    if body[1] != 0 || body[2] != 0 || body[3] != 0 || body[7] != FR_ACT_TO_TBL {
        return false;
    }
    let (mut prio, mut table) = (0u32, body[4] as u32);
    for (ty, v) in attrs(body, 12) {
        match ty {
            FRA_PRIORITY => prio = u32_of(v).unwrap_or(u32::MAX),
            FRA_TABLE => table = u32_of(v).unwrap_or(u32::MAX),
            FRA_PROTOCOL => {}
            // dumped with every rule; u32::MAX is "not set"
            FRA_SUPPRESS_PREFIXLEN if u32_of(v) == Some(u32::MAX) => {}
            _ => return false, // a selector (iif, oif, fwmark, ports, ...) or more
        }
    }
    DEFAULT_RULES.contains(&(prio, table))
}

/// Whether an RTM_NEWROUTE body is a multipath route (or uses a nexthop object, which may
/// be a group).
fn is_multipath_route(body: &[u8]) -> bool {
    body.len() >= 12 && attrs(body, 12).any(|(ty, _)| ty == RTA_MULTIPATH || ty == RTA_NH_ID)
}

/// Whether IPv4 routing in this namespace answers on the destination alone.
pub fn routing_by_dst() -> io::Result<bool> {
    let mut rules = 0usize;
    let mut simple = true;
    dump(RTM_GETRULE, |b| {
        if b.first() == Some(&AF_INET) {
            rules += 1;
            simple &= is_default_rule(b);
        }
    })?;
    if !simple || rules != DEFAULT_RULES.len() {
        return Ok(false);
    }
    let mut multipath = false;
    dump(RTM_GETROUTE, |b| multipath |= b.first() == Some(&AF_INET) && is_multipath_route(b))?;
    Ok(!multipath)
}

/// What one notification means for the cache.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    None,
    /// answers may differ
    Answers,
    /// answers may differ, and whether the source matters may have changed too
    Routing,
}

/// The neighbours seen so far: (ifindex, IPv4 address) -> link-layer address while valid.
type Neighbours = HashMap<(i32, [u8; 4]), Option<Vec<u8>>>;

fn classify(m: &Msg<'_>, neigh: &mut Neighbours) -> Change {
    match m.ty {
        RTM_NEWROUTE | RTM_DELROUTE | RTM_NEWRULE | RTM_DELRULE | RTM_NEWNEXTHOP | RTM_DELNEXTHOP => {
            Change::Routing
        }
        RTM_NEWNEIGH | RTM_DELNEIGH => {
            // ndmsg: family, pad1, pad2, ifindex (i32), state (u16), flags, type
            let b = m.body;
            if b.len() < 12 || b[0] != AF_INET {
                return Change::None;
            }
            let ifindex = i32::from_ne_bytes(b[4..8].try_into().unwrap());
            let state = u16::from_ne_bytes(b[8..10].try_into().unwrap());
            let (mut dst, mut ll) = (None, None);
            for (ty, v) in attrs(b, 12) {
                match ty {
                    NDA_DST if v.len() == 4 => dst = Some([v[0], v[1], v[2], v[3]]),
                    NDA_LLADDR => ll = Some(v.to_vec()),
                    _ => {}
                }
            }
            let Some(dst) = dst else { return Change::Answers };
            let now = if m.ty == RTM_NEWNEIGH && state & NUD_VALID != 0 { ll } else { None };
            match neigh.insert((ifindex, dst), now.clone()) {
                Some(before) if before == now => Change::None,
                // a neighbour never valid before and not valid now answered nothing
                None if now.is_none() => Change::None,
                _ => Change::Answers,
            }
        }
        _ => Change::Answers, // links, addresses
    }
}

/// The watcher thread's state.
struct Watch {
    sock: OwnedFd,
    gen: MmapWords,
    neigh: Neighbours,
    by_dst: bool,
    recheck: Option<Instant>,
}

impl Watch {
    fn alive(&self) {
        self.gen.words()[1].store(crate::tables::now_tick() as u64, Ordering::Release);
    }

    fn publish(&self) {
        let w = &self.gen.words()[0];
        let next = next_word(w.load(Ordering::Acquire), self.by_dst);
        w.store(next, Ordering::Release);
    }

    fn check_routing(&mut self) {
        self.by_dst = match routing_by_dst() {
            Ok(b) => b,
            Err(e) => {
                warn!("FIB cache: reading the routing policy: {e}; keying on the source too");
                false
            }
        };
        self.recheck = None;
        debug!(by_destination = self.by_dst, "FIB cache: routing policy checked");
    }

    /// Reads every pending notification; returns what they changed.
    fn drain(&mut self, buf: &mut [u8]) -> Change {
        let mut change = Change::None;
        for _ in 0..100_000 {
            // SAFETY: receiving into a buffer we own.
            let n = unsafe {
                libc::recv(self.sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => break,
                    Some(libc::EINTR) => continue,
                    Some(libc::ENOBUFS) => {
                        // notifications were lost: nothing known can be trusted
                        self.neigh.clear();
                        change = Change::Routing;
                        continue;
                    }
                    _ => {
                        warn!("FIB cache: netlink: {e}");
                        return Change::Routing;
                    }
                }
            }
            for m in messages(&buf[..n as usize]) {
                match classify(&m, &mut self.neigh) {
                    Change::Routing => change = Change::Routing,
                    Change::Answers if change == Change::None => change = Change::Answers,
                    _ => {}
                }
            }
        }
        change
    }

    fn run(mut self, stop: Arc<AtomicBool>) {
        let mut buf = vec![0u8; 1 << 16];
        while !stop.load(Ordering::Relaxed) {
            self.alive();
            let mut pfd = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let wait = match self.recheck {
                Some(t) => t.saturating_duration_since(Instant::now()).as_millis().min(200) as i32,
                None => 200,
            };
            // SAFETY: one pollfd we own.
            let rc = unsafe { libc::poll(&mut pfd, 1, wait) };
            if rc > 0 {
                match self.drain(&mut buf) {
                    Change::None => {}
                    Change::Answers => self.publish(),
                    Change::Routing => {
                        // whether the source matters is unknown until the next check
                        self.by_dst = false;
                        self.recheck.get_or_insert(Instant::now() + RECHECK_EVERY);
                        self.publish();
                    }
                }
            }
            if self.recheck.is_some_and(|t| Instant::now() >= t) {
                self.check_routing();
                if self.by_dst {
                    self.publish();
                }
            }
        }
        // no daemon from here on: key on the source too, in case the policy changes
        self.by_dst = false;
        self.publish();
    }
}

/// A watcher that stops (and is joined) when dropped: for data planes without a daemon
/// (`natrix-bench cost`).
pub struct Guard {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Guard {
    pub fn start(gen: MmapWords) -> io::Result<Guard> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = Some(spawn(gen, Arc::clone(&stop))?);
        Ok(Guard { stop, thread })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the watcher on the data plane's generation word (map nx_fibc_gen). The first
/// generation, with the routing policy checked, is published before this returns.
pub fn spawn(gen: MmapWords, stop: Arc<AtomicBool>) -> io::Result<JoinHandle<()>> {
    // subscribe before the first check: a change during it is not missed
    let sock = nl_socket(GROUPS)?;
    let mut w = Watch { sock, gen, neigh: HashMap::new(), by_dst: false, recheck: None };
    w.check_routing();
    w.alive();
    w.publish();
    std::thread::Builder::new().name("natrix-fibwatch".into()).spawn(move || w.run(stop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_word_changes_the_generation_and_sets_the_bit() {
        assert_eq!(next_word(0, false), 2);
        assert_eq!(next_word(0, true), 3);
        assert_eq!(next_word(3, false), 4);
        assert_eq!(next_word(0xffff_fffe, true), 1);
        assert_eq!(next_word(0xffff_ffff, false), 0);
    }

    fn neigh_msg(ifindex: i32, state: u16, dst: [u8; 4], ll: Option<[u8; 6]>) -> Vec<u8> {
        let mut b = vec![AF_INET, 0, 0, 0];
        b.extend(ifindex.to_ne_bytes());
        b.extend(state.to_ne_bytes());
        b.extend([0u8, 1]);
        b.extend(8u16.to_ne_bytes());
        b.extend(NDA_DST.to_ne_bytes());
        b.extend(dst);
        if let Some(ll) = ll {
            b.extend(10u16.to_ne_bytes());
            b.extend(NDA_LLADDR.to_ne_bytes());
            b.extend(ll);
            b.extend([0u8, 0]);
        }
        b
    }

    #[test]
    fn neighbours_count_only_when_their_answer_changes() {
        let mut n = Neighbours::new();
        let a = [0x02, 0, 0, 0, 0, 1];
        let b = [0x02, 0, 0, 0, 0, 2];
        let ip = [198, 51, 100, 2];
        let mut c = |ty, state, ll| {
            let body = neigh_msg(3, state, ip, ll);
            classify(&Msg { ty, body: &body }, &mut n)
        };
        // first sight of a valid neighbour: might differ from what is cached
        assert_eq!(c(RTM_NEWNEIGH, 0x02, Some(a)), Change::Answers);
        // reachable -> stale, same address: the FIB answers the same
        assert_eq!(c(RTM_NEWNEIGH, 0x04, Some(a)), Change::None);
        // a new link-layer address
        assert_eq!(c(RTM_NEWNEIGH, 0x02, Some(b)), Change::Answers);
        // failed, then deleted
        assert_eq!(c(RTM_NEWNEIGH, 0x20, Some(b)), Change::Answers);
        assert_eq!(c(RTM_DELNEIGH, 0x20, None), Change::None);
        // incomplete first: nothing cached could have used it
        let body = neigh_msg(3, 0x01, [198, 51, 100, 9], None);
        assert_eq!(classify(&Msg { ty: RTM_NEWNEIGH, body: &body }, &mut n), Change::None);
    }

    #[test]
    fn routes_rules_links_always_count() {
        let mut n = Neighbours::new();
        for ty in [RTM_NEWROUTE, RTM_DELROUTE, RTM_NEWRULE, RTM_DELRULE, RTM_NEWNEXTHOP] {
            assert_eq!(classify(&Msg { ty, body: &[AF_INET; 12] }, &mut n), Change::Routing);
        }
        assert_eq!(classify(&Msg { ty: 16, body: &[0; 16] }, &mut n), Change::Answers);
    }

    fn rule(prio: u32, table: u32, src_len: u8, extra: Option<u16>) -> Vec<u8> {
        let mut b = vec![AF_INET, 0, src_len, 0, table.min(255) as u8, 0, 0, FR_ACT_TO_TBL, 0, 0, 0, 0];
        for (ty, v) in [(FRA_PRIORITY, prio), (FRA_TABLE, table)] {
            b.extend(8u16.to_ne_bytes());
            b.extend(ty.to_ne_bytes());
            b.extend(v.to_ne_bytes());
        }
        if let Some(ty) = extra {
            b.extend(8u16.to_ne_bytes());
            b.extend(ty.to_ne_bytes());
            b.extend(1u32.to_ne_bytes());
        }
        b
    }

    #[test]
    fn default_rules_are_recognised_and_others_are_not() {
        assert!(is_default_rule(&rule(0, 255, 0, None)));
        assert!(is_default_rule(&rule(32766, 254, 0, None)));
        assert!(is_default_rule(&rule(32767, 253, 0, Some(FRA_PROTOCOL))));
        let mut r = rule(0, 255, 0, None);
        r.extend(8u16.to_ne_bytes());
        r.extend(FRA_SUPPRESS_PREFIXLEN.to_ne_bytes());
        r.extend(u32::MAX.to_ne_bytes());
        assert!(is_default_rule(&r), "as the kernel dumps its defaults");
        assert!(!is_default_rule(&rule(32766, 254, 0, Some(FRA_SUPPRESS_PREFIXLEN))));
        assert!(!is_default_rule(&rule(100, 254, 0, None)));
        assert!(!is_default_rule(&rule(32766, 254, 24, None))); // from a source prefix
        assert!(!is_default_rule(&rule(32766, 254, 0, Some(10)))); // fwmark
    }

    #[test]
    fn multipath_routes_are_recognised() {
        let mut r = vec![AF_INET, 0, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0];
        assert!(!is_multipath_route(&r));
        r.extend(8u16.to_ne_bytes());
        r.extend(RTA_NH_ID.to_ne_bytes());
        r.extend(7u32.to_ne_bytes());
        assert!(is_multipath_route(&r));
    }
}
