//! kvstest: the key-value store (D8) across all processes (examples.md §14, LAIK's kvstest).
//!
//! Every process sets "v1" = "1", the master also "v2" = "2", every process "d-<rank>" =
//! "from <rank>" (values are C strings: the terminating NUL is stored and counted); sync; then
//! every process copies each entry it sees to "T<rank>-<key>"; sync. The master prints the
//! entries in ascending key order. No arguments.

use std::io::Write;
use std::process::ExitCode;

use ferry::coll::Group;
use ferry::data::kvs::KvStore;

/// A C string value: the bytes plus the terminating NUL, as LAIK's test stores them.
fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// The text up to the first NUL, as `printf("%s")` shows it.
fn shown(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

fn run() -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let group = Group::world(world.size());
    let mut kvs = KvStore::new("kvstest");

    kvs.set("v1", &cstr("1"))?;
    if rank == 0 {
        kvs.set("v2", &cstr("2"))?;
    }
    kvs.set(&format!("d-{rank}"), &cstr(&format!("from {rank}")))?;
    kvs.sync(world.transport(), &group)?;

    let seen: Vec<(String, Vec<u8>)> = kvs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    for (k, v) in &seen {
        kvs.set(&format!("T{rank}-{k}"), v)?;
    }
    kvs.sync(world.transport(), &group)?;

    if rank == 0 {
        let mut out = String::new();
        out.push_str(&format!("Entries: {}\n", kvs.len()));
        for (i, (k, v)) in kvs.iter().enumerate() {
            out.push_str(&format!(
                " [{i:2}] Key '{k}': '{}' (len {})\n",
                shown(v),
                v.len()
            ));
        }
        let mut so = std::io::stdout().lock();
        so.write_all(out.as_bytes())
            .and_then(|_| so.flush())
            .map_err(|e| ferry::Error::io("write stdout", e))?;
    }
    // Nobody may still be pulling this rank's part of the last sync when it shuts down.
    ferry::coll::barrier(world.transport(), &group)?;
    world.finish()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvstest: {e}");
            ExitCode::FAILURE
        }
    }
}
