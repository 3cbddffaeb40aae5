//! Ranks on other hosts (`--hosts`, `--hostfile`): placement of ranks on hosts and the command
//! line that starts one rank through the `--remote-cmd` template.
//!
//! Remote ranks get their `FERRY_*` variables on the command line (through `env`), because
//! tools like ssh do not carry the launcher's environment. The job secret is the exception: it
//! would be readable by every user of the remote host in its process list, so the command
//! reads it from the rank's stdin instead, which the launcher feeds and then closes (T8).

use std::path::Path;

/// Reads a host file: one host per line, optionally followed by `slots=N` (Open MPI's host
/// file syntax: the host then appears N times in the list, so N consecutive places of the
/// round-robin fall on it); blank lines and text after `#` are ignored.
pub fn read_hostfile(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read host file {}: {e}", path.display()))?;
    parse_hostfile(&text).map_err(|e| format!("host file {}: {e}", path.display()))
}

/// The host list of a host file's text (see [`read_hostfile`]).
pub fn parse_hostfile(text: &str) -> Result<Vec<String>, String> {
    /// More slots than this on one line is a typo, not a machine.
    const MAX_SLOTS: usize = 1 << 16;
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(host) = words.next() else {
            continue;
        };
        let mut slots = 1;
        for w in words {
            match w.strip_prefix("slots=").map(str::parse::<usize>) {
                Some(Ok(n)) if (1..=MAX_SLOTS).contains(&n) => slots = n,
                _ => {
                    return Err(format!(
                        "line {}: cannot read `{w}` (expected slots=N)",
                        i + 1
                    ))
                }
            }
        }
        hosts.extend((0..slots).map(|_| host.to_string()));
    }
    if hosts.is_empty() {
        return Err("names no host".to_string());
    }
    Ok(hosts)
}

/// Checks host names: they become part of a shell command and of `FERRY_NODE`.
pub fn check_hosts(hosts: &[String]) -> Result<(), String> {
    for h in hosts {
        let ok = !h.is_empty()
            && h.len() <= 253
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:@[]".contains(&b));
        if !ok {
            return Err(format!(
                "`{h}` is not a host name (letters, digits and -._:@[] only)"
            ));
        }
    }
    Ok(())
}

/// The host of each of `n` ranks: round-robin over `hosts`, or in blocks of ceil(n / hosts).
pub fn place(n: usize, hosts: &[String], block: bool) -> Vec<String> {
    if hosts.is_empty() {
        return Vec::new();
    }
    let per = n.div_ceil(hosts.len()).max(1);
    (0..n)
        .map(|r| {
            let h = if block { r / per } else { r % hosts.len() };
            hosts[h.min(hosts.len() - 1)].clone()
        })
        .collect()
}

/// Quotes `word` for a POSIX shell (single quotes; embedded ones as `'\''`).
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Shell words that read one line from stdin into `var` and export it before running the
/// rest of the command: how a secret reaches a remote rank without appearing in any process's
/// arguments (T8).
fn read_secret_prefix(var: &str) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("IFS= read -r {var} && export {var} && exec \"$0\" \"$@\""),
    ]
}

/// The shell command that starts `program args` on `host` with the variables `env`, built
/// from `template` (`{host}`, `{cmd}`, `{qcmd}`; see `ferry run --help`). With `stdin_var`,
/// the rank first reads that variable's value from its stdin (see [`read_secret_prefix`]).
pub fn remote_command(
    template: &str,
    host: &str,
    env: &[(String, String)],
    command: &[String],
    stdin_var: Option<&str>,
) -> Result<String, String> {
    if !template.contains("{cmd}") && !template.contains("{qcmd}") {
        return Err(format!(
            "--remote-cmd `{template}` has neither {{cmd}} nor {{qcmd}}: where does the rank's command go?"
        ));
    }
    let mut words: Vec<String> = stdin_var.map(read_secret_prefix).unwrap_or_default();
    words.push("env".to_string());
    words.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    words.extend(command.iter().cloned());
    let cmd = words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let qcmd = shell_quote(&cmd);
    Ok(template
        .replace("{host}", &shell_quote(host))
        .replace("{qcmd}", &qcmd)
        .replace("{cmd}", &cmd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hostfile_syntax() {
        assert_eq!(
            parse_hostfile("# nodes\na slots=2\n\nb   # spare\n").unwrap(),
            hosts(&["a", "a", "b"])
        );
        assert!(parse_hostfile("a slots=x\n").is_err());
        assert!(parse_hostfile("a slots=0\n").is_err());
        assert!(parse_hostfile("# nothing\n").is_err());
    }

    #[test]
    fn placement() {
        let h = hosts(&["a", "b"]);
        assert_eq!(place(5, &h, false), hosts(&["a", "b", "a", "b", "a"]));
        assert_eq!(place(5, &h, true), hosts(&["a", "a", "a", "b", "b"]));
        assert_eq!(place(1, &h, true), hosts(&["a"]));
        assert!(check_hosts(&hosts(&["ns1", "10.0.0.2", "u@h"])).is_ok());
        assert!(check_hosts(&hosts(&["a;rm"])).is_err());
    }

    #[test]
    fn quoting_survives_two_shells() {
        assert_eq!(shell_quote("abc"), "abc");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        let env = vec![("FERRY_RANK".to_string(), "1".to_string())];
        let cmd = vec!["/bin/echo".to_string(), "x y".to_string()];
        let c = remote_command("ip netns exec {host} {cmd}", "ns1", &env, &cmd, None).unwrap();
        assert_eq!(c, "ip netns exec ns1 env FERRY_RANK=1 /bin/echo 'x y'");
        let c = remote_command("sh -c {qcmd}", "h", &env, &cmd, None).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&c)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"x y\n");
    }

    #[test]
    fn secret_comes_through_stdin_not_arguments() {
        use std::io::Write;
        let env = vec![("FERRY_RANK".to_string(), "1".to_string())];
        let cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            "echo \"$FERRY_RANK $FERRY_SECRET\"".to_string(),
        ];
        let c = remote_command("sh -c {qcmd}", "h", &env, &cmd, Some("FERRY_SECRET")).unwrap();
        assert!(!c.contains("s3cr3t"));
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&c)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"s3cr3t\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"1 s3cr3t\n");
        let env = vec![("FERRY_RANK".to_string(), "1".to_string())];
        assert!(remote_command("ssh {host}", "h", &env, &cmd, None).is_err());
    }
}
