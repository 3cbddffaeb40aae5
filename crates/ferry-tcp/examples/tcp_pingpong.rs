//! Ping-pong latency of the TCP backend against a raw non-blocking socket ping-pong that polls
//! (the floor any TCP backend can reach, perf-anchors "tcp spin"), both between two processes
//! on this host, in the same run so that machine load affects both alike.
//!
//! `cargo run --release -p ferry-tcp --example tcp_pingpong [SIZE ...]` (default 8 65536
//! 1048576). Prints the median and best half round trip in microseconds of 5 batches.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Instant;

use ferry_core::store::MemStore;
use ferry_core::{Config, MsgKey, Transport};
use ferry_tcp::TcpTransport;

fn iters(size: usize) -> usize {
    if size <= 8192 {
        5000
    } else if size <= 1 << 16 {
        1000
    } else {
        100
    }
}

fn read_spin(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("peer closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
}

fn write_spin(s: &mut TcpStream, buf: &[u8]) {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Raw polling ping-pong; returns per-batch half round trips (us).
fn raw(first: bool, mut s: TcpStream, size: usize) -> Vec<f64> {
    if std::env::var_os("PINGPONG_SKIP_RAW").is_some() {
        // Only the backend (e.g. under strace or perf).
        return vec![f64::NAN];
    }
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut buf = vec![1u8; size];
    let n = iters(size);
    let mut out = Vec::new();
    for _ in 0..6 {
        let t0 = Instant::now();
        for _ in 0..n {
            if first {
                write_spin(&mut s, &buf);
                read_spin(&mut s, &mut buf);
            } else {
                read_spin(&mut s, &mut buf);
                write_spin(&mut s, &buf);
            }
        }
        out.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64 / 2.0);
    }
    out.remove(0);
    out
}

fn ferry(t: &mut TcpTransport, size: usize) -> Vec<f64> {
    let me = t.rank();
    let msg = vec![1u8; size];
    let mut got = Vec::with_capacity(size);
    let n = iters(size);
    let mut out = Vec::new();
    for _ in 0..6 {
        let t0 = Instant::now();
        for _ in 0..n {
            if me == 0 {
                t.send(1, MsgKey::user(0), &msg).unwrap();
                t.recv(1, MsgKey::user(0), &mut got).unwrap();
            } else {
                t.recv(0, MsgKey::user(0), &mut got).unwrap();
                t.send(0, MsgKey::user(0), &got).unwrap();
            }
        }
        out.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64 / 2.0);
    }
    out.remove(0);
    out
}

fn summary(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if std::env::var_os("PINGPONG_ROLE").is_some() {
        // Child: rank 1, talks to the parent through the addresses it was given.
        let raw_addr = std::env::var("PINGPONG_RAW").unwrap();
        let sizes: Vec<usize> = args.iter().map(|a| a.parse().unwrap()).collect();
        let store_dir = std::env::var("PINGPONG_TCP0").unwrap();
        let store = MemStore::new();
        use ferry_core::Store;
        store.set("tcp/addr/0", store_dir.as_bytes()).unwrap();
        let mut t = TcpTransport::from_store(1, 2, &store, &Config::default(), "pp").unwrap();
        let s = TcpStream::connect(&raw_addr).unwrap();
        // Tell the parent our ferry address over the raw socket.
        let mut s2 = s.try_clone().unwrap();
        let a = t.local_addr().to_string();
        s2.write_all(&[a.len() as u8]).unwrap();
        s2.write_all(a.as_bytes()).unwrap();
        for &size in &sizes {
            raw(false, s.try_clone().unwrap(), size);
            ferry(&mut t, size);
        }
        t.finish().unwrap();
        return ExitCode::SUCCESS;
    }
    let sizes: Vec<usize> = if args.is_empty() {
        vec![8, 65536, 1 << 20]
    } else {
        args.iter().map(|a| a.parse().unwrap()).collect()
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let store = Arc::new(MemStore::new());
    // Rank 0 binds first so the child can be told its address.
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let a0 = probe.local_addr().unwrap();
    drop(probe);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(sizes.iter().map(|s| s.to_string()))
        .env("PINGPONG_ROLE", "1")
        .env("PINGPONG_RAW", l.local_addr().unwrap().to_string())
        .env("PINGPONG_TCP0", a0.to_string())
        .spawn()
        .unwrap();
    let (s, _) = l.accept().unwrap();
    let mut s2 = s.try_clone().unwrap();
    let mut len = [0u8];
    s2.read_exact(&mut len).unwrap();
    let mut a1 = vec![0u8; len[0] as usize];
    s2.read_exact(&mut a1).unwrap();
    use ferry_core::Store;
    store.set("tcp/addr/1", &a1).unwrap();
    let cfg = Config::default();
    let mut t = {
        // Bind rank 0 at the address announced to the child.
        let mut c = cfg.clone();
        c.tcp.addresses = vec![a0.to_string(), String::from_utf8(a1).unwrap()];
        c.tcp.secret = Some("pp".to_string());
        TcpTransport::from_address_list(&c).unwrap()
    };
    let _ = store;
    println!("# size  raw-spin median/best (us)  ferry-tcp median/best (us)  ratio(median)");
    for &size in &sizes {
        let (rm, rb) = summary(&mut raw(true, s.try_clone().unwrap(), size));
        let (fm, fb) = summary(&mut ferry(&mut t, size));
        println!(
            "{size:>8}  {rm:>8.2} / {rb:>8.2}          {fm:>8.2} / {fb:>8.2}           {:.2}",
            fm / rm
        );
    }
    t.finish().unwrap();
    let _ = child.wait();
    ExitCode::SUCCESS
}
