// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix capture` (issue 32): packet capture from the XDP fast path into pcapng. The
//! filter: tcpdump expressions compiled by libpcap ([`filter::compile`]), translated to
//! eBPF ([`filter::translate`]) so that the kernel evaluates them; the stages around it
//! that the data plane's capture chain (bpf/nx_cap.h) tail-calls ([`stage`]); one capture
//! from start to end ([`session`]); the records as pcapng ([`pcapng`]). Design:
//! docs/design/capture.md.

pub mod filter;
mod libpcap;
pub mod load;
pub mod pcapng;
pub mod session;
pub mod stage;

pub use filter::{compile, translate, CbpfInsn, CbpfProgram, EbpfInsn, FilterError};
pub use load::{attach_freplace, func_btf_id, load_freplace, load_xdp, LoadError, FILTER_FUNC};
pub use session::{run, CaptureError, Options, Summary};
