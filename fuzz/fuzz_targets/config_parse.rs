//! Feeds arbitrary text to the configuration parser: as a TOML file (`Config::from_toml`) and as
//! `FERRY_<SECTION>_<KEY>=value` environment overrides (`Config::load`). Every input must give a
//! configuration or an error, never a panic; an accepted configuration must be one whose
//! derived settings (wait policy, timeouts) can be computed.
#![no_main]

use ferry_core::Config;
use libfuzzer_sys::fuzz_target;

fn check(cfg: &Config) {
    let _ = cfg.wait_policy(1);
    let _ = cfg.wait_policy(usize::MAX);
    let _ = format!("{cfg:?}");
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(cfg) = Config::from_toml(&text, "fuzz") {
        check(&cfg);
    }
    // Each line `NAME=VALUE` is one variable; names get the FERRY_ prefix when they lack it,
    // so that most inputs reach the override parser.
    let vars: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let k = if k.starts_with("FERRY_") {
                k.to_string()
            } else {
                format!("FERRY_{k}")
            };
            (k, v.to_string())
        })
        .collect();
    if let Ok(cfg) = Config::load(None, &vars) {
        check(&cfg);
    }
});
