//! t_print_lines: launcher test program (R1 output forwarding). Every rank prints LINES lines
//! (default 10000) of the form `rank R line I <pad>` through an 8 KiB buffer, so the bytes
//! reach the pipe in pieces that split lines; `ferry run` must still forward whole lines only.
//! The last line has no newline (the launcher adds one). Usage: `t_print_lines [LINES]`.

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let rank: usize = std::env::var("FERRY_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let lines: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 10_000,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("usage: t_print_lines [LINES]");
            return ExitCode::from(2);
        }
    };
    // Lines of varying length, so the 8 KiB buffer boundary falls everywhere within a line.
    let pad = "abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = std::io::BufWriter::with_capacity(8192, std::io::stdout().lock());
    for i in 0..lines {
        let tail = &pad[..(i * 7 + rank) % pad.len()];
        let end = if i + 1 == lines { "" } else { "\n" };
        if write!(out, "rank {rank} line {i} {tail}{end}").is_err() {
            return ExitCode::from(1);
        }
    }
    if out.flush().is_err() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
