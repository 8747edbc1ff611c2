// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The packet path's clock (`NX_TICK_SHIFT` in `bpf/nx_types.h`).
//!
//! The daemon, the reaper and the CLI count time in ticks of CLOCK_MONOTONIC
//! (`tables::now_tick`). The XDP programs read the kernel's jiffies instead, a single load
//! once the verifier inlines `bpf_jiffies64`, where `bpf_ktime_get_coarse_ns` cost 10–15 ns
//! a packet, and convert them with two constants of `nx_config`:
//! `tick = (u32)((jiffies * clk_mult) >> 32) + clk_off`.
//!
//! The kernel derives jiffies from the same monotonic time, TICK_NSEC nanoseconds each, so
//! the relation is fixed until reboot: the daemon measures it once, when it creates the
//! tables. HZ is not exported to user space; it is read off the two clocks (the
//! `nx_clock` program reads both at the same moment) and must be one of the values Linux is
//! built with on the architectures natrix supports, or the daemon refuses to start.

use crate::abi::TICK_SHIFT;

/// CONFIG_HZ choices on x86 and arm64.
pub const HZ_CHOICES: [u32; 4] = [100, 250, 300, 1000];

/// One reading of both clocks at the same moment (`struct nx_clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    pub jiffies: u64,
    pub mono_ns: u64,
}

/// The constants the packet path converts jiffies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpClock {
    pub hz: u32,
    pub mult: u64,
    pub off: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("reading the kernel's clocks (program nx_clock): {0}")]
    Read(String),
    #[error(
        "jiffies advanced {jiffies} in {ns} ns, a rate of no HZ Linux is built with ({HZ_CHOICES:?}); \
         the packet path's clock cannot be derived"
    )]
    UnknownHz { jiffies: u64, ns: u64 },
}

/// Nanoseconds per jiffy, as the kernel rounds it (TICK_NSEC).
pub fn tick_nsec(hz: u32) -> u64 {
    (1_000_000_000 + hz as u64 / 2) / hz as u64
}

/// HZ from the jiffies counted over `ns` nanoseconds: the nearest choice within 12%, or
/// None. Over 100 ms the count is off by at most one jiffy, 10% at HZ = 100.
pub fn hz_from(jiffies: u64, ns: u64) -> Option<u32> {
    if ns == 0 {
        return None;
    }
    let rate = jiffies as f64 * 1e9 / ns as f64;
    HZ_CHOICES
        .iter()
        .copied()
        .min_by(|a, b| (rate - *a as f64).abs().total_cmp(&(rate - *b as f64).abs()))
        .filter(|&hz| (rate - hz as f64).abs() <= hz as f64 * 0.12)
}

impl DpClock {
    /// The constants for a kernel of `hz`, aligned on one reading of both clocks.
    pub fn new(hz: u32, at: Sample) -> Self {
        let mult = tick_nsec(hz) << (32 - TICK_SHIFT);
        let off = ((at.mono_ns >> TICK_SHIFT) as u32).wrapping_sub(dp_tick(at.jiffies, mult, 0));
        DpClock { hz, mult, off }
    }

    /// The tick the packet path computes from `jiffies`.
    pub fn tick(&self, jiffies: u64) -> u32 {
        dp_tick(jiffies, self.mult, self.off)
    }
}

/// nx_now_tick: bits 63..32 of a product that may wrap are still the tick modulo 2^32.
fn dp_tick(jiffies: u64, mult: u64, off: u32) -> u32 {
    ((jiffies.wrapping_mul(mult) >> 32) as u32).wrapping_add(off)
}

/// Measures the clock: two readings at least 100 ms apart give HZ (tried three times, with
/// longer intervals, before giving up); the second one aligns the ticks.
pub fn calibrate<E: std::fmt::Display>(
    mut read: impl FnMut() -> Result<Sample, E>,
) -> Result<DpClock, ClockError> {
    let mut read = || read().map_err(|e| ClockError::Read(e.to_string()));
    let mut last = None;
    for wait_ms in [100u64, 250, 600] {
        let a = read()?;
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        let b = read()?;
        let (dj, dns) = (b.jiffies.wrapping_sub(a.jiffies), b.mono_ns.saturating_sub(a.mono_ns));
        if let Some(hz) = hz_from(dj, dns) {
            return Ok(DpClock::new(hz, b));
        }
        last = Some((dj, dns));
    }
    let (jiffies, ns) = last.unwrap_or_default();
    Err(ClockError::UnknownHz { jiffies, ns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hz_is_recognised_within_one_jiffy_over_100ms() {
        for hz in HZ_CHOICES {
            let n = hz as u64 / 10;
            for dj in [n - 1, n, n + 1] {
                assert_eq!(hz_from(dj, 100_000_000), Some(hz), "{dj} jiffies in 100 ms");
            }
        }
        assert_eq!(hz_from(50, 100_000_000), None, "500 Hz is no choice");
        assert_eq!(hz_from(0, 100_000_000), None);
        assert_eq!(hz_from(10, 0), None);
    }

    /// A kernel whose jiffy j starts at c + j * TICK_NSEC: the packet path's tick must stay
    /// within one tick of CLOCK_MONOTONIC's for years, across the wrap of the product and
    /// of the tick itself.
    #[test]
    fn packet_path_ticks_follow_the_monotonic_clock() {
        for hz in HZ_CHOICES {
            let tn = tick_nsec(hz);
            // jiffies start 5 minutes before 2^32 (INITIAL_JIFFIES); monotonic time runs
            // ahead of them by an arbitrary constant
            let j0 = (1u64 << 32) - 300 * hz as u64;
            let c = 3_123_456_789u64;
            let mono = |j: u64| c + (j - j0) * tn + 1_000;
            let clk = DpClock::new(hz, Sample { jiffies: j0 + 17, mono_ns: mono(j0 + 17) });
            assert_eq!(clk.mult, tn << (32 - TICK_SHIFT));
            let year = 365 * 24 * 3600 * hz as u64;
            let mut j = j0;
            let mut checked = 0;
            while j < j0 + 4 * year {
                let want = (mono(j) >> TICK_SHIFT) as u32;
                let got = clk.tick(j);
                let d = got.wrapping_sub(want) as i32;
                assert!(d.abs() <= 1, "HZ {hz}, jiffies {j}: tick {got}, monotonic {want}");
                j += 7_919 * hz as u64 + 13;
                checked += 1;
            }
            assert!(checked > 10_000);
        }
    }

    #[test]
    fn calibration_reads_hz_and_aligns() {
        // a fake kernel at HZ 250 whose clocks advance with real time
        let start = std::time::Instant::now();
        let read = || -> Result<Sample, String> {
            let ns = start.elapsed().as_nanos() as u64 + 5_000_000_000;
            Ok(Sample { jiffies: 1_000 + ns / 4_000_000, mono_ns: ns })
        };
        let clk = calibrate(read).expect("calibrates");
        assert_eq!(clk.hz, 250);
        let s = read().unwrap();
        let d = clk.tick(s.jiffies).wrapping_sub((s.mono_ns >> TICK_SHIFT) as u32) as i32;
        assert!(d.abs() <= 1, "off by {d} ticks");
        let broken = || -> Result<Sample, String> { Err("no program".into()) };
        assert!(matches!(calibrate(broken), Err(ClockError::Read(_))));
    }
}
