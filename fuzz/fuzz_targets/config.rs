//! Arbitrary text as the configuration file (`xfwd_config`, what `xfwd check-config` and
//! `xfwd run` read): parsing and validation never panic, and a configuration that validates
//! keeps the limits the forwarder relies on (interfaces, queues, CPUs, ring sizes, endpoint
//! ports) and validates the same way again.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use xfwd_config::{ConfigFile, MAX_PORTS, QUEUES_PER_PORT};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = ConfigFile::parse(text, Path::new("fuzz.toml")) else {
        return;
    };
    let Ok(config) = file.validate(Some("fuzz")) else {
        return;
    };
    assert!(!config.interfaces.is_empty());
    assert!(config.interfaces.len() <= MAX_PORTS as usize);
    assert!((1..=QUEUES_PER_PORT).contains(&config.queues));
    if let Some(cpus) = &config.cpus {
        assert_eq!(cpus.len(), config.queues as usize);
    }
    for (i, name) in config.interfaces.iter().enumerate() {
        assert!(!name.is_empty() && name.len() < 16, "{name:?}");
        assert!(!config.interfaces[..i].contains(name), "{name} twice");
    }
    assert!(config.rings.rx.is_power_of_two() && config.rings.tx.is_power_of_two());
    assert!(matches!(config.rings.frame_size, 2048 | 4096));
    for e in &config.endpoints {
        assert_ne!(e.bind.port(), 0);
    }
    assert_eq!(file.validate(Some("fuzz")).ok().as_ref(), Some(&config));
    assert!(config.needs_restart(&config).is_empty());
});
