// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! natrix: a carrier-grade NAT44 gateway whose data plane runs in XDP.

pub mod skel {
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/natrix.skel.rs"));
}

pub mod abi;
pub mod capture;
pub mod check;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod dataplane;
pub mod expiry;
pub mod fibwatch;
pub mod frag;
pub mod headroom;
pub mod lookup;
pub mod metrics;
pub mod natlog;
pub mod show;
pub mod tables;
