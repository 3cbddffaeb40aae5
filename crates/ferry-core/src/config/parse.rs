//! Reading the configuration: environment overrides, and errors that name the offending key
//! and where its value came from.

use crate::error::{Error, Result};

use super::{Config, SECTIONS};

/// Finds the first `section.key` whose value alone fails to deserialize, so that type errors
/// name the key (serde's message alone only says what type was expected).
pub(super) fn offending_key(table: &toml::Table) -> Option<String> {
    for (section, value) in table {
        let toml::Value::Table(keys) = value else {
            return Some(section.clone());
        };
        for (key, v) in keys {
            let mut one = toml::Table::new();
            let mut inner = toml::Table::new();
            inner.insert(key.clone(), v.clone());
            one.insert(section.clone(), toml::Value::Table(inner));
            if toml::Value::Table(one).try_into::<Config>().is_err() {
                return Some(format!("{section}.{key}"));
            }
        }
    }
    None
}

/// Environment variables that are not configuration keys (set by the launcher or the user).
pub(super) const NON_CONFIG_VARS: &[&str] = &[
    "FERRY_BACKEND",
    "FERRY_CONFIG",
    "FERRY_SIZE",
    "FERRY_RANK",
    "FERRY_LOG",
    "FERRY_STATS",
    "FERRY_LOCAL_SIZE",
    "FERRY_LOCAL_CPUS",
];

/// Where the settings came from, so that an error names the source of the bad value: the
/// file (or `defaults`), or the environment variable that set the key.
pub(super) struct Origins {
    /// The configuration file's path, or `defaults` without one.
    pub(super) file: String,
    /// `(section.key, NAME=value)` of every key set from the environment.
    pub(super) env: Vec<(String, String)>,
}

impl Origins {
    pub(super) fn file(origin: &str) -> Origins {
        Origins {
            file: origin.to_string(),
            env: Vec::new(),
        }
    }

    /// The source of `key` (`section.key`, or `section.key[i]` for an element of a list).
    pub(super) fn of(&self, key: &str) -> &str {
        let key = key.split('[').next().unwrap_or(key);
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map_or(self.file.as_str(), |(_, var)| var.as_str())
    }
}

/// A TOML syntax error with the line and key it is on (the parser's message alone names
/// neither), and the limit when a number does not fit TOML's 64-bit signed integers.
pub(super) fn syntax_error(text: &str, origin: &str, e: &toml::de::Error) -> Error {
    let mut msg = origin.to_string();
    if let Some(span) = e.span() {
        let start = span.start.min(text.len());
        let line_no = text[..start].matches('\n').count() + 1;
        msg.push_str(&format!(", line {line_no}"));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line = text[line_start..].lines().next().unwrap_or("");
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            if !key.is_empty() && !key.starts_with('[') {
                msg.push_str(&format!(": `{key}`"));
            }
        }
    }
    msg.push_str(&format!(": {}", e.message()));
    if e.message().contains("too large") {
        msg.push_str(&format!(
            " (configuration integers are at most {})",
            i64::MAX
        ));
    }
    Error::config(msg)
}

/// Applies the `FERRY_<SECTION>_<KEY>` variables of `vars` to `table`; returns which keys
/// they set (for error messages).
pub(super) fn apply_env_overrides(
    table: &mut toml::Table,
    vars: &[(String, String)],
) -> Result<Vec<(String, String)>> {
    let mut set = Vec::new();
    for (name, raw) in vars {
        let Some(rest) = name.strip_prefix("FERRY_") else {
            continue;
        };
        if NON_CONFIG_VARS.contains(&name.as_str()) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        let Some((section, key)) = SECTIONS.iter().find_map(|s| {
            lower
                .strip_prefix(&format!("{s}_"))
                .map(|k| (*s, k.to_string()))
        }) else {
            // Other FERRY_ variables belong to the launcher and backends (rendezvous, node,
            // secret, ...); they are not configuration keys.
            continue;
        };
        let value = parse_env_value(raw)
            .map_err(|why| Error::config(format!("{name}={raw}: `{section}.{key}`: {why}")))?;
        set.push((format!("{section}.{key}"), format!("{name}={raw}")));
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match entry {
            toml::Value::Table(t) => {
                t.insert(key, value);
            }
            _ => {
                return Err(Error::config(format!(
                    "`{section}` must be a table (overridden by {name})"
                )))
            }
        }
    }
    Ok(set)
}

/// Environment values are TOML scalars when they parse as such (numbers, booleans, arrays),
/// strings otherwise. A whole number TOML cannot hold (beyond 64-bit signed) is an error
/// saying so, not a string that the key then rejects as the wrong type.
pub(super) fn parse_env_value(raw: &str) -> std::result::Result<toml::Value, String> {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => Ok(t
            .remove("v")
            .unwrap_or(toml::Value::String(raw.to_string()))),
        Err(_) => {
            let digits = raw.trim().trim_start_matches(['+', '-']).replace('_', "");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "{} is out of range (configuration integers are at most {})",
                    raw.trim(),
                    i64::MAX
                ));
            }
            Ok(toml::Value::String(raw.to_string()))
        }
    }
}
