//! Feeds arbitrary text to the configuration parser: as a TOML file (`Config::from_toml`) and as
//! environment variables, one `NAME=VALUE` per line: `FERRY_<SECTION>_<KEY>` overrides
//! (`Config::load`) and the launch variables of `ferry run`, `mpirun` and `srun`
//! (`LaunchInfo::from_vars`). Every input must give a value or an error, never a panic; an
//! accepted configuration must be one whose derived settings can be computed, and a job id from
//! the environment must map to exactly one directory below the store's base.
#![no_main]

use std::path::Path;

use ferry_core::file_store::FileStore;
use ferry_core::{Config, LaunchInfo};
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
    let raw: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // Names get the FERRY_ prefix when they lack it, so that most inputs reach the override
    // parser.
    let prefixed: Vec<(String, String)> = raw
        .iter()
        .map(|(k, v)| {
            let k = if k.starts_with("FERRY_") {
                k.clone()
            } else {
                format!("FERRY_{k}")
            };
            (k, v.clone())
        })
        .collect();
    if let Ok(cfg) = Config::load(None, &prefixed) {
        check(&cfg);
    }
    for vars in [&raw, &prefixed] {
        let Ok(info) = LaunchInfo::from_vars(vars) else {
            continue;
        };
        if let (Some(r), Some(s)) = (info.rank, info.size) {
            assert!(r < s, "rank {r} of {s} accepted");
        }
        if let Some(job) = &info.job_id {
            let base = Path::new("/base");
            let dir = FileStore::job_dir(base, job);
            let store = dir.parent().expect("job dir has a parent");
            assert!(store.ends_with("store"), "{job:?} -> {}", dir.display());
            assert_eq!(store.parent().and_then(Path::parent), Some(base));
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            assert!(!name.starts_with('.'), "{job:?} -> {}", dir.display());
        }
    }
});
