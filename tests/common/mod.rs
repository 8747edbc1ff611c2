// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Test support shared by the integration tests.
#![allow(dead_code)]

pub mod ipfix;
pub mod netns;
pub mod packet_helpers;
pub mod pkt;
pub mod rng;
pub mod vectors;
pub mod wire;
