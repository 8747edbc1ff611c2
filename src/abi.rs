// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The constants, flags and enums the data plane and user space share, named for the Rust
//! side. Every value comes from `bpf/nx_types.h` through the skeleton's BTF (the enums that
//! `bpf/natrix.bpf.c` anchors): none is typed here. A 64-bit constant is built from its
//! 32-bit parts as the macro next to its enum in nx_types.h builds it (BTF enum values are
//! 32 bits wide).

use crate::skel::types::{
    nx_abi_probe, nx_cap_ctl, nx_cap_rec, nx_clock, nx_config, nx_frag, nx_frag_key, nx_iface, nx_log_ev,
    nx_lpm_key, nx_map, nx_map_key, nx_pool_run, nx_sess, nx_sess_key, nx_static_map, nx_sub, nx_subnet,
    nx_udiv, xdp_md,
};
use crate::skel::types::{
    nx_block_bits, nx_cfg_arrays, nx_config_flags, nx_div_id, nx_fibc_word, nx_filtering, nx_hash_keys,
    nx_iface_macs, nx_iface_role, nx_ip_proto, nx_log_kind, nx_log_quota, nx_map_flags, nx_nsess,
    nx_port_bits, nx_port_state, nx_proto_idx, nx_reap_op, nx_reap_sizes, nx_sess_flags, nx_sizes,
    nx_slot_bits, nx_slot_state, nx_stat, nx_sub_bits, nx_sub_state, nx_tab_id, nx_tcp_state, nx_tick,
};

// ---- the shared structs as plain old data -------------------------------------------------

/// Declares generated structs plain old data (`bytemuck::Zeroable` and `bytemuck::Pod`: read
/// from and written to map bytes with `bytemuck::pod_read_unaligned` and
/// `bytemuck::bytes_of`), and proves at compile time what those traits ask for, from the
/// list of each struct's fields with their types:
/// - the list is the struct's fields, each once (a struct pattern without `..`), with the
///   types the skeleton gave them (each field is passed as its listed type);
/// - every field type is Pod itself (any bit pattern is a value, no pointer);
/// - the fields' sizes add up to the struct's size: no padding byte.
///
/// A struct that changes in `bpf/nx_types.h` fails to compile here until its list follows.
/// The generated structs cannot take bytemuck's derive (libbpf-cargo writes them), hence
/// the impls; they are `#[repr(C)]`, as everything libbpf-cargo generates from BTF.
macro_rules! plain_old_data {
    ($($t:ident { $($f:ident: $ty:ty),+ $(,)? })+) => {$(
        const _: () = {
            #[allow(dead_code)]
            fn fields_are_pod(v: $t) {
                fn pod<T: bytemuck::Pod>(_: T) {}
                let $t { $($f),+ } = v;
                $(pod::<$ty>($f);)+
            }
            assert!(
                std::mem::size_of::<$t>() == 0 $(+ std::mem::size_of::<$ty>())+,
                concat!("struct ", stringify!($t), " has padding: it is not plain old data")
            );
        };
        // SAFETY: the struct is #[repr(C)] (generated from BTF), Copy and 'static; its fields
        // are all Pod, so all zeroes is a value of each, hence of the struct.
        unsafe impl bytemuck::Zeroable for $t {}
        // SAFETY: as for Zeroable; and the fields fill the struct without padding (checked
        // above), so every bit pattern of it is a value and every byte is initialized.
        unsafe impl bytemuck::Pod for $t {}
    )+};
}

// Not here: nx_reap_args, whose entries are a union of arrays of different sizes (bytes
// beyond the member written are not known to be initialized): expiry::CtlBatch writes and
// reads it field by field.
plain_old_data! {
    nx_pool_run { first: u32, count: u16, base: u16 }
    nx_subnet { net: u32, mask: u32 }
    nx_udiv { m: u32, s1: u8, s2: u8, pad: u16 }
    nx_config {
        to_udp: u32, to_tcp_est: u32, to_tcp_trans: u32, to_icmp: u32, flags: u32, filtering: u32,
        port_lo: u16, port_hi: u16, block_size: u16, blocks_per_addr: u16, max_blocks: u16, n_addrs: u16,
        addr_hint: u32, hold_down_s: u32, max_new_per_sec: u32, icmp_per_sec: u32, frag_timeout: u32,
        pool_nruns: u32, pool_runs: [nx_pool_run; POOL_RUNS], tab_nbkt: [u32; 2], tab_max: [u32; 2],
        tab_seed: u32, clk_mult: u64, clk_off: u32, clk_hz: u32, sub_nslots: u32, sub_max: u32,
        fibc_mask: u32, fibc_max_age: u32, det_base: u32, det_count: u32, det_per_addr: u32,
        det_ports: u16, det_probe: u16, layout: u32, home_probe: u32, sess_per_sub: u32,
        unreach_code: u32, n_subnets: u32, subnets: [nx_subnet; SUBNETS], pad2: u32,
        div: [nx_udiv; NDIV],
    }
    nx_sess_key { in_ip: u32, rem_ip: u32, in_port: u16, rem_port: u16, proto: u8, pad: [u8; 3] }
    nx_sess {
        in_port: u16, rem_port: u16, proto: u8, state: u8, flags: u8, ctl: u8, in_ip: u32, rem_ip: u32,
        out_ip: u32, expire: u32, out_port: u16, pad: u16, ovf: u32,
    }
    nx_map_key { in_ip: u32, in_port: u16, proto: u8, pad: u8 }
    nx_map {
        key: nx_map_key, out_ip: u32, out_port: u16, flags: u16, nsess: u32, expire: u32, pad: u32, ovf: u32,
    }
    nx_static_map { key: nx_map_key, out_ip: u32, out_port: u16, pad: u16 }
    nx_sub {
        key: u64, addr_idx: u32, flags: u32, rate_ts: u64, rate_tokens: u32, low_used: u32, cur_block: u32,
        next_port: [u32; NPROTO as usize], nsess: u32, pad: [u32; 3],
        blocks: [u32; nx_sizes::NX_MAX_BLOCKS_PER_SUB.0 as usize],
    }
    nx_iface { role: u32, addr: u32, nmacs: u32, pad: u32, macs: [u64; IF_MACS] }
    nx_lpm_key { prefixlen: u32, addr: u32 }
    nx_frag_key { src: u32, dst: u32, id: u16, proto: u8, pad: u8 }
    nx_frag { in_ip: u32, expire: u32 }
    nx_log_ev {
        time: u64, kind: u8, proto: u8, detail: u8, pad: u8, in_ip: u32, out_ip: u32, in_port: u16, out_port: u16,
        rem_ip: u32, rem_port: u16, pad2: u16, limit: u32, pad3: u32,
    }
    nx_clock { jiffies: u64, mono_ns: u64 }
    nx_cap_rec {
        tai_ns: u64, id: u64, rx_ifindex: u32, tx_ifindex: u32, verdict: u32, rx_len: u32, tx_len: u32,
        rx_cap: u16, tx_cap: u16, matched: u8, pad: [u8; 7],
    }
    nx_cap_ctl { owner: u32, flags: u32, snap: u32, nif: u32, ifindex: [u32; 16] }
    nx_abi_probe {
        cfg: nx_config, k0: u64, k1: u64, h: u64, nbkt: u32, nslots: u32, sip: u32, pidx: u32, port: u32,
        first: u32, addr_idx: u32, proto: u32, sk: nx_sess_key, mk: nx_map_key, tab_hash: u64,
        sub_hash: u64, sess_k0: u64, sess_k1: u64, map_k0: u64, home_block: i64, tab_home: [u32; 2],
        sub_home: u32, det_start: u32, home_start: u32, proto_idx: u32, port_index: u32, word_is_map: u32,
    }
    xdp_md {
        data: u32, data_end: u32, data_meta: u32, ingress_ifindex: u32, rx_queue_index: u32,
        egress_ifindex: u32,
    }
}

// ---- sizes -------------------------------------------------------------------------------

/// Protocols with per-protocol tables (NX_NPROTO).
pub const NPROTO: u32 = nx_sizes::NX_NPROTO.0;
/// Ports of a pool address in the outside port array (NX_PORTS_PER_ADDR).
pub const PORTS_PER_ADDR: u32 = nx_sizes::NX_PORTS_PER_ADDR.0;
/// An nx_ports index is (pool index * NPROTO + protocol index) << PORT_INDEX_SHIFT | port.
pub const PORT_INDEX_SHIFT: u32 = PORTS_PER_ADDR.trailing_zeros();
/// Length of one tick of the data plane's clock, in nanoseconds: 2^TICK_SHIFT.
pub const TICK_SHIFT: u32 = nx_tick::NX_TICK_SHIFT.0;
/// Subscriber prefixes nx_config holds (NX_SUBNETS); more go to the trie.
pub const SUBNETS: usize = nx_cfg_arrays::NX_SUBNETS.0 as usize;
/// Divisors nx_config holds as multiplications (enum nx_div_id, NX_NDIV).
pub const NDIV: usize = nx_div_id::NX_NDIV.0 as usize;
/// nx_config.div's entries: the divisors of the home block, its pool address, a home
/// walk's start and a deterministic walk's start.
pub const DIV_HOME_SPAN: usize = nx_div_id::NX_DIV_HOME_SPAN.0 as usize;
pub const DIV_ADDRS: usize = nx_div_id::NX_DIV_ADDRS.0 as usize;
pub const DIV_BLOCK_PAIRS: usize = nx_div_id::NX_DIV_BLOCK_PAIRS.0 as usize;
pub const DIV_DET_PAIRS: usize = nx_div_id::NX_DIV_DET_PAIRS.0 as usize;
/// Runs of pool addresses nx_config holds (NX_POOL_RUNS).
pub const POOL_RUNS: usize = nx_cfg_arrays::NX_POOL_RUNS.0 as usize;
/// MACs an interface entry holds (NX_IF_MACS).
pub const IF_MACS: usize = nx_iface_macs::NX_IF_MACS.0 as usize;
/// Interfaces with a smaller ifindex are also in the array nx_ifrole (NX_IFROLE_DIRECT).
pub const IFROLE_DIRECT: u32 = nx_iface_macs::NX_IFROLE_DIRECT.0;
/// Entries of one reaper batch (NX_REAP_BATCH).
pub const REAP_BATCH: usize = nx_reap_sizes::NX_REAP_BATCH.0 as usize;

// ---- protocols -----------------------------------------------------------------------------

pub const PROTO_TCP: u8 = nx_ip_proto::NX_IPPROTO_TCP.0 as u8;
pub const PROTO_UDP: u8 = nx_ip_proto::NX_IPPROTO_UDP.0 as u8;
pub const PROTO_ICMP: u8 = nx_ip_proto::NX_IPPROTO_ICMP.0 as u8;
/// Index of a protocol in per-protocol tables (enum nx_proto_idx).
pub const P_TCP: u32 = nx_proto_idx::NX_P_TCP.0;
pub const P_UDP: u32 = nx_proto_idx::NX_P_UDP.0;
pub const P_ICMP: u32 = nx_proto_idx::NX_P_ICMP.0;
/// The protocol number of each protocol index, in index order.
pub const PROTO_OF_IDX: [u8; NPROTO as usize] = {
    let mut a = [0u8; NPROTO as usize];
    a[P_TCP as usize] = PROTO_TCP;
    a[P_UDP as usize] = PROTO_UDP;
    a[P_ICMP as usize] = PROTO_ICMP;
    a
};

// ---- nx_config -----------------------------------------------------------------------------

/// nx_config.flags (enum nx_config_flags).
pub const CF_PORT_PARITY: u32 = nx_config_flags::NX_CF_PORT_PARITY.0;
pub const CF_HAIRPIN: u32 = nx_config_flags::NX_CF_HAIRPIN.0;
pub const CF_PORT_CLASS: u32 = nx_config_flags::NX_CF_PORT_CLASS.0;
pub const CF_EXCLUSIONS: u32 = nx_config_flags::NX_CF_EXCLUSIONS.0;
pub const CF_STATICS: u32 = nx_config_flags::NX_CF_STATICS.0;
pub const CF_SUBNET_TRIE: u32 = nx_config_flags::NX_CF_SUBNET_TRIE.0;
pub const CF_LOG: u32 = nx_config_flags::NX_CF_LOG.0;
pub const CF_LOG_SESSIONS: u32 = nx_config_flags::NX_CF_LOG_SESSIONS.0;
pub const CF_LOG_DEST: u32 = nx_config_flags::NX_CF_LOG_DEST.0;
pub const CF_LOG_STRICT: u32 = nx_config_flags::NX_CF_LOG_STRICT.0;

// ---- the NAT event log (bpf/nx_log.h) -------------------------------------------------------

/// enum nx_log_kind: the natEvent values (RFC 8158) of the data plane's events.
pub const LOG_ADDRS_EXHAUSTED: u8 = nx_log_kind::NX_LOG_ADDRS_EXHAUSTED.0 as u8;
pub const LOG_SESS_CREATE: u8 = nx_log_kind::NX_LOG_SESS_CREATE.0 as u8;
pub const LOG_SESS_DELETE: u8 = nx_log_kind::NX_LOG_SESS_DELETE.0 as u8;
pub const LOG_PORTS_EXHAUSTED: u8 = nx_log_kind::NX_LOG_PORTS_EXHAUSTED.0 as u8;
pub const LOG_QUOTA: u8 = nx_log_kind::NX_LOG_QUOTA.0 as u8;
pub const LOG_BLOCK_ALLOC: u8 = nx_log_kind::NX_LOG_BLOCK_ALLOC.0 as u8;
pub const LOG_BLOCK_FREE: u8 = nx_log_kind::NX_LOG_BLOCK_FREE.0 as u8;
/// enum nx_log_quota: natQuotaExceededEvent values of NX_LOG_QUOTA events.
pub const LOGQ_SESSIONS: u8 = nx_log_quota::NX_LOGQ_SESSIONS.0 as u8;
pub const LOGQ_BIB: u8 = nx_log_quota::NX_LOGQ_BIB.0 as u8;
pub const LOGQ_PER_USER: u8 = nx_log_quota::NX_LOGQ_PER_USER.0 as u8;
pub const LOGQ_SUBSCRIBERS: u8 = nx_log_quota::NX_LOGQ_SUBSCRIBERS.0 as u8;
pub const LOGQ_FRAGMENTS: u8 = nx_log_quota::NX_LOGQ_FRAGMENTS.0 as u8;
/// nx_config.filtering (enum nx_filtering).
pub const FILTER_EIF: u32 = nx_filtering::NX_FILTER_EIF.0;
pub const FILTER_ADF: u32 = nx_filtering::NX_FILTER_ADF.0;
pub const FILTER_APDF: u32 = nx_filtering::NX_FILTER_APDF.0;

/// nx_iface.role (enum nx_iface_role).
pub const ROLE_INSIDE: u32 = nx_iface_role::NX_ROLE_INSIDE.0;
pub const ROLE_OUTSIDE: u32 = nx_iface_role::NX_ROLE_OUTSIDE.0;

/// nx_reap_args.op (enum nx_reap_op).
pub const REAP_SESSIONS: u32 = nx_reap_op::NX_REAP_SESSIONS.0;
pub const REAP_MAPPINGS: u32 = nx_reap_op::NX_REAP_MAPPINGS.0;
pub const CTL_STATIC_ADD: u32 = nx_reap_op::NX_CTL_STATIC_ADD.0;
pub const CTL_STATIC_DEL: u32 = nx_reap_op::NX_CTL_STATIC_DEL.0;
pub const REAP_SUBS: u32 = nx_reap_op::NX_REAP_SUBS.0;

// ---- the FIB cache's generation word --------------------------------------------------------

pub const FIBC_BY_DST: u64 = nx_fibc_word::NX_FIBC_BY_DST.0 as u64;
pub const FIBC_GEN_STEP: u64 = nx_fibc_word::NX_FIBC_GEN_STEP.0 as u64;

// ---- port words (nx_ports) -------------------------------------------------------------------

pub const PORT_STATE_SHIFT: u32 = nx_port_bits::NX_PORT_STATE_SHIFT.0;
pub const PORT_FREE: u64 = nx_port_state::NX_PORT_FREE.0 as u64;
pub const PORT_USED: u64 = nx_port_state::NX_PORT_USED.0 as u64;
pub const PORT_HELD: u64 = nx_port_state::NX_PORT_HELD.0 as u64;
pub const PORT_STATIC: u64 = nx_port_state::NX_PORT_STATIC.0 as u64;
/// Bits 61..48 of a word that is a mapping: its sessions.
pub const PORT_NSESS_SHIFT: u32 = nx_port_bits::NX_PORT_NSESS_SHIFT.0;
pub const PORT_NSESS_MAX: u64 = nx_port_bits::NX_PORT_NSESS_MAX.0 as u64;
/// USED: the inside address above the inside port.
pub const PORT_IP_SHIFT: u32 = nx_port_bits::NX_PORT_IP_SHIFT.0;

// The port word's encodings (port_tag, port_state, port_word, ...) are in tables::ports,
// with every change of state the daemon makes to one; re-exported here for the callers
// that name them beside the constants.
pub use crate::tables::ports::{port_state, port_tag, port_word};

// ---- block words (nx_blocks) -------------------------------------------------------------------

pub const BLOCK_MIXED: u64 = 1 << nx_block_bits::NX_BLOCK_MIXED_BIT.0;
pub const BLOCK_USED_SHIFT: u32 = nx_block_bits::NX_BLOCK_USED_SHIFT.0;
pub const BLOCK_USED_MASK: u64 = nx_block_bits::NX_BLOCK_USED_MASK.0 as u64;
/// One port counted in a block word (NX_BLOCK_USED_ONE).
pub const BLOCK_USED_ONE: u64 = 1 << BLOCK_USED_SHIFT;
pub const BLOCK_NSESS_SHIFT: u32 = nx_block_bits::NX_BLOCK_NSESS_SHIFT.0;
pub const BLOCK_NSESS_MASK: u64 = nx_block_bits::NX_BLOCK_NSESS_MASK.0 as u64;

// ---- subscribers (nx_subs) -------------------------------------------------------------------

pub const SUB_STATE_SHIFT: u32 = nx_sub_bits::NX_SUB_STATE_SHIFT.0;
pub const SUB_STATE_MASK: u64 = nx_sub_bits::NX_SUB_STATE_MASK.0 as u64;
pub const SUB_BUSY: u64 = nx_sub_state::NX_SUB_BUSY.0 as u64;
pub const SUB_LIVE: u64 = nx_sub_state::NX_SUB_LIVE.0 as u64;
pub const SUB_TOMB: u64 = nx_sub_state::NX_SUB_TOMB.0 as u64;
/// Slots an entry may live beyond its home slot (NX_SUB_PROBE).
pub const SUB_PROBE: u32 = nx_sub_bits::NX_SUB_PROBE.0;

/// A subscriber key word (NX_SUB_KEY): state, inside address as the data plane stores it.
pub const fn sub_key(state: u64, ip: u32) -> u64 {
    state << SUB_STATE_SHIFT | ip as u64
}

/// A subscriber key word's state.
pub const fn sub_state(key: u64) -> u64 {
    (key >> SUB_STATE_SHIFT) & SUB_STATE_MASK
}

/// NX_HASH_KEY: a 64-bit hash key from its halves.
const fn hash_key(hi: nx_hash_keys, lo: nx_hash_keys) -> u64 {
    (hi.0 as u64) << 32 | lo.0 as u64
}

/// The second hash word of subscriber keys (NX_SUB_HASH_K1).
pub const SUB_HASH_K1: u64 = hash_key(nx_hash_keys::NX_SUB_HASH_K1_HI, nx_hash_keys::NX_SUB_HASH_K1_LO);
/// The key of a deterministic walk's hash (NX_DET_KEY).
pub const DET_KEY: u64 = hash_key(nx_hash_keys::NX_DET_KEY_HI, nx_hash_keys::NX_DET_KEY_LO);
/// The key of a home walk's hash (NX_HOME_KEY).
pub const HOME_KEY: u64 = hash_key(nx_hash_keys::NX_HOME_KEY_HI, nx_hash_keys::NX_HOME_KEY_LO);

// ---- open-addressed tables (nx_sess, nx_maps) -----------------------------------------------

/// Table ids (enum nx_tab_id): index of nx_config.tab_nbkt/tab_max and of nx_tab_cnt.
pub const TAB_SESS: usize = nx_tab_id::NX_TAB_SESS.0 as usize;
pub const TAB_MAPS: usize = nx_tab_id::NX_TAB_MAPS.0 as usize;
pub const TAB_SUBS: usize = nx_tab_id::NX_TAB_SUBS.0 as usize;
pub const TAB_PROBE: u32 = nx_slot_bits::NX_TAB_PROBE.0;
pub const SLOT_CTL_SHIFT: u32 = nx_slot_bits::NX_SLOT_CTL_SHIFT.0;
pub const SLOT_LIVE: u64 = nx_slot_state::NX_SLOT_LIVE.0 as u64;
pub const SLOT_STATE_MASK: u64 = (nx_slot_bits::NX_SLOT_STATE_BITS.0 as u64) << SLOT_CTL_SHIFT;
pub const SLOT_GEN_MASK: u64 = (nx_slot_bits::NX_SLOT_GEN_BITS.0 as u64) << nx_slot_bits::NX_SLOT_GEN_SHIFT.0;
pub const SLOT_ALT: u64 = 1 << nx_slot_bits::NX_SLOT_ALT_BIT.0;
pub const SESS_W0_KEY: u64 = (1 << nx_slot_bits::NX_SESS_W0_KEY_BITS.0) - 1;
pub const MAPS_W0_KEY: u64 = (1 << nx_slot_bits::NX_MAPS_W0_KEY_BITS.0) - 1;
/// Byte offset of a bucket's counts in its slots (overflow in the first, alt in the second).
pub const SLOT_OVF_OFF: usize = nx_slot_bits::NX_SLOT_OVF_OFF.0 as usize;

// ---- mappings and sessions ---------------------------------------------------------------------

/// nx_map.flags (enum nx_map_flags).
pub const MF_STATIC: u16 = nx_map_flags::NX_MF_STATIC.0 as u16;
pub const MF_DET: u16 = nx_map_flags::NX_MF_DET.0 as u16;
/// nx_map.nsess of a mapping being deleted.
pub const NSESS_DYING: u32 = nx_nsess::NX_NSESS_DYING.0;
/// nx_sess.flags (enum nx_sess_flags).
pub const SF_INBOUND: u8 = nx_sess_flags::NX_SF_INBOUND.0 as u8;
pub const SF_PERMIT: u8 = nx_sess_flags::NX_SF_PERMIT.0 as u8;
pub const SF_HOMECNT: u8 = nx_sess_flags::NX_SF_HOMECNT.0 as u8;

/// nx_sess.state (enum nx_tcp_state).
pub const TCP_NONE: u8 = nx_tcp_state::NX_TCP_NONE.0 as u8;
pub const TCP_SYN_OUT: u8 = nx_tcp_state::NX_TCP_SYN_OUT.0 as u8;
pub const TCP_SYN_IN: u8 = nx_tcp_state::NX_TCP_SYN_IN.0 as u8;
pub const TCP_EST: u8 = nx_tcp_state::NX_TCP_EST.0 as u8;
pub const TCP_FIN_OUT: u8 = nx_tcp_state::NX_TCP_FIN_OUT.0 as u8;
pub const TCP_FIN_IN: u8 = nx_tcp_state::NX_TCP_FIN_IN.0 as u8;
pub const TCP_FIN_BOTH: u8 = nx_tcp_state::NX_TCP_FIN_BOTH.0 as u8;
pub const TCP_RST: u8 = nx_tcp_state::NX_TCP_RST.0 as u8;

/// The name `natrix sessions` prints for each TCP state; a test checks the list covers
/// enum nx_tcp_state exactly.
pub const TCP_STATE_NAMES: &[(nx_tcp_state, &str)] = &[
    (nx_tcp_state::NX_TCP_NONE, "open"),
    (nx_tcp_state::NX_TCP_SYN_OUT, "syn_out"),
    (nx_tcp_state::NX_TCP_SYN_IN, "syn_in"),
    (nx_tcp_state::NX_TCP_EST, "established"),
    (nx_tcp_state::NX_TCP_FIN_OUT, "fin_out"),
    (nx_tcp_state::NX_TCP_FIN_IN, "fin_in"),
    (nx_tcp_state::NX_TCP_FIN_BOTH, "fin_both"),
    (nx_tcp_state::NX_TCP_RST, "rst"),
];

/// The counter enum's bounds, for tables sized by it.
pub const STAT_MAX: u32 = nx_stat::NX_STAT_MAX.0;
pub const DROP_FIRST: u32 = nx_stat::NX_DROP_FIRST.0;

#[cfg(test)]
mod tests {
    use super::*;

    /// The states named are exactly the enum's, one name each.
    #[test]
    fn tcp_state_names_cover_the_enum_once() {
        let mut seen = vec![false; nx_tcp_state::NX_TCP_NSTATES.0 as usize];
        for (s, name) in TCP_STATE_NAMES {
            let i = s.0 as usize;
            assert!(i < seen.len(), "{name}: state {i} is not one of enum nx_tcp_state");
            assert!(!seen[i], "{name}: state {i} listed twice");
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s), "a state of enum nx_tcp_state has no name");
    }

    /// The protocol table is a bijection between the indexes and the protocols.
    #[test]
    fn proto_of_idx_is_one_to_one() {
        let mut p = PROTO_OF_IDX.to_vec();
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), NPROTO as usize);
    }
}
