// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! A small deterministic PRNG for the randomised tests (xorshift64*): a run is reproducible
//! from the seed the test prints.

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with `pct` percent probability.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    pub fn u16(&mut self) -> u16 {
        self.next() as u16
    }

    pub fn u8(&mut self) -> u8 {
        self.next() as u8
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }

    /// Mostly small values, sometimes anything: edges as well as the common case.
    pub fn u32_any(&mut self) -> u32 {
        match self.below(4) {
            0 => self.below(16) as u32,
            1 => u32::MAX - self.below(16) as u32,
            _ => self.next() as u32,
        }
    }
}
