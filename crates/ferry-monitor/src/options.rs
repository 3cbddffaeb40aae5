//! `FERRY_MONITOR` syntax: `record:DIR` or `check:DIR[,option=value...]`.

use std::path::PathBuf;

use ferry_core::{Error, Result};

use crate::align::{CollectiveMode, Rules};

/// What to do about a deviation found while checking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reaction {
    /// Print it to stderr (`ferry monitor: rank R: ...`).
    #[default]
    Log,
    /// Print it, and fail the rank once more than `allow` deviations were found: the
    /// communication call (or finish) that found the one too many returns an error naming it.
    Abort,
    /// Only count it and call the program's callback (see [`crate::on_deviation`]).
    Quiet,
}

/// Settings of the check mode.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckOptions {
    /// Comparison rules (tolerances, window, collectives).
    pub rules: Rules,
    /// Deviations tolerated before `react=abort` fails the rank.
    pub allow: u64,
    /// Reaction.
    pub react: Reaction,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            rules: Rules::default(),
            allow: 0,
            react: Reaction::Log,
        }
    }
}

/// What `FERRY_MONITOR` asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Record into this directory.
    Record(PathBuf),
    /// Check against the recording in this directory.
    Check(PathBuf, CheckOptions),
}

fn bad(value: &str, why: impl std::fmt::Display) -> Error {
    Error::config(format!("FERRY_MONITOR=`{value}`: {why}"))
}

/// Parses a `FERRY_MONITOR` value; an empty value means off (`None`).
pub fn parse(value: &str) -> Result<Option<Mode>> {
    if value.is_empty() {
        return Ok(None);
    }
    let (mode, rest) = value
        .split_once(':')
        .ok_or_else(|| bad(value, "expected record:DIR or check:DIR[,options]"))?;
    match mode {
        "record" => {
            if rest.is_empty() {
                return Err(bad(value, "no directory"));
            }
            Ok(Some(Mode::Record(PathBuf::from(rest))))
        }
        "check" => {
            let mut parts = rest.split(',');
            let dir = parts.next().unwrap_or_default();
            if dir.is_empty() {
                return Err(bad(value, "no directory"));
            }
            let mut o = CheckOptions::default();
            for opt in parts {
                let (k, v) = opt
                    .split_once('=')
                    .ok_or_else(|| bad(value, format!("option `{opt}` is not key=value")))?;
                let num = |what: &str| -> Result<u64> {
                    v.parse::<u64>()
                        .map_err(|_| bad(value, format!("{what}=`{v}` is not a whole number")))
                };
                match k {
                    "len_abs" => o.rules.len_abs = num(k)?,
                    "len_rel" => {
                        o.rules.len_rel = v
                            .parse::<f64>()
                            .ok()
                            .filter(|f| f.is_finite() && *f >= 0.0)
                            .ok_or_else(|| {
                                bad(value, format!("len_rel=`{v}` is not a fraction >= 0"))
                            })?
                    }
                    "allow" => o.allow = num(k)?,
                    "ignore_last" => o.rules.ignore_last = num(k)?,
                    "window" => {
                        o.rules.window =
                            usize::try_from(num(k)?).map_err(|_| bad(value, "window too large"))?
                    }
                    "react" => {
                        o.react = match v {
                            "log" => Reaction::Log,
                            "abort" => Reaction::Abort,
                            "quiet" => Reaction::Quiet,
                            _ => return Err(bad(value, "react is one of log, abort, quiet")),
                        }
                    }
                    "collectives" => {
                        o.rules.collectives = match v {
                            "calls" => CollectiveMode::Calls,
                            "messages" => CollectiveMode::Messages,
                            _ => return Err(bad(value, "collectives is calls or messages")),
                        }
                    }
                    _ => {
                        return Err(bad(
                            value,
                            format!(
                                "unknown option `{k}` (len_abs, len_rel, allow, ignore_last, \
                                 window, react, collectives)"
                            ),
                        ))
                    }
                }
            }
            Ok(Some(Mode::Check(PathBuf::from(dir), o)))
        }
        _ => Err(bad(
            value,
            format!("unknown mode `{mode}` (record or check)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_modes_and_every_option() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(
            parse("record:out/rec").unwrap(),
            Some(Mode::Record("out/rec".into()))
        );
        let Some(Mode::Check(dir, o)) = parse(
            "check:r,len_abs=8,len_rel=0.1,allow=3,ignore_last=5,window=9,react=abort,collectives=messages",
        )
        .unwrap() else {
            panic!("not check")
        };
        assert_eq!(dir, PathBuf::from("r"));
        assert_eq!(o.rules.len_abs, 8);
        assert_eq!(o.rules.len_rel, 0.1);
        assert_eq!(o.allow, 3);
        assert_eq!(o.rules.ignore_last, 5);
        assert_eq!(o.rules.window, 9);
        assert_eq!(o.react, Reaction::Abort);
        assert_eq!(o.rules.collectives, CollectiveMode::Messages);
    }

    #[test]
    fn mistakes_are_configuration_errors_naming_the_value() {
        for v in [
            "record",
            "record:",
            "check:",
            "watch:x",
            "check:d,allow=x",
            "check:d,len_rel=-1",
            "check:d,react=panic",
            "check:d,frob=1",
            "check:d,allow",
        ] {
            let e = parse(v).unwrap_err().to_string();
            assert!(e.contains(v), "{e}");
        }
    }
}
