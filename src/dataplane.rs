// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Loading the data plane, taking over a running one, attaching and detaching it.
//!
//! State that must outlive the daemon lives in bpffs under the pin directory: every map,
//! and one bpf_link per interface (`link_<ifname>`). A pinned XDP link keeps its program
//! attached when the daemon exits; the next daemon loads the new programs onto the SAME
//! maps (`reuse_pinned_map`) and swaps the program of each link atomically
//! (`bpf_link_update`): no packet is ever without a program, and no mapping is lost.

use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, ProgramInput};
use thiserror::Error;
use tracing::{info, warn};

use crate::abi::{
    CF_EXCLUSIONS, CF_HAIRPIN, CF_LOG, CF_LOG_DEST, CF_LOG_SESSIONS, CF_LOG_STRICT, CF_PORT_CLASS,
    CF_PORT_PARITY, CF_STATICS, CF_SUBNET_TRIE, FILTER_ADF, FILTER_APDF, FILTER_EIF, IFROLE_DIRECT,
    MF_STATIC, NPROTO, POOL_RUNS, PORTS_PER_ADDR, ROLE_INSIDE, ROLE_OUTSIDE, SUBNETS, TICK_SHIFT,
};
use crate::config::{Config, Filtering, XdpMode};
use crate::expiry::CtlBatch;
use crate::skel::types::{
    nx_clock, nx_config, nx_iface, nx_lpm_key, nx_map_key, nx_pool_run, nx_static_map, nx_subnet,
};
use crate::skel::{NatrixSkel, NatrixSkelBuilder};
use crate::tables::{ports, Tables, MAP_NAMES};

/// Values of `enum nx_iface_role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Role {
    Inside = ROLE_INSIDE,
    Outside = ROLE_OUTSIDE,
}

#[derive(Debug, Clone)]
pub struct Iface {
    pub name: String,
    pub ifindex: u32,
    pub role: Role,
    /// The interface's first IPv4 address: the source of ICMP errors natrix sends out of it.
    pub addr: Option<Ipv4Addr>,
    /// The unicast MACs natrix takes frames for on it: its own (when it has one) and
    /// `interfaces.virtual_macs`. Empty: no MAC to check (an interface without one).
    pub macs: Vec<[u8; 6]>,
}

/// A MAC as the data plane compares it (nx_iface.macs): its six bytes in memory order in
/// the low bytes of a u64.
pub fn mac_word(mac: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&mac);
    u64::from_ne_bytes(b)
}

/// Calls `f` with the name and address of every address getifaddrs reports: the calling
/// thread's network namespace (where /sys/class/net would show the one sysfs was mounted in).
fn for_each_ifaddr(mut f: impl FnMut(String, &libc::sockaddr)) {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a linked list we free below; we only read it.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return;
    }
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_name is NUL-terminated; a non-null ifa_addr points to a sockaddr.
            let (name, sa) = unsafe {
                (std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned(), &*ifa.ifa_addr)
            };
            f(name, sa);
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: freeing what getifaddrs allocated.
    unsafe { libc::freeifaddrs(ifap) };
}

/// First IPv4 address of every interface in this network namespace, by name.
pub fn interface_addresses() -> std::collections::HashMap<String, Ipv4Addr> {
    let mut out = std::collections::HashMap::new();
    for_each_ifaddr(|name, sa| {
        if sa.sa_family as i32 == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr).cast::<libc::sockaddr_in>() };
            out.entry(name).or_insert_with(|| Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()));
        }
    });
    out
}

/// The link-layer (Ethernet) address of every interface in this network namespace that has
/// one, by name (getifaddrs' AF_PACKET entries).
pub fn interface_macs() -> std::collections::HashMap<String, [u8; 6]> {
    let mut out = std::collections::HashMap::new();
    for_each_ifaddr(|name, sa| {
        if sa.sa_family as i32 == libc::AF_PACKET {
            // SAFETY: an AF_PACKET address is a sockaddr_ll.
            let sll = unsafe { &*(sa as *const libc::sockaddr).cast::<libc::sockaddr_ll>() };
            if sll.sll_halen == 6 {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&sll.sll_addr[..6]);
                if mac != [0; 6] {
                    out.insert(name, mac);
                }
            }
        }
    });
    out
}

#[derive(Debug, Error)]
pub enum DataplaneError {
    #[error("interface {name} ({key}): {reason}")]
    Interface { name: String, key: &'static str, reason: String },
    #[error("{what}: {source}")]
    Bpf { what: String, source: libbpf_rs::Error },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error(
        "the running data plane under {pin} was built for a different {what}; \
         run `natrix down` first to start afresh (this drops every mapping)"
    )]
    Incompatible { pin: String, what: String },
    #[error(
        "natrix's data plane publishes table entries to lock-free readers relying on \
         x86-64's store and load order; this build is for {arch}, where that needs \
         acquire/release instructions natrix does not use yet (docs/ARCHITECTURE.md, \
         \"How CPUs share state\")"
    )]
    Arch { arch: String },
    #[error(transparent)]
    Table(#[from] crate::tables::TableError),
    #[error(transparent)]
    Clock(#[from] crate::clock::ClockError),
}

type Result<T> = std::result::Result<T, DataplaneError>;

fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> DataplaneError {
    let what = what.into();
    move |source| DataplaneError::Bpf { what, source }
}

/// Refuses a build for a CPU whose memory order the data plane's lock-free tables do not
/// assume: there a lookup could see a published entry with stale fields (a wrong
/// translation) instead of failing here.
fn check_arch(arch: &str) -> Result<()> {
    if arch == "x86_64" {
        Ok(())
    } else {
        Err(DataplaneError::Arch { arch: arch.to_string() })
    }
}

/// Table sizes derived from the config. Part of the on-disk contract: a takeover needs the
/// same sizes, because the maps are reused as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub pool: u32,
    pub ports: u32,
    pub blocks: u32,
    pub subs: u32,
    pub maps: u32,
    pub sess: u32,
    pub frags: u32,
    pub frag_rb: u32,
    /// FIB cache slots per CPU (at least 1: a map cannot be empty; the cache is off when
    /// fib_cache.entries is 0, see nx_config.fibc_max_age).
    pub fibc: u32,
    /// Deterministic mode's per-subscriber session counts (1 in dynamic mode).
    pub det_nsess: u32,
    /// The NAT event log's ring buffer, bytes (log.buffer_events; a power of two).
    pub log_rb: u32,
}

impl Sizes {
    pub fn from_config(c: &Config) -> Self {
        let n = c.pool.addresses.len() as u32;
        Sizes {
            pool: n.max(1),
            ports: (n * NPROTO * PORTS_PER_ADDR).max(1),
            blocks: (n * c.block_count_per_addr()).max(1),
            subs: crate::tables::sub_slots(c.limits.max_subscribers),
            // slots of the open-addressed tables (bpf/nx_tab.h): two per bucket
            maps: crate::tables::tab_slots(c.limits.max_mappings),
            sess: crate::tables::tab_slots(c.limits.max_sessions),
            frags: c.fragments.max_tracked,
            // a power-of-two number of pages holding max_held records of ~1.5 KiB, and room
            // for 16 of a jumbo link's (bpf/nx_frag.h: a record is as large as it needs)
            frag_rb: ((c.fragments.max_held.max(1) as usize * 1600 + 16 * 9300).next_power_of_two().max(4096))
                as u32,
            fibc: c.fib_cache.entries.max(1),
            det_nsess: c.nat.deterministic.as_ref().map_or(1, |d| d.count()).max(1),
            log_rb: c.log.ring_bytes(),
        }
    }
}

/// Resolves interface names in the current network namespace. Errors name the config key.
pub fn resolve_interfaces(c: &Config) -> Result<Vec<Iface>> {
    let addrs = interface_addresses();
    let own_macs = interface_macs();
    let mut out = Vec::new();
    for (names, role, key) in [
        (&c.interfaces.inside, Role::Inside, "interfaces.inside"),
        (&c.interfaces.outside, Role::Outside, "interfaces.outside"),
    ] {
        for name in names {
            let cname = std::ffi::CString::new(name.as_str()).map_err(|_| DataplaneError::Interface {
                name: name.clone(),
                key,
                reason: "name contains a NUL byte".into(),
            })?;
            // SAFETY: valid NUL-terminated string.
            let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
            if ifindex == 0 {
                return Err(DataplaneError::Interface {
                    name: name.clone(),
                    key,
                    reason: "no such interface in this network namespace".into(),
                });
            }
            let mut macs: Vec<[u8; 6]> = own_macs.get(name).into_iter().copied().collect();
            if !macs.is_empty() {
                macs.extend(
                    c.interfaces
                        .virtual_macs
                        .iter()
                        .filter(|m| !macs.contains(m))
                        .copied()
                        .collect::<Vec<_>>(),
                );
            }
            out.push(Iface { name: name.clone(), ifindex, role, addr: addrs.get(name).copied(), macs });
        }
    }
    Ok(out)
}

/// The pool as runs of consecutive addresses in pool-index order: `first` (host order),
/// `count`, `base` (pool index of `first`).
pub fn pool_runs(addrs: &[Ipv4Addr]) -> Vec<nx_pool_run> {
    let mut runs: Vec<nx_pool_run> = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let a = u32::from(*a);
        match runs.last_mut() {
            Some(r) if r.first.wrapping_add(r.count as u32) == a && r.count < u16::MAX => r.count += 1,
            _ => runs.push(nx_pool_run { first: a, count: 1, base: i as u16 }),
        }
    }
    runs
}

pub use crate::tables::TABLE_LAYOUT;

/// The nx_config the data plane runs with, derived from the config file.
/// `tab_seed` is the tables' hash seed: random when they are created, the running one's on a
/// takeover (every entry sits where that seed put it).
pub fn nx_config_from(c: &Config, addr_hint: u32, tab_seed: u32) -> nx_config {
    let ticks = |d: std::time::Duration| {
        let t = (d.as_nanos() >> TICK_SHIFT) as u64;
        t.clamp(1, u32::MAX as u64 / 2) as u32
    };
    let runs = pool_runs(&c.pool.addresses);
    let mut pool_runs_arr = [nx_pool_run::default(); POOL_RUNS];
    let pool_nruns = match runs.len() {
        n if n <= POOL_RUNS => {
            pool_runs_arr[..n].copy_from_slice(&runs);
            n as u32
        }
        _ => 0, // too many runs: the data plane asks nx_pool_idx
    };
    let mut flags = 0u32;
    if c.nat.port_parity {
        flags |= CF_PORT_PARITY;
    }
    if c.nat.hairpinning {
        flags |= CF_HAIRPIN;
    }
    if c.nat.port_class {
        flags |= CF_PORT_CLASS;
    }
    if !c.exclude.is_empty() {
        flags |= CF_EXCLUSIONS;
    }
    if !c.forwards.is_empty() {
        flags |= CF_STATICS;
    }
    // [log]: events are made only when something exports them (bpf/nx_log.h)
    if c.log.enabled() {
        flags |= CF_LOG;
        if c.log.sessions {
            flags |= CF_LOG_SESSIONS;
        }
        if c.log.destinations {
            flags |= CF_LOG_DEST;
        }
        if c.log.strict {
            flags |= CF_LOG_STRICT;
        }
    }
    // nat.subscribers (dynamic mode): a few compares in nx_config, or the trie nx_subnets
    let subnets_cfg = if c.nat.deterministic.is_some() { &[][..] } else { &c.nat.subscribers[..] };
    let mut subnets = [nx_subnet::default(); SUBNETS];
    if subnets_cfg.len() > SUBNETS {
        flags |= CF_SUBNET_TRIE;
    } else {
        for (slot, n) in subnets.iter_mut().zip(subnets_cfg) {
            *slot = nx_subnet { net: ip_be(n.network()), mask: ip_be(n.netmask()) };
        }
    }
    let mut cfg = nx_config {
        to_udp: ticks(c.timeouts.udp),
        to_tcp_est: ticks(c.timeouts.tcp_established),
        to_tcp_trans: ticks(c.timeouts.tcp_transitory),
        to_icmp: ticks(c.timeouts.icmp),
        flags,
        filtering: match c.nat.filtering {
            Filtering::EndpointIndependent => FILTER_EIF,
            Filtering::AddressDependent => FILTER_ADF,
            Filtering::AddressAndPortDependent => FILTER_APDF,
        },
        port_lo: c.pool.port_lo,
        port_hi: c.pool.port_hi,
        block_size: c.nat.block_size,
        blocks_per_addr: c.block_count_per_addr() as u16,
        max_blocks: c.nat.max_blocks_per_subscriber,
        n_addrs: c.pool.addresses.len() as u16,
        addr_hint,
        hold_down_s: c.timeouts.port_hold_down.as_secs() as u32,
        max_new_per_sec: c.nat.max_new_mappings_per_sec,
        icmp_per_sec: c.nat.icmp_errors_per_sec,
        frag_timeout: ticks(c.fragments.timeout),
        pool_nruns,
        pool_runs: pool_runs_arr,
        tab_nbkt: [
            crate::tables::tab_buckets(c.limits.max_sessions),
            crate::tables::tab_buckets(c.limits.max_mappings),
        ],
        tab_max: [c.limits.max_sessions, c.limits.max_mappings],
        tab_seed,
        // measured by `Dataplane::configure` (crate::clock)
        clk_mult: 0,
        clk_off: 0,
        clk_hz: 0,
        sub_nslots: crate::tables::sub_home_slots(c.limits.max_subscribers),
        sub_max: c.limits.max_subscribers,
        fibc_mask: c.fib_cache.entries.max(1) - 1,
        // in jiffies, set with the clock by `Dataplane::configure` (fibc_max_age_jiffies)
        fibc_max_age: 0,
        det_base: c.nat.deterministic.map_or(0, |d| u32::from(d.subscribers.addr())),
        det_count: c.nat.deterministic.map_or(0, |d| d.count()),
        det_per_addr: c.nat.deterministic.map_or(0, |d| d.per_addr),
        det_ports: c.nat.deterministic.map_or(0, |d| d.ports),
        det_probe: c.nat.deterministic.map_or(0, |d| d.probe),
        layout: TABLE_LAYOUT,
        home_probe: c.nat.deterministic.map_or(u32::from(c.nat.home_probe), |_| 0),
        sess_per_sub: c.limits.max_sessions_per_subscriber,
        unreach_code: u32::from(c.nat.unreachable_code.code()),
        n_subnets: subnets_cfg.len() as u32,
        subnets,
        pad2: 0,
        div: Default::default(),
    };
    crate::tables::set_divisors(&mut cfg);
    cfg
}

/// fib_cache.max_age in jiffies of a kernel running at `hz`: rounded up, at least one (an
/// answer is reused within the jiffy it was got in at the least); 0 when the cache is off.
pub fn fibc_max_age_jiffies(c: &Config, hz: u32) -> u32 {
    if c.fib_cache.entries == 0 {
        return 0;
    }
    let j = (c.fib_cache.max_age.as_micros() * hz as u128).div_ceil(1_000_000);
    j.clamp(1, u32::MAX as u128 / 2) as u32
}

/// A hash seed nobody outside can predict (a subscriber choosing colliding keys could
/// otherwise fill one probe window and have others' new connections refused).
pub fn random_seed() -> u32 {
    let mut b = [0u8; 4];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = crate::tables::now_ns() ^ std::process::id() as u64;
        return (t ^ (t >> 32)) as u32;
    }
    u32::from_ne_bytes(b)
}

/// How a data plane instance keeps its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Persistence {
    /// Maps and links pinned under this directory (the daemon).
    Pinned(PathBuf),
    /// Private maps that die with the process (packet tests, benchmarks).
    Private,
}

/// A loaded data plane.
pub struct Dataplane {
    pub skel: NatrixSkel<'static>,
    pub tables: Tables,
    pub sizes: Sizes,
    /// True when the maps were taken over from a running instance.
    pub took_over: bool,
    persistence: Persistence,
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

fn is_bpffs(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs is plain C integers: all zeroes is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

/// Makes sure the pin directory sits on a bpffs, mounting one at /sys/fs/bpf if needed.
pub fn ensure_bpffs(pin: &Path) -> Result<()> {
    let parent = pin.parent().unwrap_or(Path::new("/"));
    if is_bpffs(parent) {
        return Ok(());
    }
    let root = Path::new("/sys/fs/bpf");
    if parent.starts_with(root) && !is_bpffs(root) {
        std::fs::create_dir_all(root)
            .map_err(|source| DataplaneError::Io { what: "creating /sys/fs/bpf".into(), source })?;
        let (src, dst, fs) = (c"bpf", c"/sys/fs/bpf", c"bpf");
        // SAFETY: constant NUL-terminated strings.
        if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) } != 0 {
            return Err(DataplaneError::Io {
                what: "mounting bpffs at /sys/fs/bpf".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        info!("mounted bpffs at /sys/fs/bpf");
    }
    if !is_bpffs(parent) {
        return Err(DataplaneError::Io {
            what: format!("pin directory parent {} is not on a bpf filesystem", parent.display()),
            source: std::io::Error::from_raw_os_error(libc::ENOTSUP),
        });
    }
    Ok(())
}

/// Whether a data plane is pinned (running or left running) under `pin`.
pub fn is_pinned(pin: &Path) -> bool {
    pin.join("nx_cfg").exists()
}

impl Dataplane {
    /// Opens and loads the BPF object with table sizes from `cfg`. With `Pinned`, maps that
    /// are already pinned are reused as they are (a takeover), the others are created and
    /// pinned.
    pub fn load(cfg: &Config, persistence: Persistence) -> Result<Self> {
        check_arch(std::env::consts::ARCH)?;
        let sizes = Sizes::from_config(cfg);
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = NatrixSkelBuilder::default().open(storage).map_err(bpf("opening the BPF object"))?;

        let pin_dir = match &persistence {
            Persistence::Pinned(p) => Some(p.clone()),
            Persistence::Private => None,
        };
        let took_over = pin_dir.as_deref().is_some_and(is_pinned);
        let mut fresh: Vec<String> = Vec::new();
        {
            let m = &mut open.maps;
            let sized: [(&mut libbpf_rs::OpenMapMut<'_>, u32); 14] = [
                (&mut m.nx_frags, sizes.frags),
                (&mut m.nx_frag_rb, sizes.frag_rb),
                (&mut m.nx_pool, sizes.pool),
                (&mut m.nx_pool_idx, sizes.pool),
                (&mut m.nx_ports, sizes.ports),
                (&mut m.nx_blocks, sizes.blocks),
                (&mut m.nx_subs, sizes.subs),
                (&mut m.nx_maps, sizes.maps),
                (&mut m.nx_sess, sizes.sess),
                (&mut m.nx_cfg, 1),
                (&mut m.nx_fibc, sizes.fibc),
                (&mut m.nx_det_nsess, sizes.det_nsess),
                (&mut m.nx_log_rb, sizes.log_rb),
                (&mut m.nx_block_time, sizes.blocks),
            ];
            for (map, n) in sized {
                let name = map.name().to_string_lossy().into_owned();
                map.set_max_entries(n).map_err(bpf(format!("sizing map {name}")))?;
            }
        }
        if let Some(dir) = &pin_dir {
            if took_over {
                for mut map in open.open_object_mut().maps_mut() {
                    let name = map.name().to_string_lossy().into_owned();
                    if !MAP_NAMES.contains(&name.as_str()) {
                        continue;
                    }
                    let path = dir.join(&name);
                    if !path.exists() && FRESH_ON_TAKEOVER.contains(&name.as_str()) {
                        // made by this load, pinned once it is loaded (an upgrade from a
                        // version without it)
                        fresh.push(name);
                        continue;
                    }
                    if !path.exists() {
                        return Err(DataplaneError::Incompatible {
                            pin: dir.display().to_string(),
                            what: format!("version (map {name} is missing)"),
                        });
                    }
                    // bpf_map__reuse_fd (what reuse_pinned_map calls) takes the fd as it is:
                    // compare layouts here, or a program would run on a table whose entries
                    // mean something else. The kernel adds BPF_F_RDONLY_PROG to every devmap
                    // it creates; that bit says nothing about the layout.
                    let pinned = libbpf_rs::MapHandle::from_pinned_path(&path)
                        .and_then(|h| h.info())
                        .map_err(bpf(format!("reading pinned map {name}")))?;
                    const BPF_F_RDONLY_PROG: u32 = 1 << 7;
                    let mut pi = pinned.info;
                    if matches!(
                        pinned.map_type(),
                        libbpf_rs::MapType::Devmap | libbpf_rs::MapType::DevmapHash
                    ) {
                        pi.map_flags &= !BPF_F_RDONLY_PROG;
                    }
                    // The event log's size is the running one's: what it holds (events not
                    // yet exported) is kept, whatever log.buffer_events says now.
                    if name == "nx_log_rb" && pinned.map_type() == libbpf_rs::MapType::RingBuf {
                        if pi.max_entries != map.max_entries() {
                            tracing::warn!(
                                running = pi.max_entries,
                                configured = map.max_entries(),
                                "log.buffer_events: the running event log keeps its size until `natrix down`"
                            );
                        }
                        map.set_max_entries(pi.max_entries).map_err(bpf("sizing map nx_log_rb"))?;
                    }
                    let want = (map.key_size(), map.value_size(), map.max_entries(), map.map_flags());
                    if (pi.key_size, pi.value_size, pi.max_entries, pi.map_flags) != want {
                        return Err(DataplaneError::Incompatible {
                            pin: dir.display().to_string(),
                            what: format!(
                                "table layout or size (map {name}: running key/value/entries/flags {}/{}/{}/{:#x}, \
                                 this version and config {}/{}/{}/{:#x}; pool, ports, block size or [limits] changed?)",
                                pi.key_size, pi.value_size, pi.max_entries, pi.map_flags, want.0, want.1, want.2, want.3
                            ),
                        });
                    }
                    map.reuse_pinned_map(&path).map_err(|_| DataplaneError::Incompatible {
                        pin: dir.display().to_string(),
                        what: format!(
                            "table layout or size (map {name}: pool, ports, block size or [limits] changed?)"
                        ),
                    })?;
                }
            }
        }
        let skel = open.load().map_err(bpf("loading the BPF programs (verifier)"))?;
        let tables = Tables::from_skel(&skel)?;
        let mut dp = Dataplane { skel, tables, sizes, took_over, persistence };
        match (pin_dir, took_over) {
            (Some(dir), false) => dp.pin_maps(&dir, &MAP_NAMES)?,
            (Some(dir), true) if !fresh.is_empty() => {
                let names: Vec<&str> = fresh.iter().map(String::as_str).collect();
                dp.pin_maps(&dir, &names)?;
            }
            _ => {}
        }
        Ok(dp)
    }

    fn pin_maps(&mut self, dir: &Path, names: &[&str]) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|source| DataplaneError::Io { what: format!("creating {}", dir.display()), source })?;
        use libbpf_rs::skel::Skel;
        for mut map in self.skel.object_mut().maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            if names.contains(&name.as_str()) {
                map.pin(dir.join(&name)).map_err(bpf(format!("pinning map {name}")))?;
            }
        }
        Ok(())
    }

    /// Writes configuration, pool and interface tables. On a takeover, the pool and port
    /// layout must match what the running maps hold (they are the key of every mapping);
    /// timeouts, flags and limits are updated in place.
    pub fn configure(&self, cfg: &Config, ifaces: &[Iface]) -> Result<()> {
        let t = &self.tables;
        let mut hint = 0;
        let mut seed = random_seed();
        let mut clock = None;
        if self.took_over {
            let old = t.config()?;
            seed = old.tab_seed;
            if old.clk_mult != 0 {
                clock = Some(crate::clock::DpClock { hz: old.clk_hz, mult: old.clk_mult, off: old.clk_off });
            }
            let pool = t.pool()?;
            let pin = self.pin_display();
            if old.layout != TABLE_LAYOUT {
                return Err(DataplaneError::Incompatible {
                    pin,
                    what: format!(
                        "table layout {} (this natrix reads layout {TABLE_LAYOUT}: the running tables were written by another version)",
                        old.layout
                    ),
                });
            }
            if pool != cfg.pool.addresses {
                return Err(DataplaneError::Incompatible { pin, what: "pool.addresses".into() });
            }
            if (old.port_lo, old.port_hi) != (cfg.pool.port_lo, cfg.pool.port_hi) {
                return Err(DataplaneError::Incompatible { pin, what: "pool.ports".into() });
            }
            if old.block_size != cfg.nat.block_size {
                return Err(DataplaneError::Incompatible { pin, what: "nat.block_size".into() });
            }
            // a deterministic subscriber's range is where its mappings are
            let new = nx_config_from(cfg, 0, seed);
            // ... and where each endpoint's walk starts (the parity) and how far it goes
            // (both modes' walks start on the endpoint's parity when port parity is on)
            let walk = |c: &nx_config| {
                (
                    c.det_base,
                    c.det_count,
                    c.det_per_addr,
                    c.det_ports,
                    c.det_probe,
                    c.home_probe,
                    c.flags & CF_PORT_PARITY,
                )
            };
            if walk(&old) != walk(&new) {
                return Err(DataplaneError::Incompatible {
                    pin,
                    what: "nat.mode, nat.deterministic_subscribers, nat.deterministic_ports, nat.deterministic_probe, nat.home_probe or nat.port_parity".into(),
                });
            }
            hint = old.addr_hint;
        } else {
            for (i, a) in cfg.pool.addresses.iter().enumerate() {
                let (i, a) = (i as u32, u32::from_ne_bytes(a.octets()));
                t.pool
                    .update(&i.to_ne_bytes(), &a.to_ne_bytes(), MapFlags::ANY)
                    .map_err(bpf("filling nx_pool"))?;
                t.pool_idx
                    .update(&a.to_ne_bytes(), &i.to_ne_bytes(), MapFlags::ANY)
                    .map_err(bpf("filling nx_pool_idx"))?;
            }
        }
        let clock = match clock {
            Some(c) => c,
            None => crate::clock::calibrate(|| self.read_clock())?,
        };
        let mut c = nx_config_from(cfg, hint, seed);
        (c.clk_hz, c.clk_mult, c.clk_off) = (clock.hz, clock.mult, clock.off);
        c.fibc_max_age = fibc_max_age_jiffies(cfg, clock.hz);
        t.write_config(&c)?;
        self.set_exclusions(cfg)?;
        self.install_forwards(cfg)?;
        self.set_interfaces(ifaces)
    }

    /// jiffies and CLOCK_MONOTONIC at one moment, read by the `nx_clock` program.
    pub fn read_clock(&self) -> Result<crate::clock::Sample> {
        let mut ctx = [0u8; std::mem::size_of::<nx_clock>()];
        self.skel
            .progs
            .nx_clock
            .test_run(ProgramInput { context_in: Some(&mut ctx), ..Default::default() })
            .map_err(bpf("running nx_clock"))?;
        let c: nx_clock = bytemuck::pod_read_unaligned(&ctx);
        Ok(crate::clock::Sample { jiffies: c.jiffies, mono_ns: c.mono_ns })
    }

    /// `[[exclude]]` prefixes into the LPM trie (this program instance's own map: filled
    /// before the links switch to it).
    pub fn set_exclusions(&self, cfg: &Config) -> Result<()> {
        let m = &self.skel.maps.nx_excl;
        for net in &cfg.exclude {
            let key = nx_lpm_key { prefixlen: net.prefix_len() as u32, addr: ip_be(net.network()) };
            m.update(bytemuck::bytes_of(&key), &[1u8], MapFlags::ANY).map_err(bpf("filling nx_excl"))?;
        }
        // nat.subscribers beyond what nx_config holds (NX_CF_SUBNET_TRIE)
        if cfg.nat.deterministic.is_none() && cfg.nat.subscribers.len() > SUBNETS {
            let m = &self.skel.maps.nx_subnets;
            for net in &cfg.nat.subscribers {
                let key = nx_lpm_key { prefixlen: net.prefix_len() as u32, addr: ip_be(net.network()) };
                m.update(bytemuck::bytes_of(&key), &[1u8], MapFlags::ANY)
                    .map_err(bpf("filling nx_subnets"))?;
            }
        }
        Ok(())
    }

    /// Makes the static forwards in the tables match `[[forward]]`: each is a STATIC port
    /// word plus a mapping flagged static, which expiry never removes and dynamic allocation
    /// never hands out. Forwards no longer configured are removed (their port goes on
    /// hold-down). A forward whose port or inside endpoint is held by a live dynamic
    /// mapping is left for a later call (the daemon retries every sweep); returns how many
    /// are still pending.
    pub fn install_forwards(&self, cfg: &Config) -> Result<usize> {
        let t = &self.tables;
        let pool = &cfg.pool.addresses;
        let mut pending = 0;
        let mut wanted = std::collections::HashSet::new();
        for f in &cfg.forwards {
            let Some(addr_idx) = pool.iter().position(|a| a == f.outside.ip()) else { continue };
            let (in_ip, in_port) = (ip_be(*f.inside.ip()), f.inside.port());
            let key = nx_map_key { in_ip, in_port: in_port.to_be(), proto: f.proto, pad: 0 };
            wanted.insert(bytemuck::bytes_of(&key).to_vec());
            let idx = ports::port_index(addr_idx as u32, f.proto, f.outside.port());
            let word = ports::static_word(in_ip, in_port);
            let cur = t.port_word(addr_idx as u32, f.proto, f.outside.port())?;
            let existing = t.mapping(&key)?;
            let ours = existing.is_some_and(|m| m.flags & MF_STATIC != 0);
            if (cur != 0 && cur != word) || (existing.is_some() && !ours) {
                pending += 1;
                continue;
            }
            if !ours {
                let mut a = CtlBatch::static_add(&nx_static_map {
                    key,
                    out_ip: ip_be(*f.outside.ip()),
                    out_port: f.outside.port().to_be(),
                    pad: 0,
                });
                self.ctl(&mut a)?;
                if a.deleted() != 1 {
                    return Err(DataplaneError::Bpf {
                        what: "adding a static forward: the mapping table refused it (full?)".into(),
                        source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(libc::ENOSPC)),
                    });
                }
            }
            if cur != word {
                ports::set_static(t, idx, word).map_err(bpf("adding a static forward"))?;
            }
        }
        // forwards that are no longer configured
        let now_s = (crate::tables::now_ns() / 1_000_000_000) as u32;
        for (k, m) in t.mappings()? {
            if m.flags & MF_STATIC == 0 || wanted.contains(bytemuck::bytes_of(&k)) {
                continue;
            }
            self.ctl(&mut CtlBatch::static_del(&k))?;
            if let Some(addr_idx) = pool.iter().position(|a| ip_be(*a) == m.out_ip) {
                let idx = ports::port_index(addr_idx as u32, k.proto, u16::from_be(m.out_port));
                ports::hold_static(t, idx, now_s)?;
            }
            info!(inside = %format!("{}:{}", ip_from_be(k.in_ip), u16::from_be(k.in_port)), "static forward removed");
        }
        if pending > 0 {
            warn!(
                pending,
                "static forwards waiting for their port or inside endpoint to be released by a live mapping"
            );
        }
        Ok(pending)
    }

    /// Runs one batch of the control program (nx_ctl: expiry, static mappings): table
    /// writes go through the data plane's own insert and delete code.
    fn ctl(&self, a: &mut CtlBatch) -> Result<()> {
        let buf = libbpf_rs::MapHandle::try_from(&self.skel.maps.nx_reap_buf).map_err(bpf("nx_reap_buf"))?;
        crate::expiry::Reaper { prog: &self.skel.progs.nx_ctl, buf: &buf }
            .reap(a)
            .map_err(bpf("running the control program nx_ctl"))
    }

    /// Interface roles and redirect targets: replaces whatever was there.
    /// Interface roles and redirect targets. Entries are overwritten in place and only then
    /// are stale ones deleted: on a takeover the running programs read these tables, and an
    /// interface that vanished for a moment would send subscriber traffic to the kernel
    /// untranslated.
    pub fn set_interfaces(&self, ifaces: &[Iface]) -> Result<()> {
        let t = &self.tables;
        let wanted: std::collections::HashSet<[u8; 4]> =
            ifaces.iter().map(|i| i.ifindex.to_ne_bytes()).collect();
        for i in ifaces {
            let k = i.ifindex.to_ne_bytes();
            let mut v =
                nx_iface { role: i.role as u32, addr: i.addr.map(ip_be).unwrap_or(0), ..Default::default() };
            for (slot, m) in v.macs.iter_mut().zip(&i.macs) {
                *slot = mac_word(*m);
            }
            v.nmacs = i.macs.len().min(v.macs.len()) as u32;
            t.ifaces.update(&k, bytemuck::bytes_of(&v), MapFlags::ANY).map_err(bpf("filling nx_ifaces"))?;
            if i.ifindex < IFROLE_DIRECT {
                // NX_IFROLE_DIRECT: this instance's own array, read per packet
                self.skel
                    .maps
                    .nx_ifrole
                    .update(&k, bytemuck::bytes_of(&v), MapFlags::ANY)
                    .map_err(bpf("filling nx_ifrole"))?;
            }
            t.tx.update(&k, &k, MapFlags::ANY)
                .map_err(bpf(format!("adding {} to the redirect map", i.name)))?;
        }
        for map in [&t.ifaces, &t.tx] {
            for k in map.keys().collect::<Vec<_>>() {
                if k.len() == 4 && !wanted.contains(&[k[0], k[1], k[2], k[3]]) {
                    let _ = map.delete(&k);
                }
            }
        }
        Ok(())
    }

    fn pin_display(&self) -> String {
        match &self.persistence {
            Persistence::Pinned(p) => p.display().to_string(),
            Persistence::Private => "(private)".into(),
        }
    }

    /// Attaches the XDP programs: a new pinned link per interface, or, on a takeover, the
    /// existing link switched to the new program atomically. On failure every link this
    /// call created is removed again.
    pub fn attach(&self, ifaces: &[Iface], mode: XdpMode) -> Result<()> {
        let Persistence::Pinned(dir) = &self.persistence else {
            return Err(DataplaneError::Io {
                what: "attach needs a pinned data plane".into(),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        let mut created: Vec<PathBuf> = Vec::new();
        let res = (|| {
            for i in ifaces {
                let prog = match i.role {
                    Role::Inside => &self.skel.progs.nx_xdp_inside,
                    Role::Outside => &self.skel.progs.nx_xdp_outside,
                };
                let path = link_path(dir, &i.name);
                if path.exists() {
                    let mut link =
                        Link::open(&path).map_err(bpf(format!("opening pinned link of {}", i.name)))?;
                    link.update_prog(prog).map_err(bpf(format!("replacing the program on {}", i.name)))?;
                    info!(iface = %i.name, "program replaced on the running link");
                } else {
                    create_xdp_link(prog.as_fd().as_raw_fd(), i, mode, &path)?;
                    created.push(path);
                    info!(iface = %i.name, ifindex = i.ifindex, ?mode, "XDP attached");
                }
            }
            Ok(())
        })();
        if res.is_err() {
            for p in created {
                let _ = std::fs::remove_file(p);
            }
            return res;
        }
        self.pin_progs(dir)?;
        // Interfaces dropped from the config: detached, like forwards no longer configured.
        let configured: std::collections::HashSet<PathBuf> =
            ifaces.iter().map(|i| link_path(dir, &i.name)).collect();
        if let Ok(rd) = std::fs::read_dir(dir) {
            for p in rd.filter_map(|e| e.ok().map(|e| e.path())) {
                let is_link = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("link_"));
                if is_link && !configured.contains(&p) {
                    if let Ok(link) = Link::open(&p) {
                        let _ = link.detach();
                    }
                    let _ = std::fs::remove_file(&p);
                    info!(link = %p.display(), "interface no longer configured: detached");
                }
            }
        }
        Ok(())
    }
}

impl Dataplane {
    /// Pins this load's program array (`nx_progs`, the slow path's programs the fast path
    /// tail-calls), replacing the previous load's: the kernel empties a program array when
    /// no file or descriptor holds it any more, and the fast path attached to the links
    /// must reach its slow path while no daemon runs. Called once the links run this
    /// load's programs, so the previous array is no longer used when its pin goes.
    fn pin_progs(&self, dir: &Path) -> Result<()> {
        let path = dir.join(PROGS_PIN);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DataplaneError::Io { what: format!("removing {}", path.display()), source })
            }
        }
        libbpf_rs::MapHandle::try_from(&self.skel.maps.nx_progs)
            .and_then(|mut h| h.pin(&path))
            .map_err(bpf(format!("pinning the slow path's program array at {}", path.display())))
    }
}

/// Pinned maps that hold nothing a running data plane needs kept across a takeover (the
/// capture's): a takeover of a data plane pinned without them (an older version) makes
/// and pins them instead of refusing.
pub const FRESH_ON_TAKEOVER: [&str; 3] = ["nx_cap_ctl", "nx_cap_buf", "nx_cap_rb"];

/// The pin of the program array the fast path tail-calls (`nx_progs`), beside the links.
pub const PROGS_PIN: &str = "nx_progs";

fn link_path(dir: &Path, ifname: &str) -> PathBuf {
    dir.join(format!("link_{ifname}"))
}

/// `XDP_FLAGS_SKB_MODE` and `XDP_FLAGS_DRV_MODE` (linux/if_link.h).
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// An XDP bpf_link of program `prog_fd` on interface `ifindex` in the mode `flags` names
/// (libbpf-rs' attach_xdp does not take the mode flags); the link lives as long as the
/// descriptor, or a pin of it. Err: the kernel's errno.
pub fn xdp_link(prog_fd: i32, ifindex: u32, flags: u32) -> std::result::Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    let opts = libbpf_rs::libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_link_create_opts>() as _,
        flags,
        ..Default::default()
    };
    // SAFETY: valid program fd and options struct.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_link_create(prog_fd, ifindex as i32, libbpf_rs::libbpf_sys::BPF_XDP, &opts)
    };
    if fd < 0 {
        return Err(-fd);
    }
    // SAFETY: bpf_link_create returned a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// An XDP link in the configured mode (native unless configured otherwise), pinned.
fn create_xdp_link(prog_fd: i32, i: &Iface, mode: XdpMode, path: &Path) -> Result<()> {
    let flags = match mode {
        XdpMode::Native => XDP_FLAGS_DRV_MODE,
        XdpMode::Generic => XDP_FLAGS_SKB_MODE,
    };
    let link = match xdp_link(prog_fd, i.ifindex, flags) {
        Ok(l) => l,
        Err(errno) => return Err(xdp_link_error(i, mode, errno)),
    };
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL");
    // SAFETY: valid fd and path.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_obj_pin(link.as_raw_fd(), cpath.as_ptr()) };
    let pin_err = std::io::Error::last_os_error();
    // the pin (if made) keeps the link alive once the descriptor is closed
    drop(link);
    if rc != 0 {
        return Err(DataplaneError::Io {
            what: format!("pinning the XDP link of {} at {}", i.name, path.display()),
            source: pin_err,
        });
    }
    Ok(())
}

/// What attaching XDP to `i` failing with `errno` means for the operator.
fn xdp_link_error(i: &Iface, mode: XdpMode, errno: i32) -> DataplaneError {
    let err = std::io::Error::from_raw_os_error(errno);
    let hint = if mode == XdpMode::Native && errno == libc::EOPNOTSUPP {
        " (the driver has no native XDP: set interfaces.xdp_mode = \"generic\")"
    } else if errno == libc::EBUSY {
        " (another XDP program is attached: remove it first)"
    } else {
        ""
    };
    DataplaneError::Interface {
        name: i.name.clone(),
        key: if i.role == Role::Inside { "interfaces.inside" } else { "interfaces.outside" },
        reason: format!("attaching XDP failed: {err}{hint}"),
    }
}

/// Detaches everything and removes the pinned state: links first (traffic stops being
/// translated at once), then the maps.
pub fn down(pin: &Path) -> Result<usize> {
    let Ok(rd) = std::fs::read_dir(pin) else { return Ok(0) };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    // links before maps
    entries.sort_by_key(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("link_")));
    let mut n = 0;
    for p in &entries {
        let is_link = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("link_"));
        if is_link {
            // Detach explicitly: another process may still hold the link open.
            if let Ok(link) = Link::open(p) {
                if let Err(e) = link.detach() {
                    warn!(link = %p.display(), "detach failed: {e}");
                }
            }
        }
        std::fs::remove_file(p)
            .map_err(|source| DataplaneError::Io { what: format!("removing {}", p.display()), source })?;
        n += 1;
    }
    std::fs::remove_dir(pin)
        .map_err(|source| DataplaneError::Io { what: format!("removing {}", pin.display()), source })?;
    Ok(n)
}

/// IPv4 address as the data plane stores it (network order in a native u32).
pub fn ip_be(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets())
}

pub fn ip_from_be(v: u32) -> Ipv4Addr {
    Ipv4Addr::from(v.to_ne_bytes())
}

/// Sets the sysctls the kernel fallback path depends on: forwarding must be on (else
/// bpf_fib_lookup answers "forwarding disabled"), and reverse-path filtering off on the
/// inside interfaces, where translated packets handed to the kernel carry a pool source.
pub fn prepare_sysctls(ifaces: &[Iface]) -> Result<()> {
    let write = |path: String, val: &str| -> Result<()> {
        let cur = std::fs::read_to_string(&path).unwrap_or_default();
        if cur.trim() != val {
            std::fs::write(&path, val)
                .map_err(|source| DataplaneError::Io { what: format!("writing {path}"), source })?;
            info!("set {path} = {val}");
        }
        Ok(())
    };
    write("/proc/sys/net/ipv4/ip_forward".into(), "1")?;
    for i in ifaces.iter().filter(|i| i.role == Role::Inside) {
        write(format!("/proc/sys/net/ipv4/conf/{}/rp_filter", i.name), "0")?;
    }
    let all = std::fs::read_to_string("/proc/sys/net/ipv4/conf/all/rp_filter").unwrap_or_default();
    if all.trim() == "1" {
        warn!("net.ipv4.conf.all.rp_filter = 1 overrides the inside interfaces: packets the kernel forwards for natrix may be dropped");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fib_cache_age_in_jiffies_rounds_up_and_is_zero_when_off() {
        let with = |entries: &str, age: &str| {
            crate::config::Config::from_toml_str(&format!(
                "[interfaces]\ninside = [\"a\"]\noutside = [\"b\"]\n[pool]\naddresses = [\"203.0.113.1\"]\n\
                 [fib_cache]\nentries = {entries}\nmax_age = \"{age}\"\n"
            ))
            .expect("config")
        };
        assert_eq!(fibc_max_age_jiffies(&with("4096", "50ms"), 250), 13); // 12.5 rounded up
        assert_eq!(fibc_max_age_jiffies(&with("4096", "50ms"), 1000), 50);
        assert_eq!(fibc_max_age_jiffies(&with("4096", "1ms"), 100), 1); // never 0 while on
        assert_eq!(fibc_max_age_jiffies(&with("4096", "10s"), 300), 3000);
        assert_eq!(fibc_max_age_jiffies(&with("0", "50ms"), 250), 0);
    }

    #[test]
    fn only_x86_64_loads_the_data_plane() {
        assert!(check_arch("x86_64").is_ok());
        for arch in ["aarch64", "riscv64", "powerpc64"] {
            let e = check_arch(arch).unwrap_err().to_string();
            assert!(e.contains(arch) && e.contains("How CPUs share state"), "{e}");
        }
    }

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn pool_runs_follow_pool_index_order() {
        let addrs = [
            a("203.0.113.0"),
            a("203.0.113.1"),
            a("203.0.113.2"),
            a("192.0.2.7"),
            a("192.0.2.9"),
            a("192.0.2.10"),
        ];
        let r = pool_runs(&addrs);
        let got: Vec<(u32, u16, u16)> = r.iter().map(|r| (r.first, r.count, r.base)).collect();
        assert_eq!(
            got,
            vec![
                (u32::from(a("203.0.113.0")), 3, 0),
                (u32::from(a("192.0.2.7")), 1, 3),
                (u32::from(a("192.0.2.9")), 2, 4)
            ]
        );
        // every address is found where its pool index says, by the data plane's rule
        for (i, x) in addrs.iter().enumerate() {
            let x = u32::from(*x);
            let hit: Vec<u32> = r
                .iter()
                .filter(|r| x.wrapping_sub(r.first) < r.count as u32)
                .map(|r| r.base as u32 + (x - r.first))
                .collect();
            assert_eq!(hit, vec![i as u32]);
        }
        // a descending pair is two runs, not one
        assert_eq!(pool_runs(&[a("192.0.2.2"), a("192.0.2.1")]).len(), 2);
        assert!(pool_runs(&[]).is_empty());
    }
}
