// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! What the generator and the harness send: the Rust side of `struct nxb_cfg`
//! (bench/bpf/nxb_types.h). One `FlowSpec` describes a stream of frames; the BPF side turns
//! each packet's sequence number into a flow number and the flow number into addresses and
//! ports (see nxb_pkt.h), so the same flow number always means the same connection.

use std::net::Ipv4Addr;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::skel::generator::types::{nxb_cfg, nxb_dir, nxb_mode};

/// Where subscribers start: 100.64.16.0 + i (100.64.0.0/24 is the link to the gateway).
pub const SUB_BASE: Ipv4Addr = Ipv4Addr::new(100, 64, 16, 0);
/// The remote end of every outbound flow (the sink namespace's address).
pub const REMOTE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
pub const REMOTE_PORT: u16 = 5001;
/// Inside ports a subscriber's flows use, from SPORT_BASE on, before the remote port moves.
pub const SPORT_BASE: u16 = 1024;
pub const NPORTS: u32 = 64_000;
/// The most subscribers SUB_BASE leaves room for inside 100.64.0.0/16.
pub const MAX_SUBS: u32 = 65_536 - 16 * 256 - 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Udp,
    Tcp,
    Icmp,
}

impl Proto {
    pub fn number(self) -> u8 {
        match self {
            Proto::Udp => natrix::abi::PROTO_UDP,
            Proto::Tcp => natrix::abi::PROTO_TCP,
            Proto::Icmp => natrix::abi::PROTO_ICMP,
        }
    }

    /// Ethernet + IPv4 + this protocol's header.
    pub fn min_frame(self) -> usize {
        14 + 20
            + match self {
                Proto::Udp | Proto::Icmp => 8,
                Proto::Tcp => 20,
            }
    }
}

/// `enum nxb_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every flow in turn (flow_base + seq, modulo flows).
    Cycle,
    /// Every packet a new flow (flow_base + seq): connection setups.
    New,
    /// Uniformly random flows: no locality for caches or prefetchers.
    Random,
}

/// `enum nxb_dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Out,
    In,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TcpFlags {
    Syn,
    Ack,
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowSpec {
    pub proto: Proto,
    pub tcp_flags: TcpFlags,
    /// Frame length from the Ethernet header on (no FCS), as XDP sees it.
    pub frame_len: usize,
    pub subs: u32,
    pub flows: u64,
    pub flow_base: u64,
    pub mode: Mode,
    pub dir: Dir,
    /// The remote end of outbound flows (default REMOTE) and its first port (REMOTE_PORT).
    pub remote: Ipv4Addr,
    pub remote_port: u16,
    /// A subscriber's first inside port (default SPORT_BASE).
    pub sport_base: u16,
    #[serde(skip)]
    pub dmac: [u8; 6],
    #[serde(skip)]
    pub smac: [u8; 6],
}

impl Default for FlowSpec {
    fn default() -> Self {
        FlowSpec {
            proto: Proto::Udp,
            tcp_flags: TcpFlags::Syn,
            frame_len: 64,
            subs: 1,
            flows: 1,
            flow_base: 0,
            mode: Mode::Cycle,
            dir: Dir::Out,
            remote: REMOTE,
            remote_port: REMOTE_PORT,
            sport_base: SPORT_BASE,
            dmac: [0x02, 0, 0, 0, 0, 1],
            smac: [0x02, 0, 0, 0, 0, 2],
        }
    }
}

impl FlowSpec {
    pub fn validate(&self) -> Result<()> {
        if self.frame_len < self.proto.min_frame() || self.frame_len > 3000 {
            bail!(
                "frame length {} outside {}..=3000 for {:?}",
                self.frame_len,
                self.proto.min_frame(),
                self.proto
            );
        }
        if self.subs == 0 || self.subs > MAX_SUBS {
            bail!("subscribers must be 1..={MAX_SUBS}");
        }
        if self.flows == 0 {
            bail!("flows must be at least 1");
        }
        Ok(())
    }

    /// The frame the programs write into (their template): zeros, headers included; the
    /// programs write every header byte and no payload byte.
    pub fn template(&self) -> Vec<u8> {
        vec![0u8; self.frame_len]
    }

    /// The BPF configuration for this spec.
    pub fn cfg(&self) -> nxb_cfg {
        let mode = match self.mode {
            Mode::Cycle => nxb_mode::NXB_MODE_CYCLE,
            Mode::New => nxb_mode::NXB_MODE_NEW,
            Mode::Random => nxb_mode::NXB_MODE_RANDOM,
        }
        .0 as u8;
        nxb_cfg {
            dmac: self.dmac,
            smac: self.smac,
            frame_len: self.frame_len as u16,
            proto: self.proto.number(),
            tcp_flags: match self.tcp_flags {
                TcpFlags::Syn => 0x02,
                TcpFlags::Ack => 0x10,
            },
            src_ip: u32::from(SUB_BASE),
            dst_ip: u32::from(self.remote),
            nsubs: self.subs,
            nports: NPORTS,
            sport_base: self.sport_base,
            dport: self.remote_port,
            mode,
            dir: match self.dir {
                Dir::Out => nxb_dir::NXB_DIR_OUT,
                Dir::In => nxb_dir::NXB_DIR_IN,
            }
            .0 as u8,
            ttl: 64,
            pad: 0,
            nflows: self.flows,
            flow_base: self.flow_base,
        }
    }
}

/// The inside endpoint of outbound flow `k` (what nxb_pkt.h computes with the default
/// ports), for tests and checks.
pub fn flow_endpoint(subs: u32, k: u64) -> (Ipv4Addr, u16, u16) {
    let sub = u32::from(SUB_BASE) + (k % subs as u64) as u32;
    let j = k / subs as u64;
    let sport = SPORT_BASE + (j % NPORTS as u64) as u16;
    let dport = REMOTE_PORT + (j / NPORTS as u64) as u16;
    (Ipv4Addr::from(sub), sport, dport)
}

/// Writes `cfg` into another skeleton's copy of `struct nxb_cfg` (each skeleton has its own
/// generated type for the same C struct).
pub fn copy_cfg<T: Copy>(cfg: &nxb_cfg, dst: &mut T) {
    const { assert!(std::mem::size_of::<nxb_cfg>() == 56) };
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<nxb_cfg>(), "nxb_cfg layouts differ");
    // SAFETY: both are the generated #[repr(C)] image of the same C struct (sizes checked),
    // plain old data.
    unsafe {
        std::ptr::copy_nonoverlapping((cfg as *const nxb_cfg).cast::<u8>(), (dst as *mut T).cast::<u8>(), 56)
    };
}
