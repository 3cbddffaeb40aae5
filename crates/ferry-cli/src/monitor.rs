//! `ferry monitor show|diff|export|plot`: reading the records `FERRY_MONITOR=record:DIR`
//! writes (P1, P4) and comparing two of them offline with the rules of the online check (P2).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ferry_monitor::align::{diff_rank, CollectiveMode, Rules};
use ferry_monitor::format::{kind_name, read_dir, Dir, Record};
use ferry_monitor::summary::{byte_matrix, event_kind, summarize, Count};

/// `ferry monitor` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Summary per rank: messages and bytes in all, per peer and per kind.
    Show {
        /// Record directory (`FERRY_MONITOR=record:DIR`).
        dir: PathBuf,
    },
    /// Compare RUN with REF rank by rank: one line per deviation, then `N deviations`; exit
    /// status 0 when there is none, 1 when there is any.
    Diff {
        /// The reference recording.
        reference: PathBuf,
        /// The recording to check against it.
        run: PathBuf,
        #[command(flatten)]
        rules: RuleArgs,
    },
    /// Write the records as JSON (totals per rank, per peer and per kind, byte matrix) or CSV
    /// (one line per message) to standard output.
    Export {
        /// Record directory.
        dir: PathBuf,
        /// JSON summary.
        #[arg(long, conflicts_with = "csv", required_unless_present = "csv")]
        json: bool,
        /// CSV, one line per message.
        #[arg(long)]
        csv: bool,
    },
    /// Draw the communication matrix, the message-size histogram and the phase timeline.
    Plot {
        /// Record directory.
        dir: PathBuf,
        /// Output file, `.svg` or `.png`.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
}

/// Comparison settings of `diff`, the same as the options of `FERRY_MONITOR=check:`.
#[derive(Debug, clap::Args)]
pub struct RuleArgs {
    /// Lengths may differ by this many bytes.
    #[arg(long, default_value_t = 0)]
    len_abs: u64,
    /// Lengths may differ by this fraction of the recorded length.
    #[arg(long, default_value_t = 0.0)]
    len_rel: f64,
    /// Do not count deviations at the last K positions of each rank's reference.
    #[arg(long, default_value_t = 0)]
    ignore_last: u64,
    /// Look this many messages ahead in a flow when re-aligning.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Compare collectives as `calls` (backend-independent) or `messages`.
    #[arg(long, default_value = "calls")]
    collectives: String,
}

impl RuleArgs {
    fn rules(&self) -> Result<Rules, String> {
        let collectives = match self.collectives.as_str() {
            "calls" => CollectiveMode::Calls,
            "messages" => CollectiveMode::Messages,
            other => return Err(format!("--collectives {other}: one of calls, messages")),
        };
        if !(self.len_rel.is_finite() && self.len_rel >= 0.0) {
            return Err(format!("--len-rel {}: a fraction >= 0", self.len_rel));
        }
        Ok(Rules {
            len_abs: self.len_abs,
            len_rel: self.len_rel,
            ignore_last: self.ignore_last,
            window: self.window,
            collectives,
        })
    }
}

/// Runs a `ferry monitor` subcommand.
pub fn main(action: Action) -> ExitCode {
    let result = match action {
        Action::Show { dir } => read_dir(&dir).and_then(|r| emit(&show(&r))).map(|()| 0),
        Action::Diff {
            reference,
            run,
            rules,
        } => rules
            .rules()
            .and_then(|rules| diff(&reference, &run, rules)),
        Action::Export { dir, json, csv: _ } => read_dir(&dir)
            .and_then(|r| {
                emit(&if json {
                    export_json(&r)
                } else {
                    export_csv(&r)
                })
            })
            .map(|()| 0),
        Action::Plot { dir, output } => read_dir(&dir)
            .and_then(|r| crate::monitor_plot::plot(&r, &output))
            .map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("ferry monitor: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Writes `text` to standard output; a reader that went away (`| head`) ends the output
/// quietly instead of failing.
fn emit(text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing to standard output: {e}")),
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The `show` text.
pub fn show(records: &[Record]) -> String {
    let mut o = String::new();
    let n = records.len();
    let backend = records.first().map_or("", |r| r.header.backend.as_str());
    let _ = writeln!(o, "{n} ranks, recorded on {backend}");
    for rec in records {
        let s = summarize(rec);
        let state = match (s.complete, s.dropped) {
            (true, 0) => String::new(),
            (true, d) => format!(" ({d} records dropped)"),
            (false, 0) => " (incomplete: the rank did not finish)".into(),
            (false, d) => format!(" (incomplete, {d} records dropped)"),
        };
        let _ = writeln!(
            o,
            "rank {}: {} calls in {:.3} s, sent {} msgs / {}, received {} msgs / {}{state}",
            s.rank,
            s.calls,
            s.end_ns as f64 * 1e-9,
            s.sent.messages,
            human(s.sent.bytes),
            s.received.messages,
            human(s.received.bytes)
        );
        for (peer, (tx, rx)) in s.sent_to.iter().zip(&s.received_from).enumerate() {
            if tx.messages + rx.messages > 0 {
                let _ = writeln!(
                    o,
                    "  peer {peer}: sent {} msgs / {}, received {} msgs / {}",
                    tx.messages,
                    human(tx.bytes),
                    rx.messages,
                    human(rx.bytes)
                );
            }
        }
        for (kind, c) in &s.by_kind {
            let _ = writeln!(o, "  {kind}: {} msgs / {}", c.messages, human(c.bytes));
        }
    }
    o
}

/// Compares two record directories; prints the deviations and returns the exit status.
fn diff(reference: &Path, run: &Path, rules: Rules) -> Result<u8, String> {
    let refs = read_dir(reference)?;
    let runs = read_dir(run)?;
    if refs.len() != runs.len() {
        return Err(format!(
            "{} has {} ranks, {} has {}",
            reference.display(),
            refs.len(),
            run.display(),
            runs.len()
        ));
    }
    let mut total = 0usize;
    let mut report = String::new();
    for (rank, (r, g)) in refs.iter().zip(&runs).enumerate() {
        for (what, rec) in [(reference, r), (run, g)] {
            if rec.dropped() > 0 {
                eprintln!(
                    "ferry monitor: rank {rank}: {} lacks {} dropped records; deviations \
                     around them are expected",
                    what.display(),
                    rec.dropped()
                );
            }
        }
        for d in diff_rank(rank, &r.events, &g.events, rules) {
            let _ = writeln!(report, "{d}");
            total += 1;
        }
    }
    let _ = writeln!(report, "{total} deviations");
    emit(&report)?;
    Ok(u8::from(total > 0))
}

fn json_count(c: &Count) -> String {
    format!("{{\"messages\": {}, \"bytes\": {}}}", c.messages, c.bytes)
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The `export --json` document: per rank the totals (the same counts `FERRY_STATS=1`
/// prints), per peer and per kind, then job totals and the byte matrix.
pub fn export_json(records: &[Record]) -> String {
    let mut o = String::from("{\n  \"format\": \"ferry-monitor-1\",\n  \"ranks\": [\n");
    let mut sent = Count::default();
    let mut received = Count::default();
    for (i, rec) in records.iter().enumerate() {
        let s = summarize(rec);
        sent.messages += s.sent.messages;
        sent.bytes = sent.bytes.saturating_add(s.sent.bytes);
        received.messages += s.received.messages;
        received.bytes = received.bytes.saturating_add(s.received.bytes);
        let peers: Vec<String> = s
            .sent_to
            .iter()
            .zip(&s.received_from)
            .enumerate()
            .filter(|(_, (tx, rx))| tx.messages + rx.messages > 0)
            .map(|(p, (tx, rx))| {
                format!(
                    "{{\"peer\": {p}, \"sent\": {}, \"received\": {}}}",
                    json_count(tx),
                    json_count(rx)
                )
            })
            .collect();
        let kinds: Vec<String> = s
            .by_kind
            .iter()
            .map(|(k, c)| format!("{}: {}", json_str(k), json_count(c)))
            .collect();
        let _ = write!(
            o,
            "    {{\"rank\": {}, \"backend\": {}, \"complete\": {}, \"dropped\": {}, \
             \"calls\": {}, \"duration_ns\": {}, \"sent\": {}, \"received\": {},\n     \
             \"peers\": [{}],\n     \"kinds\": {{{}}}}}{}\n",
            s.rank,
            json_str(&s.backend),
            s.complete,
            s.dropped,
            s.calls,
            s.end_ns,
            json_count(&s.sent),
            json_count(&s.received),
            peers.join(", "),
            kinds.join(", "),
            if i + 1 < records.len() { "," } else { "" }
        );
    }
    let rows: Vec<String> = byte_matrix(records)
        .iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().map(u64::to_string).collect();
            format!("[{}]", cells.join(", "))
        })
        .collect();
    let _ = write!(
        o,
        "  ],\n  \"totals\": {{\"sent\": {}, \"received\": {}}},\n  \"bytes_matrix\": [{}]\n}}\n",
        json_count(&sent),
        json_count(&received),
        rows.join(", ")
    );
    o
}

/// The `export --csv` table: one line per message.
pub fn export_csv(records: &[Record]) -> String {
    let mut o = String::from(
        "rank,position,direction,peer,generation,kind,collective,tag,length,call,call_start_ns,call_ns\n",
    );
    for rec in records {
        for (pos, ev) in rec.events.iter().enumerate() {
            let dir = match ev.dir {
                Dir::Send => "send",
                Dir::Recv => "recv",
            };
            let coll = ev.collective().map(|_| event_kind(ev)).unwrap_or_default();
            let _ = writeln!(
                o,
                "{},{pos},{dir},{},{},{},{coll},{},{},{},{},{}",
                rec.header.rank,
                ev.peer,
                ev.key.generation,
                kind_name(ev.key.kind),
                ev.key.tag,
                ev.len,
                ev.call,
                ev.t_ns,
                ev.call_ns
            );
        }
    }
    o
}
