//! Judging `jac2d_ft` and `jac2d_ft_data` runs that lost ranks against the undisturbed run:
//! the recovery tests (SHRINK, REBUILD, containers) all ask the same of their output.

use std::process::Command;
use std::time::Duration;

use super::procs::text;
use super::run_limited;

/// The undisturbed run of `cmd`: its stdout lines and how long it took. `what` names the run
/// in the failure message.
pub fn undisturbed(cmd: &mut Command, what: &str) -> (Vec<String>, Duration) {
    let (out, took) = run_limited(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{what}: undisturbed run failed: {}",
        text(&out.stderr)
    );
    let lines = text(&out.stdout).lines().map(str::to_string).collect();
    (lines, took)
}

/// The final line of a disturbed run comes once and equals the undisturbed one's, and every
/// `Residuum` line is one of the undisturbed run's (a rollback may repeat one).
pub fn judge_lines(reference: &[String], stdout: &[String], ctx: &str) {
    let final_line = reference.last().unwrap();
    assert!(final_line.starts_with("Global value sum after 400 iterations: "));
    let finals: Vec<&String> = stdout
        .iter()
        .filter(|l| l.starts_with("Global value sum"))
        .collect();
    assert_eq!(
        finals,
        vec![final_line],
        "one final line, as undisturbed; {ctx}"
    );
    for l in stdout.iter().filter(|l| l.starts_with("Residuum")) {
        assert!(
            reference.contains(l),
            "`{l}` is not an undisturbed line; {ctx}"
        );
    }
}

/// How many lines of `text` contain `pattern`.
pub fn count_lines(text: &str, pattern: &str) -> usize {
    text.lines().filter(|l| l.contains(pattern)).count()
}

/// Runs `attempt(span)` with `span` the undisturbed run's duration `took` in milliseconds (the
/// attempt picks its kill times within it), up to four times: a run that ended before its
/// kills `landed` (faster than the undisturbed one, on a machine whose load changes) is tried
/// again with half the span, so that the kills come earlier. Returns the last attempt.
pub fn with_earlier_kills<R>(
    took: Duration,
    landed: impl Fn(&R) -> bool,
    mut attempt: impl FnMut(u64) -> R,
) -> R {
    let mut span = took.as_millis() as u64;
    for _ in 1..4 {
        let run = attempt(span);
        if landed(&run) {
            return run;
        }
        span /= 2;
    }
    attempt(span)
}
