// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! libFuzzer over the config parser: any UTF-8 input must parse or fail with a syntax or a
//! key error, never panic; a config that parses parses the same again. The stable-toolchain
//! version of this check, with seeds and structured mutations, is tests/config_fuzz.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natrix::config::{Config, ConfigError};

fuzz_target!(|data: &[u8]| {
    // a config file that is not UTF-8 never reaches the parser (Config::load reads a String)
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::from_toml_str(text) {
        Ok(c) => {
            let again = Config::from_toml_str(text).expect("parsed once, then failed");
            assert_eq!(c, again, "parsing again gave another config");
            let _ = c.block_count_per_addr();
        }
        Err(ConfigError::Syntax { message }) => assert!(!message.is_empty()),
        Err(ConfigError::Key { key, message }) => assert!(!key.is_empty() && !message.is_empty()),
        Err(e @ ConfigError::Io { .. }) => panic!("an I/O error from a string: {e}"),
    }
});
