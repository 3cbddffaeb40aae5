//! Software cost of the lean send/receive path: rank 0 sends 8 bytes and rank 1 receives them,
//! both transports driven by one thread over an in-process segment, so no cache line moves
//! between cores. What remains is ferry's own work per message (flow serials, ring slot,
//! doorbell check, statistics). Profile it with `perf record`.

use ferry_core::{Config, MsgKey, Transport};
use ferry_shm::ShmTransport;
use std::time::Instant;
fn main() {
    let c = Config::default();
    let mut v = ShmTransport::create_in_process(2, &c).unwrap();
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let data = [7u8; 8];
    let mut buf = Vec::new();
    let n = 2_000_000;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..n {
            a.send(1, MsgKey::user(0), &data).unwrap();
            b.recv(0, MsgKey::user(0), &mut buf).unwrap();
        }
        println!(
            "{:.1} ns per send+recv (same thread, no cross-core traffic)",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
}
