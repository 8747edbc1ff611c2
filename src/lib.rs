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

/// Skeletons of the benchmark programs (bpf/bench/), one module per object.
pub mod bench_skel {
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code,
        unused
    )]
    pub mod generator {
        include!(concat!(env!("OUT_DIR"), "/bench_gen.skel.rs"));
    }
    pub mod harness {
        include!(concat!(env!("OUT_DIR"), "/bench_harness.skel.rs"));
    }
    pub mod fwd {
        include!(concat!(env!("OUT_DIR"), "/bench_fwd.skel.rs"));
    }
    pub mod sink {
        include!(concat!(env!("OUT_DIR"), "/bench_sink.skel.rs"));
    }
}

pub mod abi;
pub mod bench;
pub mod check;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod dataplane;
pub mod expiry;
pub mod fibwatch;
pub mod frag;
pub mod show;
pub mod tables;
