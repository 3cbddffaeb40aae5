//! Threads-as-ranks harness: every rank is a thread with its own `TcpTransport`, rendezvous
//! through one `MemStore`.
#![allow(dead_code)]

use std::sync::Arc;

use ferry_core::store::MemStore;
use ferry_core::Config;
use ferry_tcp::TcpTransport;

pub const SECRET: &str = "test-secret";

/// Configuration for tests: short timeouts so failures surface quickly, generous enough for a
/// loaded 2-core machine.
pub fn config() -> Config {
    let mut c = Config::default();
    c.general.operation_timeout_ms = 20_000;
    c.tcp.connect_timeout_ms = 5_000;
    c
}

/// Runs `f` on `n` ranks and returns the results in rank order.
pub fn run<R, F>(n: usize, cfg: Config, f: F) -> Vec<R>
where
    R: Send,
    F: Fn(TcpTransport) -> R + Sync,
{
    init_log();
    let store = Arc::new(MemStore::new());
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let store = store.clone();
                let cfg = cfg.clone();
                let f = &f;
                s.spawn(move || {
                    let t = TcpTransport::from_store(rank, n, &*store, &cfg, SECRET)
                        .expect("transport");
                    f(t)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Logs to stderr when `FERRY_LOG` is set (e.g. `FERRY_LOG=ferry_tcp=debug`).
pub fn init_log() {
    if let Ok(f) = std::env::var("FERRY_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(f))
            .with_writer(std::io::stderr)
            .try_init();
    }
}
