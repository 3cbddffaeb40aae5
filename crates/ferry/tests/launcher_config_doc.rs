//! Keeps `docs/CONFIGURATION.md` true (R4): every configuration key is documented in its
//! section with its environment override and its actual default, no documented key is stale,
//! and every `FERRY_*` variable the library and launcher sources read is listed.

use std::path::{Path, PathBuf};

use ferry::Config;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn doc() -> String {
    std::fs::read_to_string(repo_root().join("docs/CONFIGURATION.md"))
        .expect("docs/CONFIGURATION.md exists")
}

/// `(section, key, default as Debug prints it)` for every key of the configuration, taken from
/// the pretty `Debug` form of `Config::default()` (sections at depth 1, keys at depth 2).
fn keys_and_defaults() -> Vec<(String, String, String)> {
    let dbg = format!("{:#?}", Config::default());
    let mut out = Vec::new();
    let mut section = None;
    for line in dbg.lines() {
        let depth = (line.len() - line.trim_start().len()) / 4;
        let t = line.trim();
        let Some((name, value)) = t.split_once(": ") else {
            continue;
        };
        match depth {
            1 => section = Some(name.to_string()),
            2 => {
                let s = section.clone().expect("key outside a section");
                out.push((s, name.to_string(), value.trim_end_matches(',').to_string()));
            }
            _ => {}
        }
    }
    assert!(
        out.len() > 10,
        "could not read the configuration keys: {dbg}"
    );
    out
}

/// The doc's text of section `[name]`, up to the next `## ` heading.
fn section_text<'a>(doc: &'a str, name: &str) -> &'a str {
    let head = format!("## `[{name}]`");
    let start = doc
        .find(&head)
        .unwrap_or_else(|| panic!("docs/CONFIGURATION.md has no section {head}"));
    let rest = &doc[start + head.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// How a default shown by `Debug` must appear in the doc's row (`None` is an unset option or
/// an enumeration's `none`, e.g. `general.bind`: either text).
fn expected_default(debug: &str) -> Vec<String> {
    match debug {
        "None" => vec!["unset".to_string(), "`\"none\"`".to_string()],
        other => vec![expected_text(other)],
    }
}

fn expected_text(debug: &str) -> String {
    match debug {
        "[]" => "`[]`".to_string(),
        // Enumerations are written in TOML's lower case.
        v if v.chars().all(|c| c.is_ascii_alphabetic())
            && v.starts_with(|c: char| c.is_ascii_uppercase()) =>
        {
            format!("`\"{}\"`", v.to_ascii_lowercase())
        }
        v => format!("`{v}`"),
    }
}

#[test]
fn every_key_is_documented_with_its_default() {
    let doc = doc();
    for (section, key, default) in keys_and_defaults() {
        let text = section_text(&doc, &section);
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| `{key}` |")))
            .unwrap_or_else(|| panic!("`{section}.{key}` is not documented"));
        let want = expected_default(&default);
        assert!(
            want.iter().any(|w| row.contains(w)),
            "`{section}.{key}`: default {} not in the row: {row}",
            want.join(" or ")
        );
        let env = format!(
            "FERRY_{}_{}",
            section.to_ascii_uppercase(),
            key.to_ascii_uppercase()
        );
        assert!(row.contains(&env), "`{section}.{key}`: {env} not in: {row}");
    }
}

#[test]
fn no_documented_key_is_stale() {
    let doc = doc();
    let keys = keys_and_defaults();
    for section in ["general", "tcp", "shm", "data"] {
        for line in section_text(&doc, section).lines() {
            let Some(rest) = line.strip_prefix("| `") else {
                continue;
            };
            let key = rest.split('`').next().unwrap_or("");
            if key == "key" {
                continue;
            }
            assert!(
                keys.iter().any(|(s, k, _)| s == section && k == key),
                "docs/CONFIGURATION.md documents `{section}.{key}`, which does not exist"
            );
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_variable_read_by_the_sources_is_documented() {
    let doc = doc();
    let root = repo_root();
    let mut files = Vec::new();
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        // ferry-c's `FERRY_*` names are C constants of its header (status codes, types), not
        // environment variables; the C library reads its environment through the facade.
        if e.file_name() == "ferry-c" {
            continue;
        }
        rust_files(&e.path().join("src"), &mut files);
    }
    let mut missing = Vec::new();
    for f in files {
        // A unit-test module in a file of its own (`mod tests;`) may invent variables too.
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let src = std::fs::read_to_string(&f).unwrap();
        // Unit tests inside a source file may invent variables; stop at the test module.
        let src = src.split("#[cfg(test)]").next().unwrap_or("");
        let bytes = src.as_bytes();
        let mut i = 0;
        while let Some(pos) = src[i..].find("FERRY_") {
            let start = i + pos;
            let mut end = start + "FERRY_".len();
            while end < bytes.len()
                && (bytes[end].is_ascii_uppercase()
                    || bytes[end] == b'_'
                    || bytes[end].is_ascii_digit())
            {
                end += 1;
            }
            let name = &src[start..end];
            i = end;
            // `FERRY_` alone or a prefix such as `FERRY_<SECTION>_` in prose.
            if name.ends_with('_') {
                continue;
            }
            if !doc.contains(name) {
                missing.push(format!("{name} ({})", f.display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "variables read by the sources but not in docs/CONFIGURATION.md: {missing:?}"
    );
}
