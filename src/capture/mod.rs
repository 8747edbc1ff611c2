// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix capture` (issue 32): packet capture from the XDP fast path. So far its filter:
//! tcpdump expressions compiled by libpcap ([`filter::compile`]), translated to eBPF
//! ([`filter::translate`]) so that the kernel evaluates them, and loaded ([`load`]) on
//! their own or in place of the data plane's `nx_cap_filter` function. Design:
//! docs/design/capture.md.

pub mod filter;
mod libpcap;
pub mod load;

pub use filter::{compile, translate, CbpfInsn, CbpfProgram, EbpfInsn, FilterError};
pub use load::{attach_freplace, func_btf_id, load_freplace, load_xdp, LoadError, FILTER_FUNC};
