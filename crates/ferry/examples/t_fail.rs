//! t_fail: launcher test program (R1 failure propagation). Every rank prints
//! `rank R pid P`; rank FAIL_RANK then fails as MODE says (`exit3`: exits with code 3; `kill`:
//! is killed by SIGKILL) after DELAY_MS, while the other ranks sleep for 60 s, so a launcher
//! that did not end them would take a minute. Usage: `t_fail FAIL_RANK MODE [DELAY_MS]`.

use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::Duration;

fn main() -> ExitCode {
    let rank: usize = std::env::var("FERRY_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(fail_rank), Some(mode)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1),
    ) else {
        eprintln!("usage: t_fail FAIL_RANK exit3|kill|none [DELAY_MS]");
        return ExitCode::from(2);
    };
    let delay = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    println!("rank {rank} pid {}", std::process::id());
    let _ = std::io::stdout().flush();
    if rank == fail_rank {
        std::thread::sleep(Duration::from_millis(delay));
        match mode.as_str() {
            "exit3" => return ExitCode::from(3),
            "kill" => {
                // The `kill` utility delivers a real SIGKILL to this process.
                let _ = Command::new("kill")
                    .args(["-KILL", &std::process::id().to_string()])
                    .status();
                std::thread::sleep(Duration::from_secs(60));
                return ExitCode::from(4);
            }
            _ => {}
        }
    }
    std::thread::sleep(Duration::from_secs(60));
    ExitCode::SUCCESS
}
