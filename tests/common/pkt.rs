// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Support for the BPF_PROG_TEST_RUN packet tests (tests/packet_*.rs):
//!
//! * [`pkt_netns`]: a throw-away network namespace of the namespace framework
//!   (tests/common/netns/mod.rs) with an inside and an outside veth pair, addresses,
//!   forwarding on and permanent neighbour entries with known MACs. The data
//!   plane's `bpf_fib_lookup` (and the devmap update in `configure`) resolve in the network
//!   namespace of the thread that makes the syscall, so every test body runs on a thread
//!   that entered the namespace ([`with_env`]).
//! * [`Env`]: a private (unpinned) data plane loaded and configured in that namespace, with
//!   helpers to run the XDP programs, read counters and tables, and sweep.
//! * [`Pkt`]: a packet description built with etherparse. Expected outputs are rebuilt from
//!   scratch from a modified description, so their checksums are computed from scratch and
//!   compared byte for byte with what the data plane produced incrementally.
//! * An independent one's-complement checksum check ([`assert_csums`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;

use etherparse::{Icmpv4Type, IpHeaders, IpNumber, Ipv4Dscp, Ipv4Header, PacketBuilder, TcpHeader};
use libbpf_rs::{MapHandle, ProgramInput};
use natrix::config::Config;
use natrix::dataplane::{self, ip_be, Dataplane, Persistence};
use natrix::expiry::{Reaper, SweepReport, Sweeper};
use natrix::skel::types::{nx_map, nx_map_key, nx_sess, nx_sess_key, nx_sub, xdp_md};
use natrix::tables::{stat_index, STATS};

// ---- verdicts, protocols ---------------------------------------------------------------

pub const XDP_ABORTED: u32 = 0;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

pub fn verdict_name(v: u32) -> &'static str {
    match v {
        XDP_ABORTED => "XDP_ABORTED",
        XDP_DROP => "XDP_DROP",
        XDP_PASS => "XDP_PASS",
        XDP_TX => "XDP_TX",
        XDP_REDIRECT => "XDP_REDIRECT",
        _ => "XDP_?",
    }
}

#[allow(unused_imports)] // each test uses some
pub use natrix::abi::{PROTO_ICMP as ICMP, PROTO_TCP as TCP, PROTO_UDP as UDP};
/// Protocol indexes (enum nx_proto_idx).
#[allow(unused_imports)] // each test uses some
pub use natrix::abi::{P_ICMP, P_TCP, P_UDP};

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// Values of `enum nx_tcp_state`.
#[allow(unused_imports)] // each test uses some
pub use natrix::abi::{
    TCP_EST as ST_EST, TCP_FIN_BOTH as ST_FIN_BOTH, TCP_FIN_IN as ST_FIN_IN, TCP_FIN_OUT as ST_FIN_OUT,
    TCP_NONE as ST_NONE, TCP_RST as ST_RST, TCP_SYN_IN as ST_SYN_IN, TCP_SYN_OUT as ST_SYN_OUT,
};

/// nx_sess.flags, nx_map.flags, port word states (bits 63..62 of an nx_ports entry).
#[allow(unused_imports)] // each test uses some
pub use natrix::abi::{
    MF_DET, MF_STATIC, PORT_FREE, PORT_HELD, PORT_STATE_SHIFT, PORT_STATIC, PORT_USED, SF_INBOUND, SF_PERMIT,
};

// ---- the test topology -------------------------------------------------------------------

pub const IN_IF: &str = "in0";
pub const OUT_IF: &str = "out0";
/// The gateway's own addresses.
pub const GW_IN: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
pub const GW_OUT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// MACs of the gateway's interfaces.
pub const IN_MAC: [u8; 6] = [0x02, 0x4e, 0x58, 0x00, 0x00, 0x01];
pub const OUT_MAC: [u8; 6] = [0x02, 0x4e, 0x58, 0x00, 0x00, 0x02];
const IN_PEER_MAC: [u8; 6] = [0x02, 0x4e, 0x58, 0x00, 0x01, 0x01];
const OUT_PEER_MAC: [u8; 6] = [0x02, 0x4e, 0x58, 0x00, 0x01, 0x02];
/// Remote servers with a permanent neighbour entry on out0.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
pub const SERVER2: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 3);
/// On out0's subnet, but no neighbour entry: bpf_fib_lookup answers NO_NEIGH.
pub const NO_NEIGH_REMOTE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 99);
/// On in0's subnet, but no neighbour entry.
pub const NO_NEIGH_SUB: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 99);
/// Subscribers 1..=NSUBS (100.64.0.2 ..) have permanent neighbour entries on in0.
pub const NSUBS: u8 = 8;
/// The default pool of [`Cfg::default`].
pub const POOL0: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 16);

/// Inside address of subscriber `n` (1-based): 100.64.0.(n+1).
pub fn sub(n: u8) -> Ipv4Addr {
    assert!((1..=200).contains(&n));
    Ipv4Addr::new(100, 64, 0, n + 1)
}

pub fn is_inside(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 100 && o[1] == 64 && o[2] == 0
}

/// The MAC a host has in the neighbour tables of the test namespace (and the MAC it
/// sends from). Hosts without a neighbour entry get a MAC nobody knows.
pub fn mac_of(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    if ip == GW_IN {
        return IN_MAC;
    }
    if ip == GW_OUT {
        return OUT_MAC;
    }
    if is_inside(ip) {
        return [0x02, 0x00, 0x00, 0x00, 0x10, o[3]];
    }
    if o[0] == 198 && o[1] == 51 && o[2] == 100 {
        return [0x02, 0x00, 0x00, 0x00, 0x20, o[3]];
    }
    [0x02, 0x00, 0x00, 0x00, 0xff, 0xff]
}

/// MAC of the gateway interface on the side of `ip`: in0 for subscriber space (RFC 6598
/// and RFC 1918, where the tests number subscribers), out0 for everything else.
pub fn gw_mac_towards(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    let subscriber_space = (o[0] == 100 && (64..128).contains(&o[1]))
        || o[0] == 10
        || (o[0] == 172 && (16..32).contains(&o[1]))
        || (o[0] == 192 && o[1] == 168);
    if subscriber_space {
        IN_MAC
    } else {
        OUT_MAC
    }
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

// ---- network namespace ---------------------------------------------------------------------

/// The framework's, re-exported for the packet tests' threads that enter [`Env::ns`].
#[allow(unused_imports)] // some tests use it
pub use super::netns::enter_netns;
use super::netns::{end, in_netns, ns_ip, ns_sh, veth, Netns};

/// A fresh namespace of the framework (tests/common/netns/mod.rs: unique name, deleted on
/// drop, also when the test panics) set up for the packet tests:
///
/// ```text
///   in0  100.64.0.1/24   02:4e:58:00:00:01  (peer in0p)
///        neighbours 100.64.0.2 .. 100.64.0.9 (subscribers 1..=8), permanent
///   out0 198.51.100.1/24 02:4e:58:00:00:02  (peer out0p)
///        neighbours 198.51.100.2, 198.51.100.3 (servers), permanent
///   none for 100.64.0.99 and 198.51.100.99
/// ```
pub fn pkt_netns() -> Netns {
    let ns = Netns::new("pt");
    let n = ns.name();
    veth(end(n, IN_IF).mac(IN_MAC), end(n, &format!("{IN_IF}p")).mac(IN_PEER_MAC));
    veth(end(n, OUT_IF).mac(OUT_MAC), end(n, &format!("{OUT_IF}p")).mac(OUT_PEER_MAC));
    let mut b = String::new();
    b += &format!("addr add {GW_IN}/24 dev {IN_IF}\n");
    b += &format!("addr add {GW_OUT}/24 dev {OUT_IF}\n");
    for l in [IN_IF, OUT_IF] {
        b += &format!("link set {l} up\nlink set {l}p up\n");
    }
    for n in 1..=NSUBS {
        b += &format!("neigh add {} lladdr {} dev {IN_IF} nud permanent\n", sub(n), mac_str(mac_of(sub(n))));
    }
    for s in [SERVER, SERVER2] {
        b += &format!("neigh add {s} lladdr {} dev {OUT_IF} nud permanent\n", mac_str(mac_of(s)));
    }
    ns.ip_batch(&b);
    // Every veth's carrier reported before the test starts: a FIB cache watcher started
    // before that notification would see a routing change in the middle of a test.
    let links = [IN_IF, OUT_IF, &format!("{IN_IF}p"), &format!("{OUT_IF}p")];
    if let Err(text) = ns.wait_carrier(&links, std::time::Duration::from_secs(5)) {
        eprintln!("warning: the test namespace's links did not report carrier within 5 s:\n{text}");
    }
    // without forwarding, bpf_fib_lookup answers "forwarding disabled"
    ns_sh(ns.name(), &["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.forwarding=1"]);
    ns
}

// ---- configuration -------------------------------------------------------------------------

/// A test configuration, section by section; values are TOML literals.
#[derive(Clone, Debug)]
pub struct Cfg {
    sections: BTreeMap<&'static str, BTreeMap<&'static str, String>>,
    /// Appended verbatim: arrays of tables such as [[exclude]] and [[forward]].
    raw: String,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg { sections: BTreeMap::new(), raw: String::new() }
            .set("interfaces", "inside", &format!("[\"{IN_IF}\"]"))
            .set("interfaces", "outside", &format!("[\"{OUT_IF}\"]"))
            .set("pool", "addresses", "[\"203.0.113.16/29\"]")
            // small tables: every test loads its own data plane
            .set("limits", "max_subscribers", "256")
            .set("limits", "max_mappings", "4096")
            .set("limits", "max_sessions", "8192")
    }
}

impl Cfg {
    pub fn set(mut self, section: &'static str, key: &'static str, value: &str) -> Self {
        self.sections.entry(section).or_default().insert(key, value.to_string());
        self
    }

    /// Appends raw TOML (after the tables), e.g. "[[exclude]]\nprefix = \"...\"\n".
    pub fn raw(mut self, toml: &str) -> Self {
        self.raw += toml;
        self.raw += "\n";
        self
    }

    pub fn toml(&self) -> String {
        let mut s = String::new();
        for (sec, kv) in &self.sections {
            s += &format!("[{sec}]\n");
            for (k, v) in kv {
                s += &format!("{k} = {v}\n");
            }
        }
        s + &self.raw
    }
}

// ---- the loaded data plane -------------------------------------------------------------------

/// Which XDP program a packet goes through: the one on the inside or the outside interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Inside,
    Outside,
}

pub struct Env {
    pub dp: Dataplane,
    pub cfg: Config,
    pub ns: String,
    pub in_ifindex: u32,
    pub out_ifindex: u32,
    sweeper: RefCell<Option<Sweeper>>,
    /// The FIB cache's watcher, as the daemon runs it (src/fibwatch.rs), while the cache
    /// is on; stopped when dropped.
    fibwatch: RefCell<Option<natrix::fibwatch::Guard>>,
}

/// Creates a namespace, loads and configures a private data plane in it from `cfg`, and
/// runs `f` on a thread inside the namespace. Panics of `f` propagate; the namespace is
/// deleted in every case.
pub fn with_env<F: FnOnce(&Env) + Send>(cfg: &Cfg, f: F) {
    let toml = cfg.toml();
    let ns = pkt_netns();
    in_netns(ns.name(), || {
        pin_to_this_cpu();
        let env = Env::new(&toml, ns.name());
        f(&env);
    });
}

/// Keeps the test's thread on the CPU it runs on: BPF_PROG_TEST_RUN runs the program there,
/// and per-CPU state (the FIB cache, counters' slots, the ICMP token bucket) must be the
/// same CPU's from one packet of a test to the next, even when the scheduler would move it.
fn pin_to_this_cpu() {
    // SAFETY: sched_getcpu and sched_setaffinity on the calling thread, with a zeroed,
    // then filled, cpu_set_t of the right size.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).expect("name");
    // SAFETY: valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "expected interface {name} in the test namespace");
    i
}

impl Env {
    fn new(toml: &str, ns: &str) -> Env {
        let cfg = Config::from_toml_str(toml)
            .unwrap_or_else(|e| panic!("expected the test config to parse: {e}\n{toml}"));
        let ifaces = dataplane::resolve_interfaces(&cfg).expect("expected in0/out0 in the test namespace");
        let dp = Dataplane::load(&cfg, Persistence::Private).expect("expected the data plane to load");
        dp.configure(&cfg, &ifaces).expect("expected configure() to succeed");
        let env = Env {
            dp,
            cfg,
            ns: ns.to_string(),
            in_ifindex: ifindex(IN_IF),
            out_ifindex: ifindex(OUT_IF),
            sweeper: RefCell::new(None),
            fibwatch: RefCell::new(None),
        };
        if env.cfg.fib_cache.entries > 0 {
            // started on this thread, in the test namespace: its sockets are that namespace's
            let g = natrix::fibwatch::Guard::start(env.fib_gen_words())
                .expect("expected the FIB cache watcher to start");
            *env.fibwatch.borrow_mut() = Some(g);
        }
        env
    }

    // ---- the FIB cache ----

    pub fn fib_gen_words(&self) -> natrix::tables::MmapWords {
        let h = MapHandle::try_from(&self.dp.skel.maps.nx_fibc_gen).expect("expected nx_fibc_gen");
        natrix::tables::MmapWords::new(&h, "nx_fibc_gen").expect("expected nx_fibc_gen to mmap")
    }

    /// The FIB cache's generation word (NX_FIBC_*).
    pub fn fib_gen(&self) -> u64 {
        self.fib_gen_words().words()[0].load(Ordering::Acquire)
    }

    /// Waits (2 s at most) until the generation word differs from `before` and, with
    /// `by_dst`, has NX_FIBC_BY_DST as asked; returns it.
    pub fn wait_fib_gen(&self, before: u64, by_dst: Option<bool>, what: &str) -> u64 {
        let t0 = std::time::Instant::now();
        loop {
            let g = self.fib_gen();
            if g != before && by_dst.is_none_or(|b| (g & natrix::fibwatch::BY_DST != 0) == b) {
                return g;
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(2),
                "{what}: expected the FIB cache's generation word to change from {before:#x} \
                 (by destination: {by_dst:?}) within 2 s, it is {g:#x}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Stops the watcher, as when no daemon runs (the last word it publishes keys the cache
    /// on the source too).
    pub fn stop_fibwatch(&self) {
        drop(self.fibwatch.borrow_mut().take());
    }

    fn prog(&self, side: Side) -> &libbpf_rs::ProgramMut<'static> {
        match side {
            Side::Inside => &self.dp.skel.progs.nx_xdp_inside,
            Side::Outside => &self.dp.skel.progs.nx_xdp_outside,
        }
    }

    fn ifindex(&self, side: Side) -> u32 {
        match side {
            Side::Inside => self.in_ifindex,
            Side::Outside => self.out_ifindex,
        }
    }

    /// Runs `ip -n <the test namespace> args...` (e.g. to change an MTU).
    pub fn ip(&self, args: &[&str]) {
        ns_ip(&self.ns, args);
    }

    /// Raw fd and ingress ifindex of a program, for runs from other threads ([`xdp_run_fd`]).
    pub fn prog_fd(&self, side: Side) -> (i32, u32) {
        (self.prog(side).as_fd().as_raw_fd(), self.ifindex(side))
    }

    /// Runs the program of `side` on `pkt` as if it arrived on in0/out0.
    /// Returns the verdict and the packet as the program left it.
    pub fn run(&self, side: Side, pkt: &[u8]) -> (u32, Vec<u8>) {
        self.run_meta(side, pkt, 0)
    }

    /// Like [`Env::run`], but the first `meta` bytes of `data` are XDP metadata in front of
    /// the packet (how a frame shorter than an Ethernet header can be tested at all:
    /// BPF_PROG_TEST_RUN refuses data_in shorter than 14 bytes).
    pub fn run_meta(&self, side: Side, data: &[u8], meta: usize) -> (u32, Vec<u8>) {
        self.try_run_meta(side, data, meta).expect("expected BPF_PROG_TEST_RUN to succeed")
    }

    /// [`Env::run_meta`] that returns the kernel's refusal instead of panicking.
    pub fn try_run_meta(
        &self,
        side: Side,
        data: &[u8],
        meta: usize,
    ) -> Result<(u32, Vec<u8>), libbpf_rs::Error> {
        let ctx = xdp_md {
            data: meta as u32,
            data_end: data.len() as u32,
            ingress_ifindex: self.ifindex(side),
            ..Default::default()
        };
        let mut ctx_bytes = bytemuck::bytes_of(&ctx).to_vec();
        let mut out = vec![0u8; data.len() + 512];
        let input = ProgramInput {
            context_in: Some(&mut ctx_bytes),
            data_in: Some(data),
            data_out: Some(&mut out),
            ..Default::default()
        };
        let o = self.prog(side).test_run(input)?;
        let (rv, n) = (o.return_value, o.data.as_ref().map_or(0, |d| d.len()));
        out.truncate(n);
        out.drain(..meta.min(out.len()));
        Ok((rv, out))
    }

    /// From the inside (nx_xdp_inside, ingress in0).
    pub fn inside(&self, pkt: &[u8]) -> (u32, Vec<u8>) {
        self.run(Side::Inside, pkt)
    }

    /// From the outside (nx_xdp_outside, ingress out0).
    pub fn outside(&self, pkt: &[u8]) -> (u32, Vec<u8>) {
        self.run(Side::Outside, pkt)
    }

    /// Sends `p` and asserts the verdict; returns the output frame.
    pub fn expect_verdict(&self, side: Side, p: &[u8], verdict: u32, what: &str) -> Vec<u8> {
        let before = self.stats();
        let (v, out) = self.run(side, p);
        if v != verdict {
            let after = self.stats();
            let moved: Vec<String> = STATS
                .iter()
                .filter(|(s, _)| after[s.0 as usize] != before[s.0 as usize])
                .map(|(s, n)| format!("{n} +{}", after[s.0 as usize] - before[s.0 as usize]))
                .collect();
            panic!(
                "{what}: expected verdict {}, got {} (counters that moved: {})",
                verdict_name(verdict),
                verdict_name(v),
                moved.join(", ")
            );
        }
        out
    }

    // ---- counters ----

    pub fn stats(&self) -> Vec<u64> {
        self.dp.tables.stats().expect("expected nx_stats to be readable")
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats()[stat_idx(name)]
    }

    /// Asserts that, since `before`, every counter listed in `expect` moved by exactly the
    /// given amount and EVERY other counter did not move at all.
    pub fn assert_counters(&self, before: &[u64], expect: &[(&str, u64)], what: &str) {
        let after = self.stats();
        let mut errs = Vec::new();
        for (s, name) in STATS {
            let i = s.0 as usize;
            let d = after[i].wrapping_sub(before[i]);
            let listed = expect.iter().find(|(n, _)| n == name);
            // how often the FIB cache missed depends on what ran before: checked only
            // where a test names it
            if listed.is_none() && *name == "fib_lookups" {
                continue;
            }
            let want = listed.map_or(0, |(_, v)| *v);
            if d != want {
                errs.push(format!("{name}: expected +{want}, got +{d}"));
            }
        }
        for (n, _) in expect {
            assert!(stat_index(n).is_some(), "{what}: no counter named {n}");
        }
        assert!(errs.is_empty(), "{what}: counters differ from what was expected: {}", errs.join("; "));
    }

    /// Asserts the deltas of the listed counters only.
    pub fn assert_some_counters(&self, before: &[u64], expect: &[(&str, u64)], what: &str) {
        let after = self.stats();
        for (n, want) in expect {
            let i = stat_idx(n);
            let d = after[i].wrapping_sub(before[i]);
            assert_eq!(d, *want, "{what}: expected counter {n} to move by +{want}, it moved by +{d}");
        }
    }

    // ---- tables ----

    pub fn mappings(&self) -> Vec<(nx_map_key, nx_map)> {
        self.dp.tables.mappings().expect("expected nx_maps to be readable")
    }

    pub fn sessions(&self) -> Vec<(nx_sess_key, nx_sess)> {
        self.dp.tables.sessions().expect("expected nx_sess to be readable")
    }

    /// Sessions proper: without the address-dependent filtering records (NX_SF_PERMIT).
    pub fn live_sessions(&self) -> Vec<(nx_sess_key, nx_sess)> {
        self.sessions().into_iter().filter(|(_, s)| s.flags & SF_PERMIT == 0).collect()
    }

    pub fn subscribers(&self) -> Vec<(u32, nx_sub)> {
        self.dp.tables.subscribers().expect("expected nx_subs to be readable")
    }

    /// Subscribers as the data plane counts them (nx_tab_cnt), which enforces the limit.
    pub fn subscriber_count(&self) -> u32 {
        self.dp.tables.subscriber_count().expect("expected nx_tab_cnt to be readable")
    }

    pub fn subscriber(&self, ip: Ipv4Addr) -> Option<nx_sub> {
        self.subscribers().into_iter().find(|(k, _)| *k == ip_be(ip)).map(|(_, s)| s)
    }

    pub fn mapping(&self, ip: Ipv4Addr, port: u16, proto: u8) -> Option<nx_map> {
        self.dp.tables.mapping(&map_key(ip, port, proto)).expect("expected nx_maps lookup to work")
    }

    pub fn session(
        &self,
        in_ip: Ipv4Addr,
        in_port: u16,
        rem: Ipv4Addr,
        rem_port: u16,
        proto: u8,
    ) -> Option<nx_sess> {
        self.dp
            .tables
            .session(&sess_key(in_ip, in_port, rem, rem_port, proto))
            .expect("expected nx_sess lookup to work")
    }

    pub fn port_word(&self, addr_idx: u32, proto: u8, port: u16) -> u64 {
        self.dp.tables.port_word(addr_idx, proto, port).expect("expected nx_ports to be readable")
    }

    pub fn block_word(&self, gid: u32) -> u64 {
        self.dp.tables.block_word(gid).expect("expected nx_blocks to be readable")
    }

    /// Index of a pool address in the configured pool.
    pub fn pool_index(&self, ip: Ipv4Addr) -> u32 {
        self.cfg
            .pool
            .addresses
            .iter()
            .position(|a| *a == ip)
            .unwrap_or_else(|| panic!("expected {ip} to be a pool address")) as u32
    }

    pub fn block_size(&self) -> u32 {
        self.cfg.nat.block_size as u32
    }

    pub fn blocks_per_addr(&self) -> u32 {
        self.cfg.block_count_per_addr()
    }

    /// Outside port range [lo, hi) of global block `gid`, and its pool index.
    pub fn block_range(&self, gid: u32) -> (u32, u32, u32) {
        let bpa = self.blocks_per_addr();
        let addr = gid / bpa;
        let lo = self.cfg.pool.port_lo as u32 + (gid % bpa) * self.block_size();
        (addr, lo, lo + self.block_size())
    }

    /// Global block id of an outside port on pool index `addr`.
    pub fn block_of(&self, addr: u32, port: u16) -> u32 {
        addr * self.blocks_per_addr() + (port as u32 - self.cfg.pool.port_lo as u32) / self.block_size()
    }

    /// Every mapping, session and subscriber entry, as sorted text: to show that something
    /// (an ICMP error, a dropped packet) changed no state at all, timers included.
    pub fn snapshot(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.mappings().iter().map(|(k, m)| format!("mapping {k:?} => {m:?}")).collect();
        v.extend(self.sessions().iter().map(|(k, s)| format!("session {k:?} => {s:?}")));
        v.extend(self.subscribers().iter().map(|(k, s)| format!("subscriber {k:#010x} => {s:?}")));
        v.sort();
        v
    }

    /// Asserts that no mapping, session or subscriber entry was created, deleted or changed
    /// (expiry timers and TCP state included) since `before` ([`Env::snapshot`]).
    pub fn assert_unchanged(&self, before: &[String], what: &str) {
        let after = self.snapshot();
        if after == before {
            return;
        }
        let gone: Vec<&String> = before.iter().filter(|e| !after.contains(e)).collect();
        let new: Vec<&String> = after.iter().filter(|e| !before.contains(e)).collect();
        panic!(
            "{what}: expected no state to change; before only:\n  {}\nafter only:\n  {}",
            gone.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
            new.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
        );
    }

    pub fn assert_no_state(&self, what: &str) {
        let (m, s, u) = (self.mappings().len(), self.sessions().len(), self.subscribers().len());
        assert!(
            m == 0 && s == 0 && u == 0,
            "{what}: expected no mapping, session or subscriber, found {m} mappings, {s} sessions, {u} subscribers"
        );
    }

    /// One sweep of the daemon's expiry (the same Sweeper across calls, as in the daemon).
    pub fn sweep(&self) -> SweepReport {
        let mut sw = self.sweeper.borrow_mut();
        if sw.is_none() {
            *sw =
                Some(Sweeper::new(&self.dp.tables).expect("expected the sweeper to map nx_ports/nx_blocks"));
        }
        let reaper: Reaper<'_> = self.dp.reaper().expect("the reaper's programs and nx_reap_buf");
        sw.as_mut().expect("sweeper").sweep(&self.dp.tables, &reaper).expect("expected the sweep to succeed")
    }

    /// What the last sweep counted (the metrics endpoint's snapshot); default before one.
    pub fn occupancy(&self) -> natrix::expiry::Occupancy {
        self.sweeper.borrow().as_ref().map(|s| s.occupancy().clone()).unwrap_or_default()
    }

    /// Sends a first outbound packet of a flow and returns the outside (address, port/id)
    /// the data plane chose, after checking the verdict is XDP_REDIRECT.
    pub fn open(&self, p: &Pkt) -> (Ipv4Addr, u16) {
        let (v, out) = self.inside(&p.build());
        assert_eq!(
            v,
            XDP_REDIRECT,
            "opening {}: expected XDP_REDIRECT, got {}",
            p.describe(),
            verdict_name(v)
        );
        (src_ip(&out), sport(&out))
    }
}

pub fn stat_idx(name: &str) -> usize {
    stat_index(name).unwrap_or_else(|| panic!("no counter named {name}"))
}

pub fn map_key(ip: Ipv4Addr, port: u16, proto: u8) -> nx_map_key {
    nx_map_key { in_ip: ip_be(ip), in_port: port.to_be(), proto, pad: 0 }
}

pub fn sess_key(in_ip: Ipv4Addr, in_port: u16, rem: Ipv4Addr, rem_port: u16, proto: u8) -> nx_sess_key {
    nx_sess_key {
        in_ip: ip_be(in_ip),
        rem_ip: ip_be(rem),
        in_port: in_port.to_be(),
        rem_port: rem_port.to_be(),
        proto,
        pad: [0; 3],
    }
}

/// BPF_PROG_TEST_RUN on a raw program fd, for threads that cannot share the skeleton.
/// The calling thread must be in the test namespace.
pub fn xdp_run_fd(fd: i32, ifindex: u32, pkt: &[u8]) -> (u32, Vec<u8>) {
    use libbpf_rs::libbpf_sys;
    let ctx = xdp_md { data: 0, data_end: pkt.len() as u32, ingress_ifindex: ifindex, ..Default::default() };
    let mut out = vec![0u8; pkt.len() + 512];
    // SAFETY: zero is a valid bpf_test_run_opts; every pointer set below outlives the call.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.ctx_in = (&ctx as *const xdp_md).cast();
    opts.ctx_size_in = std::mem::size_of::<xdp_md>() as _;
    opts.data_in = pkt.as_ptr().cast();
    opts.data_size_in = pkt.len() as _;
    opts.data_out = out.as_mut_ptr().cast();
    opts.data_size_out = out.len() as _;
    // SAFETY: valid program fd and options.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(fd, &mut opts) };
    assert_eq!(rc, 0, "expected BPF_PROG_TEST_RUN to succeed: {}", std::io::Error::last_os_error());
    out.truncate(opts.data_size_out as usize);
    (opts.retval, out)
}

// ---- packets ---------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4 {
    Udp { sport: u16, dport: u16 },
    Tcp { sport: u16, dport: u16, flags: u8, seq: u32, ack: u32 },
    Echo { reply: bool, id: u16, seq: u16 },
    Icmp { typ: u8, code: u8, rest: [u8; 4] },
    Other { proto: u8 },
}

/// An Ethernet/IPv4 packet, described by its fields and built with etherparse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pkt {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub ident: u16,
    pub df: bool,
    pub dscp: u8,
    pub l4: L4,
    pub payload: Vec<u8>,
    /// UDP only: send with checksum 0 ("none").
    pub udp_no_csum: bool,
    /// Link-layer padding after the IP packet.
    pub padding: usize,
    /// IPv4 options (a multiple of 4 bytes).
    pub ip_opts: Vec<u8>,
    /// TCP options (a multiple of 4 bytes).
    pub tcp_opts: Vec<u8>,
}

impl Pkt {
    /// A packet from `src` to `dst` as it arrives at the gateway: from the host's MAC to the
    /// gateway's MAC on the side of `src`.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, l4: L4) -> Pkt {
        Pkt {
            smac: mac_of(src),
            dmac: gw_mac_towards(src),
            src,
            dst,
            ttl: 64,
            ident: 0x5a17,
            df: true,
            dscp: 10,
            l4,
            payload: b"natrix".to_vec(),
            udp_no_csum: false,
            padding: 0,
            ip_opts: Vec::new(),
            tcp_opts: Vec::new(),
        }
    }

    pub fn udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Pkt {
        Pkt::new(src, dst, L4::Udp { sport, dport })
    }

    pub fn tcp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, flags: u8) -> Pkt {
        let mut p = Pkt::new(src, dst, L4::Tcp { sport, dport, flags, seq: 1_000_000, ack: 0 });
        if flags & ACK != 0 {
            p = p.ack_no(2_000_001);
        }
        if flags & (SYN | FIN | RST) != 0 {
            p.payload.clear();
        }
        if flags & SYN != 0 {
            p.tcp_opts = vec![2, 4, 0x05, 0xb4]; // MSS 1460: a SYN with a data offset of 6
        }
        p
    }

    pub fn echo_request(src: Ipv4Addr, dst: Ipv4Addr, id: u16) -> Pkt {
        Pkt::new(src, dst, L4::Echo { reply: false, id, seq: 7 })
    }

    pub fn echo_reply(src: Ipv4Addr, dst: Ipv4Addr, id: u16) -> Pkt {
        Pkt::new(src, dst, L4::Echo { reply: true, id, seq: 7 })
    }

    pub fn icmp(src: Ipv4Addr, dst: Ipv4Addr, typ: u8, code: u8) -> Pkt {
        Pkt::new(src, dst, L4::Icmp { typ, code, rest: [0x12, 0x34, 0x00, 0x01] })
    }

    /// An ICMP error (or any non-echo message): type, code, bytes 5-8, and the quote.
    pub fn icmp_err(src: Ipv4Addr, dst: Ipv4Addr, typ: u8, code: u8, rest: [u8; 4], quote: &[u8]) -> Pkt {
        Pkt::new(src, dst, L4::Icmp { typ, code, rest }).payload(quote)
    }

    pub fn other(src: Ipv4Addr, dst: Ipv4Addr, proto: u8) -> Pkt {
        Pkt::new(src, dst, L4::Other { proto })
    }

    pub fn payload(mut self, p: &[u8]) -> Pkt {
        self.payload = p.to_vec();
        self
    }

    pub fn ttl(mut self, t: u8) -> Pkt {
        self.ttl = t;
        self
    }

    pub fn no_udp_csum(mut self) -> Pkt {
        self.udp_no_csum = true;
        self
    }

    pub fn padded(mut self, n: usize) -> Pkt {
        self.padding = n;
        self
    }

    pub fn ip_options(mut self, o: &[u8]) -> Pkt {
        self.ip_opts = o.to_vec();
        self
    }

    pub fn tcp_options(mut self, o: &[u8]) -> Pkt {
        self.tcp_opts = o.to_vec();
        self
    }

    pub fn ack_no(mut self, a: u32) -> Pkt {
        if let L4::Tcp { ack, .. } = &mut self.l4 {
            *ack = a;
        }
        self
    }

    pub fn seq_no(mut self, s: u32) -> Pkt {
        if let L4::Tcp { seq, .. } = &mut self.l4 {
            *seq = s;
        }
        self
    }

    pub fn proto(&self) -> u8 {
        match self.l4 {
            L4::Udp { .. } => UDP,
            L4::Tcp { .. } => TCP,
            L4::Echo { .. } | L4::Icmp { .. } => ICMP,
            L4::Other { proto } => proto,
        }
    }

    /// Source port (TCP/UDP) or echo identifier.
    pub fn sport(&self) -> u16 {
        match self.l4 {
            L4::Udp { sport, .. } | L4::Tcp { sport, .. } => sport,
            L4::Echo { id, .. } => id,
            _ => 0,
        }
    }

    /// Destination port (TCP/UDP) or echo identifier.
    pub fn dport(&self) -> u16 {
        match self.l4 {
            L4::Udp { dport, .. } | L4::Tcp { dport, .. } => dport,
            L4::Echo { id, .. } => id,
            _ => 0,
        }
    }

    /// The same packet with a new source address and port (echo: identifier).
    pub fn with_src(mut self, ip: Ipv4Addr, port: u16) -> Pkt {
        self.src = ip;
        match &mut self.l4 {
            L4::Udp { sport, .. } | L4::Tcp { sport, .. } => *sport = port,
            L4::Echo { id, .. } => *id = port,
            _ => {}
        }
        self
    }

    /// The same packet with a new destination address and port (echo: identifier).
    pub fn with_dst(mut self, ip: Ipv4Addr, port: u16) -> Pkt {
        self.dst = ip;
        match &mut self.l4 {
            L4::Udp { dport, .. } | L4::Tcp { dport, .. } => *dport = port,
            L4::Echo { id, .. } => *id = port,
            _ => {}
        }
        self
    }

    /// The same packet as the gateway forwards it: TTL - 1, from the gateway's MAC on the
    /// side of the destination to the destination's MAC.
    pub fn forwarded(mut self) -> Pkt {
        self.ttl -= 1;
        self.smac = gw_mac_towards(self.dst);
        self.dmac = mac_of(self.dst);
        self
    }

    pub fn describe(&self) -> String {
        let l4 = match &self.l4 {
            L4::Udp { sport, dport } => format!("UDP {}:{sport} -> {}:{dport}", self.src, self.dst),
            L4::Tcp { sport, dport, flags, .. } => {
                format!("TCP {}:{sport} -> {}:{dport} flags {flags:#04x}", self.src, self.dst)
            }
            L4::Echo { reply, id, .. } => format!(
                "ICMP echo {} {} -> {} id {id}",
                if *reply { "reply" } else { "request" },
                self.src,
                self.dst
            ),
            L4::Icmp { typ, code, .. } => format!("ICMP {typ}/{code} {} -> {}", self.src, self.dst),
            L4::Other { proto } => format!("IP proto {proto} {} -> {}", self.src, self.dst),
        };
        format!("{l4} ttl {}", self.ttl)
    }

    /// The frame, every length and checksum computed by etherparse.
    pub fn build(&self) -> Vec<u8> {
        let ip = Ipv4Header {
            source: self.src.octets(),
            destination: self.dst.octets(),
            time_to_live: self.ttl,
            identification: self.ident,
            dont_fragment: self.df,
            dscp: Ipv4Dscp::try_new(self.dscp).expect("dscp"),
            options: self
                .ip_opts
                .as_slice()
                .try_into()
                .expect("IPv4 options: a multiple of 4, at most 40 bytes"),
            ..Default::default()
        };
        let b = PacketBuilder::ethernet2(self.smac, self.dmac).ip(IpHeaders::Ipv4(ip, Default::default()));
        let mut out = Vec::new();
        let pl = &self.payload;
        match &self.l4 {
            L4::Udp { sport, dport } => b.udp(*sport, *dport).write(&mut out, pl),
            L4::Tcp { sport, dport, flags, seq, ack } => {
                let mut h = TcpHeader::new(*sport, *dport, *seq, 64240);
                h.fin = flags & FIN != 0;
                h.syn = flags & SYN != 0;
                h.rst = flags & RST != 0;
                h.psh = flags & PSH != 0;
                h.ack = flags & ACK != 0;
                h.acknowledgment_number = *ack;
                h.set_options_raw(&self.tcp_opts).expect("TCP options: a multiple of 4, at most 40 bytes");
                b.tcp_header(h).write(&mut out, pl)
            }
            L4::Echo { reply: false, id, seq } => b.icmpv4_echo_request(*id, *seq).write(&mut out, pl),
            L4::Echo { reply: true, id, seq } => b.icmpv4_echo_reply(*id, *seq).write(&mut out, pl),
            L4::Icmp { typ, code, rest } => b
                .icmpv4(Icmpv4Type::Unknown { type_u8: *typ, code_u8: *code, bytes5to8: *rest })
                .write(&mut out, pl),
            L4::Other { proto } => b.write(&mut out, IpNumber(*proto), pl),
        }
        .expect("expected etherparse to build the packet");
        if self.udp_no_csum {
            assert!(matches!(self.l4, L4::Udp { .. }), "no_udp_csum on a non-UDP packet");
            let o = l4_off(&out);
            out[o + 6] = 0;
            out[o + 7] = 0;
        }
        out.resize(out.len() + self.padding, 0);
        out
    }
}

// ---- reading frames --------------------------------------------------------------------------

pub const ETH_LEN: usize = 14;

pub fn ihl(f: &[u8]) -> usize {
    ((f[ETH_LEN] & 0x0f) as usize) * 4
}

pub fn l4_off(f: &[u8]) -> usize {
    ETH_LEN + ihl(f)
}

pub fn ip_proto(f: &[u8]) -> u8 {
    f[ETH_LEN + 9]
}

pub fn ip_tot_len(f: &[u8]) -> usize {
    u16::from_be_bytes([f[ETH_LEN + 2], f[ETH_LEN + 3]]) as usize
}

pub fn src_ip(f: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(f[26], f[27], f[28], f[29])
}

pub fn dst_ip(f: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(f[30], f[31], f[32], f[33])
}

fn be16(f: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([f[o], f[o + 1]])
}

/// TCP/UDP source port, or the ICMP identifier.
pub fn sport(f: &[u8]) -> u16 {
    let o = l4_off(f);
    if ip_proto(f) == ICMP {
        be16(f, o + 4)
    } else {
        be16(f, o)
    }
}

/// TCP/UDP destination port, or the ICMP identifier.
pub fn dport(f: &[u8]) -> u16 {
    let o = l4_off(f);
    if ip_proto(f) == ICMP {
        be16(f, o + 4)
    } else {
        be16(f, o + 2)
    }
}

pub fn l4_csum(f: &[u8]) -> u16 {
    let o = l4_off(f);
    match ip_proto(f) {
        TCP => be16(f, o + 16),
        UDP => be16(f, o + 6),
        _ => be16(f, o + 2),
    }
}

/// Recomputes the IPv4 header checksum of a hand-modified frame (over IHL*4 bytes, or
/// what is there of them).
pub fn fix_ip_csum(f: &mut [u8]) {
    let end = (ETH_LEN + ihl(f)).min(f.len());
    f[ETH_LEN + 10] = 0;
    f[ETH_LEN + 11] = 0;
    let c = !csum_fold(csum_add(0, &f[ETH_LEN..end]));
    f[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&c.to_be_bytes());
}

/// Sets the IPv4 total length and fixes the header checksum.
pub fn set_tot_len(f: &mut [u8], len: u16) {
    f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&len.to_be_bytes());
    fix_ip_csum(f);
}

/// The IP packet of a frame (what an ICMP error quotes): from the IP header to the end of
/// the IP total length, at most `max` bytes.
pub fn ip_bytes(f: &[u8], max: usize) -> Vec<u8> {
    let tot = ip_tot_len(f).min(max);
    f[ETH_LEN..ETH_LEN + tot].to_vec()
}

pub fn ip_ident(f: &[u8]) -> u16 {
    be16(f, ETH_LEN + 4)
}

/// Splits a whole frame into two IPv4 fragments: the first with `first_len` bytes of the IP
/// payload (a multiple of 8) and MF, the second with the rest at that offset. DF is
/// cleared; header checksums are recomputed from scratch.
pub fn fragment(f: &[u8], first_len: usize) -> (Vec<u8>, Vec<u8>) {
    assert_eq!(first_len % 8, 0, "fragment offsets count 8-byte units");
    let h = ihl(f);
    let payload = &f[ETH_LEN + h..ETH_LEN + ip_tot_len(f)];
    let mk = |data: &[u8], off8: u16, mf: bool| {
        let mut g = f[..ETH_LEN + h].to_vec();
        g.extend_from_slice(data);
        let tl = (h + data.len()) as u16;
        g[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&tl.to_be_bytes());
        let fo = off8 | if mf { 0x2000 } else { 0 };
        g[ETH_LEN + 6..ETH_LEN + 8].copy_from_slice(&fo.to_be_bytes());
        fix_ip_csum(&mut g);
        g
    };
    (mk(&payload[..first_len], 0, true), mk(&payload[first_len..], (first_len / 8) as u16, false))
}

/// The ICMP error natrix generates about frame `orig` (sent back where it came from):
/// MACs swapped, from `src` to the original source, TOS 0xc0, TTL 64, no DF, the given IP
/// identification (random: taken from the actual output), type/code, the MTU in bytes 7-8,
/// and as much of the original IP packet as fits in 576 bytes. Built from scratch.
pub fn icmp_error_about(orig: &[u8], src: Ipv4Addr, typ: u8, code: u8, mtu: u16, ident: u16) -> Vec<u8> {
    let m = mtu.to_be_bytes();
    let mut p = Pkt::icmp_err(src, src_ip(orig), typ, code, [0, 0, m[0], m[1]], &ip_bytes(orig, 548));
    p.smac = orig[0..6].try_into().expect("mac");
    p.dmac = orig[6..12].try_into().expect("mac");
    p.ttl = 64;
    p.ident = ident;
    p.df = false;
    p.dscp = 0xc0 >> 2;
    p.build()
}

/// The quote of an ICMP error frame: the embedded IP packet as far as the ICMP message
/// (the outer IP total length) carries it.
pub fn icmp_quote(f: &[u8]) -> Vec<u8> {
    f[l4_off(f) + 8..ETH_LEN + ip_tot_len(f)].to_vec()
}

/// The quote of an ICMP error frame as a frame of its own (a blank Ethernet header in
/// front), so that the frame readers and the checksum checks apply to the embedded packet.
pub fn quote_frame(f: &[u8]) -> Vec<u8> {
    let mut q = vec![0u8; ETH_LEN];
    q[12] = 0x08;
    q.extend_from_slice(&icmp_quote(f));
    q
}

/// Asserts, with the independent routine, that the embedded IPv4 header checksum of an ICMP
/// error frame verifies, and the embedded transport checksum too when the quote holds the
/// whole embedded packet (a partial quote cannot be checked).
pub fn assert_quote_csums(f: &[u8], what: &str) {
    let q = quote_frame(f);
    assert!(
        ip_csum_ok(&q),
        "{what}: expected a valid embedded IPv4 header checksum, got {:#06x}",
        be16(&q, ETH_LEN + 10)
    );
    if q.len() >= ETH_LEN + ip_tot_len(&q) {
        assert!(
            l4_csum_ok(&q),
            "{what}: expected a valid embedded L4 checksum (proto {}), got {:#06x}",
            ip_proto(&q),
            l4_csum(&q)
        );
    }
}

/// Pins the calling thread to the CPU it is running on, so that per-CPU state (the ICMP
/// token bucket, counters) is one CPU's for the rest of the test body. Returns the CPU.
pub fn pin_to_current_cpu() -> usize {
    // SAFETY: plain syscalls on the calling thread with a zeroed, then filled cpu_set_t.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "expected sched_getcpu to work: {}", std::io::Error::last_os_error());
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "expected sched_setaffinity to work: {}", std::io::Error::last_os_error());
        cpu as usize
    }
}

// ---- an independent one's-complement checksum -------------------------------------------------

/// Adds `data` as big-endian 16-bit words (an odd last byte padded with zero) to `sum`.
pub fn csum_add(mut sum: u64, data: &[u8]) -> u64 {
    let mut it = data.chunks_exact(2);
    for w in &mut it {
        sum += u16::from_be_bytes([w[0], w[1]]) as u64;
    }
    if let [b] = it.remainder() {
        sum += (*b as u64) << 8;
    }
    sum
}

/// Folds carries back in until 16 bits remain (not complemented).
pub fn csum_fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Whether the IPv4 header checksum verifies: the header sums to 0xffff.
pub fn ip_csum_ok(f: &[u8]) -> bool {
    csum_fold(csum_add(0, &f[ETH_LEN..ETH_LEN + ihl(f)])) == 0xffff
}

/// The folded (not complemented) one's-complement sum a TCP/UDP/ICMP checksum covers: the
/// L4 bytes the IP total length (UDP: the UDP length) covers, checksum field included, and
/// for TCP and UDP the pseudo-header.
pub fn l4_sum(f: &[u8]) -> u16 {
    let o = l4_off(f);
    let end = ETH_LEN + ip_tot_len(f);
    let l4 = &f[o..end];
    let proto = ip_proto(f);
    let mut sum = 0u64;
    match proto {
        TCP | UDP => {
            let len = if proto == UDP { be16(f, o + 4) as usize } else { l4.len() };
            sum = csum_add(sum, &f[26..34]);
            sum += proto as u64 + len as u64;
            sum = csum_add(sum, &l4[..len]);
        }
        _ => sum = csum_add(sum, l4),
    }
    csum_fold(sum)
}

/// Whether the TCP/UDP/ICMP checksum verifies. A UDP checksum of 0 means "none" and passes.
pub fn l4_csum_ok(f: &[u8]) -> bool {
    match ip_proto(f) {
        UDP if l4_csum(f) == 0 => true,
        TCP | UDP | ICMP => l4_sum(f) == 0xffff,
        _ => true,
    }
}

/// Asserts that both checksums of a frame verify, independently of etherparse.
pub fn assert_csums(f: &[u8], what: &str) {
    assert!(
        ip_csum_ok(f),
        "{what}: expected a valid IPv4 header checksum, got {:#06x}",
        be16(f, ETH_LEN + 10)
    );
    assert!(
        l4_csum_ok(f),
        "{what}: expected a valid L4 checksum (proto {}), got {:#06x}",
        ip_proto(f),
        l4_csum(f)
    );
}

// ---- comparing frames ---------------------------------------------------------------------------

fn field_at(f: &[u8], off: usize) -> String {
    if off < 6 {
        return "eth dst".into();
    }
    if off < 12 {
        return "eth src".into();
    }
    if off < 14 {
        return "ethertype".into();
    }
    if f.len() < ETH_LEN + 20 {
        return format!("byte {off}");
    }
    let h = ihl(f);
    if off < ETH_LEN + h {
        let names = [
            "ip ver/ihl",
            "ip tos",
            "ip tot_len",
            "ip tot_len",
            "ip id",
            "ip id",
            "ip frag",
            "ip frag",
            "ip ttl",
            "ip proto",
            "ip csum",
            "ip csum",
            "ip saddr",
            "ip saddr",
            "ip saddr",
            "ip saddr",
            "ip daddr",
            "ip daddr",
            "ip daddr",
            "ip daddr",
        ];
        return names.get(off - ETH_LEN).copied().unwrap_or("ip options").into();
    }
    let r = off - ETH_LEN - h;
    let name = match (ip_proto(f), r) {
        (TCP | UDP, 0 | 1) => "sport",
        (TCP | UDP, 2 | 3) => "dport",
        (TCP, 16 | 17) => "tcp csum",
        (UDP, 4 | 5) => "udp len",
        (UDP, 6 | 7) => "udp csum",
        (ICMP, 0) => "icmp type",
        (ICMP, 2 | 3) => "icmp csum",
        (ICMP, 4 | 5) => "icmp id",
        _ => "l4",
    };
    format!("{name} (l4 byte {r})")
}

pub fn hex(f: &[u8]) -> String {
    f.chunks(16)
        .map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// Asserts two frames are identical byte for byte, naming the first differing field.
pub fn assert_frame_eq(actual: &[u8], expected: &[u8], what: &str) {
    if actual == expected {
        return;
    }
    let first =
        actual.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(actual.len().min(expected.len()));
    panic!(
        "{what}: expected the output frame to equal the rebuilt one; first difference at byte {first} ({}), \
         lengths {} (got) / {} (expected)\n got:\n  {}\n expected:\n  {}",
        field_at(expected, first),
        actual.len(),
        expected.len(),
        hex(actual),
        hex(expected)
    );
}
