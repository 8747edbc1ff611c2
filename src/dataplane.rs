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
use libbpf_rs::{Link, MapCore, MapFlags};
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
    /// The verifier refused a program: one line with the program, the verifier's reason
    /// and statistics, the kernel.
    #[error("the BPF verifier refused program {prog} on kernel {kernel}: {reason} [{errno}]; {log_hint}")]
    Verifier { prog: String, kernel: String, reason: String, errno: String, log_hint: String },
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

/// A loaded data plane.
pub struct Dataplane {
    /// The loaded skeleton, when this process loaded the programs (a fresh start, an
    /// upgrade, `Persistence::Private`). A restart of the same build reuses the pinned
    /// programs and loads nothing: then there is no skeleton, and every use of the data
    /// plane goes through [`Dataplane::prog`] and [`Dataplane::map`], which work either way.
    pub skel: LoadedSkel,
    pub tables: Tables,
    pub sizes: Sizes,
    /// True when the maps were taken over from a running instance.
    pub took_over: bool,
    persistence: Persistence,
    inst: Instance,
    /// The build's identity ([`build_identity`]): written beside the pins once the links
    /// run this instance's programs.
    identity: String,
    /// What the verifier said of each program (a fresh load only).
    logs: Vec<(String, String)>,
}

/// The skeleton of a data plane this process loaded. Dereferences to it; on a data plane
/// whose programs were reused (a restart of the same build) there is none, and using it
/// panics: code that runs on either path uses [`Dataplane::prog`] and [`Dataplane::map`].
pub struct LoadedSkel(Option<NatrixSkel<'static>>);

impl LoadedSkel {
    pub fn get(&self) -> Option<&NatrixSkel<'static>> {
        self.0.as_ref()
    }
}

impl std::ops::Deref for LoadedSkel {
    type Target = NatrixSkel<'static>;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect(
            "the data plane's programs were reused from their pins (no skeleton was loaded): \
             use Dataplane::prog / Dataplane::map",
        )
    }
}

impl std::ops::DerefMut for LoadedSkel {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0
            .as_mut()
            .expect("the data plane's programs were reused from their pins (no skeleton was loaded)")
    }
}

/// One program instance as descriptors: its programs and every map of the object (the
/// shared tables and the instance's own), by name. Made from the loaded skeleton or from the
/// pins, so that everything after loading works the same on both paths.
struct Instance {
    progs: Vec<(String, std::os::fd::OwnedFd)>,
    maps: Vec<(String, libbpf_rs::MapHandle)>,
    /// The programs were reused from their pins: nothing was loaded or verified.
    reused: bool,
}

impl Instance {
    fn from_skel(skel: &NatrixSkel<'_>) -> Result<Self> {
        use libbpf_rs::skel::Skel;
        let mut progs = Vec::new();
        for p in skel.object().progs() {
            if !p.autoload() {
                continue;
            }
            let name = p.name().to_string_lossy().into_owned();
            let fd = p.as_fd().try_clone_to_owned().map_err(|source| DataplaneError::Io {
                what: format!("duplicating program {name}"),
                source,
            })?;
            progs.push((name, fd));
        }
        let mut maps = Vec::new();
        for m in skel.object().maps() {
            let name = m.name().to_string_lossy().into_owned();
            if !m.autocreate() {
                continue;
            }
            let h = libbpf_rs::MapHandle::try_from(&m).map_err(bpf(format!("map {name}")))?;
            maps.push((name, h));
        }
        Ok(Instance { progs, maps, reused: false })
    }
}

/// How [`Dataplane::load_with`] loads.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Every program's full verifier log (BPF log level 1 and the statistics) into this
    /// file. Slow: the verifier writes every instruction's state (tens of MB, minutes under
    /// emulation, for a program near the limit). Without it, each program gets a small
    /// buffer with the verifier's errors and statistics only.
    pub verifier_log: Option<PathBuf>,
    /// Load and verify a new program instance even when the pinned one is this build's.
    pub reload: bool,
}

/// The environment variable [`LoadOptions::from_env`] reads: a file for the full verifier
/// log (`natrix run --verifier-log`).
pub const VERIFIER_LOG_ENV: &str = "NATRIX_VERIFIER_LOG";

impl LoadOptions {
    /// `NATRIX_VERIFIER_LOG=FILE`: the full verifier log into FILE.
    pub fn from_env() -> Self {
        LoadOptions {
            verifier_log: std::env::var_os(VERIFIER_LOG_ENV).filter(|v| !v.is_empty()).map(PathBuf::from),
            reload: false,
        }
    }
}

/// One program as the verifier saw it at a fresh load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgReport {
    pub name: String,
    /// Instructions the verifier processed (bpf_prog_info.verified_insns, Linux >= 5.16).
    pub verified_insns: u32,
    /// The stack of each subprogram, the program's own first, as the verifier's
    /// statistics give it ("stack depth A+B+C"); empty when the program was not loaded by
    /// this process.
    pub stack_depths: Vec<u32>,
    /// The verifier's statistics line ("processed N insns (limit 1000000) ...").
    pub stats_line: String,
}

/// The pin of the build's identity: a symbolic link whose target is [`build_identity`]
/// of the programs pinned beside it.
pub const BUILD_PIN: &str = "build";
/// Pins of the running instance's programs (`prog_<name>`) and of its own maps
/// (`inst_<name>`; its program array is [`PROGS_PIN`]).
const PROG_PIN_PREFIX: &str = "prog_";
const INST_PIN_PREFIX: &str = "inst_";

fn prog_pin(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{PROG_PIN_PREFIX}{name}"))
}

/// Where a map of the object is pinned: the shared tables by name, the instance's own as
/// `inst_<name>`, its program array as [`PROGS_PIN`].
fn map_pin(dir: &Path, name: &str) -> PathBuf {
    if MAP_NAMES.contains(&name) {
        dir.join(name)
    } else if name == "nx_progs" {
        dir.join(PROGS_PIN)
    } else {
        // bpffs refuses names with a dot (libbpf names the .bss map "<object>.bss")
        dir.join(format!("{INST_PIN_PREFIX}{}", name.replace('.', "_")))
    }
}

/// Why the pinned map at `path` cannot stand in for `map` as it is sized now.
enum PinMismatch {
    Read(libbpf_rs::Error),
    Layout { running: (u32, u32, u32, u32), want: (u32, u32, u32, u32) },
}

/// Compares the map pinned at `path` with `map` as sized (key and value sizes, entries,
/// flags) and, when they agree, makes the object use it. bpf_map__reuse_fd (what
/// reuse_pinned_map calls) takes the fd as it is: compare layouts here, or a program would
/// run on a table whose entries mean something else. The kernel adds BPF_F_RDONLY_PROG to
/// every devmap it creates; that bit says nothing about the layout. The event log's size is
/// the running one's: what it holds (events not yet exported) is kept, whatever
/// log.buffer_events says now.
fn reuse_pinned(map: &mut libbpf_rs::OpenMapMut<'_>, path: &Path) -> std::result::Result<(), PinMismatch> {
    let name = map.name().to_string_lossy().into_owned();
    let pinned =
        libbpf_rs::MapHandle::from_pinned_path(path).and_then(|h| h.info()).map_err(PinMismatch::Read)?;
    const BPF_F_RDONLY_PROG: u32 = 1 << 7;
    let mut pi = pinned.info;
    if matches!(pinned.map_type(), libbpf_rs::MapType::Devmap | libbpf_rs::MapType::DevmapHash) {
        pi.map_flags &= !BPF_F_RDONLY_PROG;
    }
    if name == "nx_log_rb" && pinned.map_type() == libbpf_rs::MapType::RingBuf {
        if pi.max_entries != map.max_entries() {
            warn!(
                running = pi.max_entries,
                configured = map.max_entries(),
                "log.buffer_events: the running event log keeps its size until `natrix down`"
            );
        }
        map.set_max_entries(pi.max_entries).map_err(PinMismatch::Read)?;
    }
    let want = (map.key_size(), map.value_size(), map.max_entries(), map.map_flags());
    let running = (pi.key_size, pi.value_size, pi.max_entries, pi.map_flags);
    if running != want {
        return Err(PinMismatch::Layout { running, want });
    }
    map.reuse_pinned_map(path).map_err(PinMismatch::Read)
}

/// What a per-instance map's size follows in the config, for the log line that says why a
/// restart loads new programs.
fn sized_by(map: &str) -> &'static str {
    match map {
        "nx_fibc" => "fib_cache.entries",
        "nx_excl" => "[[exclude]]",
        "nx_subnets" => "nat.subscribers",
        _ => "this build",
    }
}

/// The identity of the programs an opened and prepared (bpf_object__prepare: relocated,
/// maps in place, nothing loaded) object would load: a hash of every program's name, type
/// and final instructions, the instructions that refer to a map naming it by its place in
/// the object instead of by descriptor. Two builds with the same identity load the same
/// code, so a restart with an equal identity reuses the pinned programs.
fn build_identity(obj: &libbpf_rs::OpenObject) -> String {
    use libbpf_rs::AsRawLibbpf;
    // FNV-1a, 128 bits: not against an adversary (whoever can write the pin directory can
    // replace the programs anyway), against two builds colliding by chance
    struct Fnv(u128);
    impl Fnv {
        fn eat(&mut self, b: &[u8]) {
            for &x in b {
                self.0 ^= u128::from(x);
                self.0 = self.0.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
            }
            // a separator, so that ("ab", "c") and ("a", "bc") differ
            self.0 = (self.0 ^ 0xff).wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
    }
    let mut h = Fnv(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d);
    let mut fds: Vec<(i32, u32)> = Vec::new();
    for (i, m) in obj.maps().enumerate() {
        // SAFETY: a map of this object.
        let fd = unsafe { libbpf_rs::libbpf_sys::bpf_map__fd(m.as_libbpf_object().as_ptr()) };
        fds.push((fd, i as u32));
        h.eat(m.name().as_encoded_bytes());
        // without BPF_F_RDONLY_PROG, which the kernel adds to every devmap it creates (a
        // reused map has it, the definition not)
        let flags = m.map_flags() & !(1 << 7);
        h.eat(&[m.map_type() as u32, m.key_size(), m.value_size(), flags].map(u32::to_ne_bytes).concat());
    }
    const LD_IMM64: u8 = 0x18;
    const PSEUDO_MAP_FD: u8 = 1;
    const PSEUDO_MAP_VALUE: u8 = 2;
    const PSEUDO_BTF_ID: u8 = 3;
    for p in obj.progs() {
        h.eat(p.name().as_encoded_bytes());
        h.eat(&[p.prog_type() as u32, u32::from(p.autoload())].map(u32::to_ne_bytes).concat());
        let insns = p.insns();
        let mut bytes = Vec::with_capacity(insns.len() * 8);
        let mut i = 0;
        while i < insns.len() {
            let x = &insns[i];
            let regs = x.dst_reg() | (x.src_reg() << 4);
            let mut imm = x.imm;
            let mut next_imm = None;
            if x.code == LD_IMM64 && i + 1 < insns.len() {
                match x.src_reg() {
                    PSEUDO_MAP_FD | PSEUDO_MAP_VALUE => {
                        imm = fds.iter().find(|(fd, _)| *fd == x.imm).map_or(-1, |(_, idx)| *idx as i32);
                    }
                    // a kernel variable: its BTF id is the kernel's, the module BTF's fd ours
                    PSEUDO_BTF_ID => next_imm = Some(0i32),
                    _ => {}
                }
            }
            bytes.push(x.code);
            bytes.push(regs);
            bytes.extend_from_slice(&x.off.to_ne_bytes());
            bytes.extend_from_slice(&imm.to_ne_bytes());
            if let Some(n) = next_imm {
                let y = &insns[i + 1];
                bytes.push(y.code);
                bytes.push(y.dst_reg() | (y.src_reg() << 4));
                bytes.extend_from_slice(&y.off.to_ne_bytes());
                bytes.extend_from_slice(&n.to_ne_bytes());
                i += 1;
            }
            i += 1;
        }
        h.eat(&bytes);
    }
    // SAFETY: libbpf_version_string returns a static NUL-terminated string.
    let libbpf = unsafe { std::ffi::CStr::from_ptr(libbpf_rs::libbpf_sys::libbpf_version_string()) };
    h.eat(libbpf.to_bytes());
    format!("natrix-bpf-1:{:032x}", h.0)
}

/// The kernel's release (uname -r), for messages about what it refused.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "?".into(), |s| s.trim().to_string())
}

/// The verifier's log of each program of one load, in buffers of this process's own
/// (bpf_program__set_log_buf): by default small, at BPF_LOG_STATS (the verifier's error
/// messages and its final statistics: what a one-line error and the report need); with a
/// full log asked for, large, at BPF_LOG_LEVEL1 as well.
struct VerifierLogs {
    bufs: Vec<(String, Vec<u8>)>,
}

/// BPF_LOG_LEVEL1 and BPF_LOG_STATS (include/linux/bpf_verifier.h).
const BPF_LOG_LEVEL1: u32 = 1;
const BPF_LOG_STATS: u32 = 4;
/// A program's statistics and error messages fit easily; the kernel fails a load whose log
/// does not fit (ENOSPC), so there is room to spare.
const STATS_LOG_BYTES: usize = 256 << 10;
/// A full log of a program near the 1M limit is about 90 MB.
const FULL_LOG_BYTES: usize = 256 << 20;

impl VerifierLogs {
    fn attach(obj: &mut libbpf_rs::OpenObject, full: bool) -> Self {
        use libbpf_rs::AsRawLibbpf;
        let (level, size) = if full {
            (BPF_LOG_LEVEL1 | BPF_LOG_STATS, FULL_LOG_BYTES)
        } else {
            (BPF_LOG_STATS, STATS_LOG_BYTES)
        };
        let mut bufs = Vec::new();
        for mut p in obj.progs_mut() {
            if !p.autoload() {
                continue;
            }
            let name = p.name().to_string_lossy().into_owned();
            let mut buf = vec![0u8; size];
            p.set_log_level(level);
            // SAFETY: the buffer outlives the load (self keeps it; it is never resized), and
            // libbpf only writes into it while loading.
            unsafe {
                libbpf_rs::libbpf_sys::bpf_program__set_log_buf(
                    p.as_libbpf_object().as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len() as _,
                );
            }
            bufs.push((name, buf));
        }
        VerifierLogs { bufs }
    }

    /// Each program's log as text, in load order (empty: not loaded).
    fn texts(&self) -> Vec<(String, String)> {
        self.bufs
            .iter()
            .map(|(n, b)| {
                let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                (n.clone(), String::from_utf8_lossy(&b[..end]).into_owned())
            })
            .collect()
    }
}

/// A verifier log's statistics: (stack depth of each subprogram, the "processed N insns"
/// line).
fn parse_stats(log: &str) -> (Vec<u32>, String) {
    let stack = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("stack depth "))
        .map(|s| s.trim().split('+').filter_map(|d| d.trim().parse().ok()).collect())
        .unwrap_or_default();
    let stats = log.lines().rev().find(|l| l.starts_with("processed ")).unwrap_or("").trim().to_string();
    (stack, stats)
}

/// The verifier's reason for refusing a program: the last line of its log that is not
/// part of the final statistics (with BPF_LOG_STATS alone the log is the error messages
/// and the statistics; with the full log, the instruction trace comes before them).
fn refusal_reason(log: &str) -> Option<String> {
    let is_stats = |l: &str| {
        l.starts_with("processed ")
            || l.starts_with("stack depth ")
            || l.starts_with("verification time ")
            || l.trim().is_empty()
            || l.starts_with("-- END PROG LOAD LOG --")
    };
    log.lines().rev().find(|l| !is_stats(l)).map(|l| l.trim().to_string())
}

/// libbpf's own messages: warnings to the log as warnings, the rest at debug level; while
/// a load runs on this thread they are held back instead, so that a refused program makes
/// one error, not a page (libbpf prints the load failure itself, then the error names it).
mod libbpf_print {
    use std::cell::RefCell;

    use libbpf_rs::PrintLevel;

    thread_local! {
        static HELD: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
    }

    fn print(level: PrintLevel, msg: String) {
        let msg = msg.trim_end().to_string();
        let warn = matches!(level, PrintLevel::Warn);
        let held = HELD.with(|h| match h.borrow_mut().as_mut() {
            Some(v) if warn => {
                v.push(msg.clone());
                true
            }
            _ => false,
        });
        if held {
            return;
        }
        if warn {
            tracing::warn!(target: "libbpf", "{msg}");
        } else {
            tracing::debug!(target: "libbpf", "{msg}");
        }
    }

    pub fn install() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            libbpf_rs::set_print(Some((PrintLevel::Info, print)));
        });
    }

    /// Holds libbpf's warnings on this thread until [`release`].
    pub fn hold() {
        HELD.with(|h| *h.borrow_mut() = Some(Vec::new()));
    }

    /// The warnings held since [`hold`]; printing goes back to normal.
    pub fn release() -> Vec<String> {
        HELD.with(|h| h.borrow_mut().take().unwrap_or_default())
    }
}

/// Each program's verifier log, by name, in load order.
pub type ProgLogs = Vec<(String, String)>;

/// Loads an opened skeleton with a verifier log per program. A refusal becomes one
/// [`DataplaneError::Verifier`]: the program, the verifier's reason and statistics line,
/// the kernel. With `opts.verifier_log`, every program's full log goes to that file.
/// Returns the loaded skeleton and each program's log (its statistics, for
/// [`Dataplane::verifier_report`]).
pub fn load_logged<'o, S>(mut open: S, opts: &LoadOptions) -> Result<(S::Output, ProgLogs)>
where
    S: OpenSkel<'o>,
{
    libbpf_print::install();
    let full = opts.verifier_log.is_some();
    let logs = VerifierLogs::attach(open.open_object_mut(), full);
    libbpf_print::hold();
    let loaded = open.load();
    let held = libbpf_print::release();
    let texts = logs.texts();
    drop(logs);
    if let Some(path) = &opts.verifier_log {
        let mut all = String::new();
        for (name, log) in &texts {
            if !log.is_empty() {
                all.push_str(&format!("==== {name} (kernel {}) ====\n{log}\n", kernel_release()));
            }
        }
        for l in &held {
            all.push_str(&format!("libbpf: {l}\n"));
        }
        match std::fs::write(path, all) {
            Ok(()) => info!(file = %path.display(), "the verifier's full log written"),
            Err(e) => warn!(file = %path.display(), "cannot write the verifier's log: {e}"),
        }
    }
    match loaded {
        Ok(skel) => {
            for l in &held {
                warn!(target: "libbpf", "{l}");
            }
            Ok((skel, texts))
        }
        Err(source) => {
            // libbpf loads the programs in order and stops at the first it cannot load:
            // that one it names in its warning, and it is the last with a log
            let named = held.iter().find_map(|l| {
                let rest = l.strip_prefix("libbpf: ").unwrap_or(l).strip_prefix("prog '")?;
                let (name, tail) = rest.split_once('\'')?;
                tail.contains("failed to load").then(|| name.to_string())
            });
            let failed = named
                .and_then(|n| texts.iter().find(|(t, _)| *t == n).cloned())
                .or_else(|| texts.iter().rev().find(|(_, l)| !l.is_empty()).cloned());
            let Some((prog, log)) = failed else {
                // not the verifier (a map, BTF, the kernel's features): libbpf's own words
                for l in &held {
                    warn!(target: "libbpf", "{l}");
                }
                return Err(DataplaneError::Bpf { what: "loading the BPF object".into(), source });
            };
            for l in &held {
                tracing::debug!(target: "libbpf", "{l}");
            }
            let (_, stats) = parse_stats(&log);
            let mut reason = refusal_reason(&log).unwrap_or_else(|| source.to_string());
            if !stats.is_empty() && !reason.contains(&stats) {
                reason = format!("{reason} ({stats})");
            }
            let log_hint = match &opts.verifier_log {
                Some(p) => format!("the full verifier log is in {}", p.display()),
                None => format!("for the full verifier log set {VERIFIER_LOG_ENV}=FILE (slow)"),
            };
            Err(DataplaneError::Verifier {
                prog,
                kernel: kernel_release(),
                reason: reason.replace('\n', " "),
                errno: source.to_string(),
                log_hint,
            })
        }
    }
}

/// The id of the program or map behind `fd` (bpf_obj_get_info_by_fd), 0 when unknown.
pub fn prog_id(fd: std::os::fd::BorrowedFd<'_>) -> u32 {
    prog_info(fd).map_or(0, |i| i.id)
}

fn prog_info(fd: std::os::fd::BorrowedFd<'_>) -> Option<libbpf_rs::libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: a valid fd and an info struct of the size we pass.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    (rc == 0).then_some(info)
}

/// The program each XDP link under `pin` runs (`link_<ifname>`), and the programs in the
/// slots of the pinned program array (`nx_progs[<slot>]`), by id: what a restart that
/// reuses the programs keeps and one that loads new ones changes.
pub fn running_program_ids(pin: &Path) -> Result<std::collections::BTreeMap<String, u32>> {
    let mut out = std::collections::BTreeMap::new();
    let rd = std::fs::read_dir(pin)
        .map_err(|source| DataplaneError::Io { what: format!("reading {}", pin.display()), source })?;
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("link_") {
            continue;
        }
        let link = Link::open(e.path()).map_err(bpf(format!("opening {name}")))?;
        let mut info = libbpf_rs::libbpf_sys::bpf_link_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        // SAFETY: a valid fd and an info struct of the size we pass.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_link_get_info_by_fd(link.as_fd().as_raw_fd(), &mut info, &mut len)
        };
        if rc != 0 {
            return Err(DataplaneError::Io {
                what: format!("reading the link {name}"),
                source: std::io::Error::last_os_error(),
            });
        }
        out.insert(name, info.prog_id);
    }
    let progs =
        libbpf_rs::MapHandle::from_pinned_path(pin.join(PROGS_PIN)).map_err(bpf("opening nx_progs"))?;
    for slot in 0..progs.info().map_or(0, |i| i.info.max_entries) {
        // a program array read from user space gives the id of the program in the slot
        if let Ok(Some(v)) = progs.lookup(&slot.to_ne_bytes(), MapFlags::ANY) {
            if v.len() >= 4 {
                out.insert(format!("nx_progs[{slot}]"), u32::from_ne_bytes([v[0], v[1], v[2], v[3]]));
            }
        }
    }
    Ok(out)
}

/// The LPM tries this instance fills from the config: each with the keys it must hold
/// (`[[exclude]]` into nx_excl; nat.subscribers beyond what nx_config holds into
/// nx_subnets).
fn lpm_contents(cfg: &Config) -> Vec<(&'static str, std::collections::BTreeSet<Vec<u8>>)> {
    let keys = |nets: &[ipnet::Ipv4Net]| {
        nets.iter()
            .map(|net| {
                let key = nx_lpm_key { prefixlen: net.prefix_len() as u32, addr: ip_be(net.network()) };
                bytemuck::bytes_of(&key).to_vec()
            })
            .collect()
    };
    let subnets = if cfg.nat.deterministic.is_none() && cfg.nat.subscribers.len() > SUBNETS {
        keys(&cfg.nat.subscribers)
    } else {
        Default::default()
    };
    vec![("nx_excl", keys(&cfg.exclude)), ("nx_subnets", subnets)]
}

impl Dataplane {
    /// Opens and loads the BPF object with table sizes from `cfg` ([`LoadOptions::from_env`]).
    /// With `Pinned`, maps that are already pinned are reused as they are (a takeover), the
    /// others are created and pinned; when the pinned programs are this build's and the
    /// config asks nothing of them that only a new instance can carry, they are reused
    /// too, and nothing is loaded or verified.
    pub fn load(cfg: &Config, persistence: Persistence) -> Result<Self> {
        Self::load_with(cfg, persistence, &LoadOptions::from_env())
    }

    pub fn load_with(cfg: &Config, persistence: Persistence, opts: &LoadOptions) -> Result<Self> {
        check_arch(std::env::consts::ARCH)?;
        libbpf_print::install();
        let sizes = Sizes::from_config(cfg);
        if let Persistence::Pinned(dir) = &persistence {
            if is_pinned(dir) {
                if opts.reload {
                    info!("--reload: loading and verifying a new program instance (the tables are kept)");
                } else if opts.verifier_log.is_some() {
                    info!("{VERIFIER_LOG_ENV}: loading and verifying a new program instance for its log");
                } else if let Some(dp) = Self::reuse(cfg, dir, sizes)? {
                    return Ok(dp);
                }
            }
        }
        Self::load_fresh(cfg, sizes, persistence, opts)
    }

    /// Opens the object with the config's sizes; under `dir`, with the shared tables pinned
    /// there reused (a takeover: `took_over`) and, with `own`, the instance's own maps too.
    /// Err(reason) inside Ok: an own map cannot be reused (a new instance must be loaded).
    #[allow(clippy::type_complexity)]
    fn open_object<'o>(
        storage: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
        sizes: Sizes,
        dir: Option<&Path>,
        took_over: bool,
        own: bool,
    ) -> Result<(crate::skel::OpenNatrixSkel<'o>, Vec<String>, Option<String>)> {
        let mut open = NatrixSkelBuilder::default().open(storage).map_err(bpf("opening the BPF object"))?;
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
        let Some(dir) = dir.filter(|_| took_over) else { return Ok((open, fresh, None)) };
        let pin = dir.display().to_string();
        let mut own_problem = None;
        for mut map in open.open_object_mut().maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let path = map_pin(dir, &name);
            if !MAP_NAMES.contains(&name.as_str()) {
                if !own || own_problem.is_some() {
                    continue;
                }
                if !path.exists() {
                    own_problem = Some(format!("the running instance's map {name} is not pinned"));
                    continue;
                }
                match reuse_pinned(&mut map, &path) {
                    Ok(()) => {}
                    Err(PinMismatch::Read(e)) => {
                        own_problem = Some(format!("the running instance's map {name} cannot be read ({e})"))
                    }
                    Err(PinMismatch::Layout { running, want }) => {
                        own_problem = Some(format!(
                            "{} changed (map {name}: running {} entries, now {})",
                            sized_by(&name),
                            running.2,
                            want.2
                        ))
                    }
                }
                continue;
            }
            if !path.exists() && FRESH_ON_TAKEOVER.contains(&name.as_str()) {
                // made by this load, pinned once it is loaded (an upgrade from a version
                // without it)
                fresh.push(name);
                continue;
            }
            if !path.exists() {
                return Err(DataplaneError::Incompatible {
                    pin,
                    what: format!("version (map {name} is missing)"),
                });
            }
            match reuse_pinned(&mut map, &path) {
                Ok(()) => {}
                Err(PinMismatch::Read(source)) => {
                    return Err(DataplaneError::Bpf { what: format!("reusing pinned map {name}"), source })
                }
                Err(PinMismatch::Layout { running: r, want: w }) => {
                    return Err(DataplaneError::Incompatible {
                        pin,
                        what: format!(
                            "table layout or size (map {name}: running key/value/entries/flags {}/{}/{}/{:#x}, \
                             this version and config {}/{}/{}/{:#x}; pool, ports, block size or [limits] changed?)",
                            r.0, r.1, r.2, r.3, w.0, w.1, w.2, w.3
                        ),
                    })
                }
            }
        }
        Ok((open, fresh, own_problem))
    }

    /// A restart of the same build: the pinned programs and their maps, if they are this
    /// build's and the config needs no new instance (then None, the reason logged). Loads
    /// and verifies nothing: the object is only opened and prepared (relocated, with every
    /// map the pinned one) to compute its identity.
    fn reuse(cfg: &Config, dir: &Path, sizes: Sizes) -> Result<Option<Self>> {
        let fresh = |why: &str| {
            info!("{why}: loading and verifying a new program instance (the tables are kept)");
            Ok(None)
        };
        let Ok(running) = std::fs::read_link(dir.join(BUILD_PIN)) else {
            return fresh(
                "no program instance of a known build is pinned (an older natrix, or a start cut short)",
            );
        };
        let running = running.to_string_lossy().into_owned();
        let mut storage = MaybeUninit::uninit();
        let (mut open, missing, own_problem) = Self::open_object(&mut storage, sizes, Some(dir), true, true)?;
        if let Some(why) = own_problem {
            return fresh(&why);
        }
        if let Some(m) = missing.first() {
            return fresh(&format!("map {m} is not pinned yet"));
        }
        {
            use libbpf_rs::AsRawLibbpf;
            libbpf_print::hold();
            // SAFETY: an opened object, not yet prepared or loaded.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_object__prepare(open.open_object_mut().as_libbpf_object().as_ptr())
            };
            let held = libbpf_print::release();
            if rc != 0 {
                for l in held {
                    tracing::debug!(target: "libbpf", "{l}");
                }
                return fresh(&format!(
                    "this build's object cannot be prepared to compare it ({})",
                    std::io::Error::from_raw_os_error(-rc)
                ));
            }
        }
        let identity = build_identity(open.open_object());
        if identity != running {
            return fresh(&format!("another build is running ({running}, this is {identity})"));
        }
        // The instance's LPM tries are filled before the links switch to it: a change of
        // them is a new instance, never an edit of the running one under traffic.
        for (name, want) in lpm_contents(cfg) {
            let m = libbpf_rs::MapHandle::from_pinned_path(map_pin(dir, name))
                .map_err(bpf(format!("opening {name}")))?;
            let have: std::collections::BTreeSet<Vec<u8>> = m.keys().collect();
            if have != want {
                return fresh(&format!("{} changed", sized_by(name)));
            }
        }
        let mut progs = Vec::new();
        for p in open.open_object().progs() {
            if !p.autoload() {
                continue;
            }
            let name = p.name().to_string_lossy().into_owned();
            match libbpf_rs::Program::fd_from_pinned_path(prog_pin(dir, &name)) {
                Ok(fd) => progs.push((name, fd)),
                Err(_) => return fresh(&format!("program {name} is not pinned")),
            }
        }
        let mut maps = Vec::new();
        for m in open.open_object().maps() {
            let name = m.name().to_string_lossy().into_owned();
            let h = libbpf_rs::MapHandle::from_pinned_path(map_pin(dir, &name))
                .map_err(bpf(format!("opening pinned map {name}")))?;
            maps.push((name, h));
        }
        drop(open);
        // tables of another layout are refused as configure() refuses them on a fresh load
        if let Some(h) = maps.iter().find(|(n, _)| n == "nx_cfg").map(|(_, h)| h) {
            if let Ok(Some(v)) = h.lookup(&0u32.to_ne_bytes(), MapFlags::ANY) {
                if let Some(c) = crate::tables::value::<nx_config>(&v) {
                    if c.layout != TABLE_LAYOUT {
                        return Err(layout_error(dir.display().to_string(), c.layout));
                    }
                }
            }
        }
        let tables = Tables::open_pinned(dir)?;
        info!(build = %identity, "the running programs are this build's: reused, nothing loaded or verified");
        Ok(Some(Dataplane {
            skel: LoadedSkel(None),
            tables,
            sizes,
            took_over: true,
            persistence: Persistence::Pinned(dir.to_path_buf()),
            inst: Instance { progs, maps, reused: true },
            identity,
            logs: Vec::new(),
        }))
    }

    fn load_fresh(cfg: &Config, sizes: Sizes, persistence: Persistence, opts: &LoadOptions) -> Result<Self> {
        let _ = cfg;
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let pin_dir = match &persistence {
            Persistence::Pinned(p) => Some(p.clone()),
            Persistence::Private => None,
        };
        let took_over = pin_dir.as_deref().is_some_and(is_pinned);
        let (mut open, fresh, _) = Self::open_object(storage, sizes, pin_dir.as_deref(), took_over, false)?;
        let identity = {
            use libbpf_rs::AsRawLibbpf;
            // prepared first (as a restart prepares it to compare), so that the identity is
            // computed from the same instructions on both paths
            libbpf_print::hold();
            // SAFETY: an opened object, not yet prepared or loaded.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_object__prepare(open.open_object_mut().as_libbpf_object().as_ptr())
            };
            let held = libbpf_print::release();
            if rc != 0 {
                for l in &held {
                    warn!(target: "libbpf", "{l}");
                }
                return Err(DataplaneError::Bpf {
                    what: "preparing the BPF object (maps, relocations)".into(),
                    source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(-rc)),
                });
            }
            build_identity(open.open_object())
        };
        let (skel, logs) = load_logged(open, opts)?;
        let tables = Tables::from_skel(&skel)?;
        let inst = Instance::from_skel(&skel)?;
        let mut dp = Dataplane {
            skel: LoadedSkel(Some(skel)),
            tables,
            sizes,
            took_over,
            persistence,
            inst,
            identity,
            logs,
        };
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

    /// Per program: what the verifier processed (bpf_prog_info) and, after a fresh load
    /// by this process, the stack depths and statistics line of its log.
    pub fn verifier_report(&self) -> Vec<ProgReport> {
        self.inst
            .progs
            .iter()
            .map(|(name, fd)| {
                let log = self.logs.iter().find(|(n, _)| n == name).map_or("", |(_, l)| l.as_str());
                let (stack_depths, stats_line) = parse_stats(log);
                ProgReport {
                    name: name.clone(),
                    verified_insns: prog_info(fd.as_fd()).map_or(0, |i| i.verified_insns),
                    stack_depths,
                    stats_line,
                }
            })
            .collect()
    }

    /// The program `name` of this instance (loaded or reused).
    pub fn prog(&self, name: &str) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inst.progs.iter().find(|(n, _)| n == name).map(|(_, fd)| fd.as_fd())
    }

    /// The map `name` of this instance: a shared table or one of the instance's own.
    pub fn map(&self, name: &str) -> Option<&libbpf_rs::MapHandle> {
        self.inst.maps.iter().find(|(n, _)| n == name).map(|(_, h)| h)
    }

    fn need_map(&self, name: &str) -> Result<&libbpf_rs::MapHandle> {
        self.map(name).ok_or_else(|| DataplaneError::Io {
            what: format!("map {name} of the data plane"),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        })
    }

    fn need_prog(&self, name: &str) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.prog(name).ok_or_else(|| DataplaneError::Io {
            what: format!("program {name} of the data plane"),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        })
    }

    /// The ids of this instance's programs, by name.
    pub fn program_ids(&self) -> Vec<(String, u32)> {
        self.inst.progs.iter().map(|(n, fd)| (n.clone(), prog_id(fd.as_fd()))).collect()
    }

    /// True when the running programs were reused (nothing was loaded or verified).
    pub fn programs_reused(&self) -> bool {
        self.inst.reused
    }

    /// The identity of the build whose programs run ([`BUILD_PIN`]).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The reaper: the control programs and their batch buffer.
    pub fn reaper(&self) -> Result<crate::expiry::Reaper<'_>> {
        let buf = self.need_map("nx_reap_buf")?;
        Ok(crate::expiry::Reaper::new(|name| self.prog(name), buf))
    }

    fn pin_maps(&mut self, dir: &Path, names: &[&str]) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|source| DataplaneError::Io { what: format!("creating {}", dir.display()), source })?;
        for (name, h) in self.inst.maps.iter_mut().map(|(n, h)| (&*n, h)) {
            if names.contains(&name.as_str()) {
                h.pin(dir.join(name.as_str())).map_err(bpf(format!("pinning map {name}")))?;
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
                return Err(layout_error(pin, old.layout));
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
        run_syscall_prog(self.need_prog("nx_clock")?, &mut ctx).map_err(bpf("running nx_clock"))?;
        let c: nx_clock = bytemuck::pod_read_unaligned(&ctx);
        Ok(crate::clock::Sample { jiffies: c.jiffies, mono_ns: c.mono_ns })
    }

    /// `[[exclude]]` prefixes into the LPM trie (this program instance's own map: filled
    /// before the links switch to it).
    pub fn set_exclusions(&self, cfg: &Config) -> Result<()> {
        for (name, keys) in lpm_contents(cfg) {
            let m = self.need_map(name)?;
            for key in keys {
                m.update(&key, &[1u8], MapFlags::ANY).map_err(bpf(format!("filling {name}")))?;
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
        self.reaper()?.reap(a).map_err(bpf("running the control program"))
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
                self.need_map("nx_ifrole")?
                    .update(&k, bytemuck::bytes_of(&v), MapFlags::ANY)
                    .map_err(bpf("filling nx_ifrole"))?;
            }
            t.tx.update(&k, &k, MapFlags::ANY)
                .map_err(bpf(format!("adding {} to the redirect map", i.name)))?;
        }
        if self.inst.reused {
            // the running instance's own array: entries of interfaces no longer configured
            // go (a new instance's starts empty)
            let role = self.need_map("nx_ifrole")?;
            let zero = nx_iface::default();
            for ifindex in 0..IFROLE_DIRECT {
                let k = ifindex.to_ne_bytes();
                if wanted.contains(&k) {
                    continue;
                }
                if let Ok(Some(v)) = role.lookup(&k, MapFlags::ANY) {
                    if v.iter().any(|&b| b != 0) {
                        role.update(&k, bytemuck::bytes_of(&zero), MapFlags::ANY)
                            .map_err(bpf("clearing nx_ifrole"))?;
                    }
                }
            }
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
    pub fn attach(&mut self, ifaces: &[Iface], mode: XdpMode) -> Result<()> {
        let Persistence::Pinned(dir) = self.persistence.clone() else {
            return Err(DataplaneError::Io {
                what: "attach needs a pinned data plane".into(),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        let dir = dir.as_path();
        let mut created: Vec<PathBuf> = Vec::new();
        let res = (|| {
            for i in ifaces {
                let prog = self.need_prog(match i.role {
                    Role::Inside => "nx_xdp_inside",
                    Role::Outside => "nx_xdp_outside",
                })?;
                let path = link_path(dir, &i.name);
                if path.exists() {
                    let link =
                        Link::open(&path).map_err(bpf(format!("opening pinned link of {}", i.name)))?;
                    if link_prog_id(&link) == Some(prog_id(prog)) {
                        info!(iface = %i.name, "the running link keeps its program");
                        continue;
                    }
                    // SAFETY: valid link and program fds; no options.
                    let rc = unsafe {
                        libbpf_rs::libbpf_sys::bpf_link_update(
                            link.as_fd().as_raw_fd(),
                            prog.as_raw_fd(),
                            std::ptr::null(),
                        )
                    };
                    if rc != 0 {
                        return Err(DataplaneError::Io {
                            what: format!("replacing the program on {}", i.name),
                            source: std::io::Error::from_raw_os_error(-rc),
                        });
                    }
                    info!(iface = %i.name, "program replaced on the running link");
                } else {
                    create_xdp_link(prog.as_raw_fd(), i, mode, &path)?;
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
        self.pin_instance(dir)?;
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
    /// Pins this instance beside the links, replacing the previous one's pins: its programs
    /// (`prog_<name>`), its own maps (`inst_<name>`), its program array (`nx_progs`, the
    /// slow path's programs the fast path tail-calls: the kernel empties a program array
    /// when no file or descriptor holds it any more, and the fast path attached to the
    /// links must reach its slow path while no daemon runs), and last the build's identity
    /// ([`BUILD_PIN`]), which a restart compares to reuse them all. Called once the links
    /// run this instance's programs, so the previous instance is no longer used when its
    /// pins go; should this be cut short, the identity is missing and the next start loads
    /// afresh. A reused instance is pinned already.
    fn pin_instance(&mut self, dir: &Path) -> Result<()> {
        if self.inst.reused {
            return Ok(());
        }
        let rm = |path: &Path| match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(DataplaneError::Io { what: format!("removing {}", path.display()), source }),
        };
        rm(&dir.join(BUILD_PIN))?;
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.filter_map(|e| e.ok()) {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with(PROG_PIN_PREFIX) || n.starts_with(INST_PIN_PREFIX) {
                    rm(&e.path())?;
                }
            }
        }
        rm(&dir.join(PROGS_PIN))?;
        for (name, fd) in &self.inst.progs {
            let path = prog_pin(dir, name);
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL");
            // SAFETY: a valid program fd and path.
            if unsafe { libbpf_rs::libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) } != 0 {
                return Err(DataplaneError::Io {
                    what: format!("pinning program {name} at {}", path.display()),
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        for (name, h) in self.inst.maps.iter_mut() {
            if MAP_NAMES.contains(&name.as_str()) {
                continue;
            }
            let path = map_pin(dir, name);
            h.pin(&path).map_err(bpf(format!("pinning map {name} at {}", path.display())))?;
        }
        std::os::unix::fs::symlink(&self.identity, dir.join(BUILD_PIN)).map_err(|source| DataplaneError::Io {
            what: format!("writing the build's identity at {}", dir.join(BUILD_PIN).display()),
            source,
        })
    }
}

/// Pinned maps that hold nothing a running data plane needs kept across a takeover (the
/// capture's): a takeover of a data plane pinned without them (an older version) makes
/// and pins them instead of refusing.
pub const FRESH_ON_TAKEOVER: [&str; 3] = ["nx_cap_ctl", "nx_cap_buf", "nx_cap_rb"];

/// The pin of the program array the fast path tail-calls (`nx_progs`), beside the links.
pub const PROGS_PIN: &str = "nx_progs";

/// The refusal of tables another version wrote.
fn layout_error(pin: String, layout: u32) -> DataplaneError {
    DataplaneError::Incompatible {
        pin,
        what: format!(
            "table layout {layout} (this natrix reads layout {TABLE_LAYOUT}: the running tables were written by another version)"
        ),
    }
}

/// The id of the program a link runs.
fn link_prog_id(link: &Link) -> Option<u32> {
    let mut info = libbpf_rs::libbpf_sys::bpf_link_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: a valid fd and an info struct of the size we pass.
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_link_get_info_by_fd(link.as_fd().as_raw_fd(), &mut info, &mut len)
    };
    (rc == 0).then_some(info.prog_id)
}

/// Runs a syscall program once (BPF_PROG_RUN) on `ctx`, which it may write back; returns
/// its return value.
pub fn run_syscall_prog(
    fd: std::os::fd::BorrowedFd<'_>,
    ctx: &mut [u8],
) -> std::result::Result<u32, libbpf_rs::Error> {
    let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
        ctx_in: ctx.as_ptr().cast(),
        ctx_size_in: ctx.len() as _,
        ..Default::default()
    };
    // SAFETY: a valid program fd; ctx outlives the call (a syscall program's context is
    // copied in and, changed, back out to ctx_in).
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(fd.as_raw_fd(), &mut opts) };
    if rc != 0 {
        return Err(libbpf_rs::Error::from(std::io::Error::from_raw_os_error(-rc)));
    }
    Ok(opts.retval)
}

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
