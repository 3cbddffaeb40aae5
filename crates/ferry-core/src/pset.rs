//! Process sets (X2): named sets of world ranks that a session builds groups from.
//!
//! Every job has `ferry://world` (all ranks of the application world) and `ferry://self` (this
//! rank alone). More come from the launch:
//! - `ferry run --pset NAME=RANKS` names a set (RANKS like `0-1,3`);
//! - an MPMD launch `ferry run -n 2 progA : -n 3 progB` makes one set per application,
//!   `ferry://app/0`, `ferry://app/1`, ...;
//! - under `mpirun` with several application contexts (`mpirun -n 2 a : -n 3 b`) the same
//!   application sets are derived from Open MPI's `OMPI_NUM_APP_CTX` and
//!   `OMPI_APP_CTX_NUM_PROCS`;
//! - anywhere (`srun`, hand starts), [`PSETS_VAR`] lists sets in the launcher's format.
//!
//! The launcher passes its sets to the ranks in [`PSETS_VAR`] as `NAME=RANKS` entries
//! separated by `;`.

use crate::error::{Error, Result};

/// The variable that carries named process sets: `NAME=RANKS;NAME=RANKS...`.
pub const PSETS_VAR: &str = "FERRY_PSETS";
/// Name of the set of every rank of the world.
pub const WORLD: &str = "ferry://world";
/// Name of the set of this rank alone.
pub const SELF: &str = "ferry://self";
/// Prefix of the built-in set names; names given at launch may not use it.
pub const BUILTIN_PREFIX: &str = "ferry://";

/// The name of the set of MPMD application `k`.
pub fn app_set_name(k: usize) -> String {
    format!("ferry://app/{k}")
}

/// Parses a rank list such as `0-1,3` into sorted, distinct ranks, each below `size`.
/// Errors name the offending part.
pub fn parse_ranks(text: &str, size: usize) -> Result<Vec<usize>> {
    let bad = |why: String| Error::config(format!("rank list `{text}`: {why}"));
    if text.trim().is_empty() {
        return Err(bad("empty (use ranks like `0-1,3`)".into()));
    }
    let mut ranks = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let num = |s: &str| {
            s.trim().parse::<usize>().map_err(|_| {
                bad(format!(
                    "`{part}` is not a rank or a range of ranks (use ranks like `0-1,3`)"
                ))
            })
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let r = num(part)?;
                (r, r)
            }
        };
        if lo > hi {
            return Err(bad(format!("range `{part}` runs backwards")));
        }
        if hi >= size {
            return Err(bad(format!(
                "rank {hi} is out of range for {size} rank{}",
                if size == 1 { "" } else { "s" }
            )));
        }
        ranks.extend(lo..=hi);
    }
    ranks.sort_unstable();
    let before = ranks.len();
    ranks.dedup();
    if ranks.len() != before {
        return Err(bad("a rank is listed twice".into()));
    }
    Ok(ranks)
}

/// Writes sorted ranks in the compact form [`parse_ranks`] reads (`0-1,3`).
pub fn format_ranks(ranks: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Checks the name of a set given at launch: not empty, no `=`, `;`, `,` or white space,
/// not in the built-in `ferry://` namespace.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::config("a process set needs a name (NAME=RANKS)"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "=;,".contains(*c))
    {
        return Err(Error::config(format!(
            "process set name `{name}` contains {c:?}; names may not contain `=`, `;`, `,` \
             or white space"
        )));
    }
    if name.starts_with(BUILTIN_PREFIX) {
        return Err(Error::config(format!(
            "process set name `{name}`: names starting with `{BUILTIN_PREFIX}` are built in"
        )));
    }
    Ok(())
}

/// Parses one `NAME=RANKS` set of `--pset` for a job of `size` ranks.
pub fn parse_pset_arg(arg: &str, size: usize) -> Result<(String, Vec<usize>)> {
    let Some((name, ranks)) = arg.split_once('=') else {
        return Err(Error::config(format!(
            "--pset `{arg}`: expected NAME=RANKS, e.g. `--pset left=0-1,3`"
        )));
    };
    check_name(name).map_err(|e| e.context("--pset"))?;
    let ranks = parse_ranks(ranks, size).map_err(|e| e.context(format!("--pset {name}")))?;
    Ok((name.to_string(), ranks))
}

/// The process sets one rank sees, in a fixed order: `ferry://world`, `ferry://self`, then the
/// sets of the launch in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSets {
    rank: usize,
    sets: Vec<(String, Vec<usize>)>,
}

impl ProcessSets {
    /// The sets of rank `rank` of a world of `size` ranks, with the launch's sets `named`.
    /// Names must be distinct and every rank below `size`.
    pub fn new(rank: usize, size: usize, named: Vec<(String, Vec<usize>)>) -> Result<ProcessSets> {
        if rank >= size {
            return Err(Error::config(format!(
                "rank {rank} is not below the world size {size}"
            )));
        }
        let mut sets = vec![
            (WORLD.to_string(), (0..size).collect()),
            (SELF.to_string(), vec![rank]),
        ];
        for (name, mut ranks) in named {
            if sets.iter().any(|(n, _)| *n == name) {
                return Err(Error::config(format!(
                    "process set `{name}` is defined twice"
                )));
            }
            ranks.sort_unstable();
            ranks.dedup();
            if ranks.is_empty() || ranks.iter().any(|&r| r >= size) {
                return Err(Error::config(format!(
                    "process set `{name}` must hold ranks below {size}"
                )));
            }
            sets.push((name, ranks));
        }
        Ok(ProcessSets { rank, sets })
    }

    /// The sets of this process, from the environment: [`PSETS_VAR`] if set, else Open MPI's
    /// application contexts; always `ferry://world` and `ferry://self`.
    pub fn from_vars(vars: &[(String, String)], rank: usize, size: usize) -> Result<ProcessSets> {
        let get = |name: &str| {
            vars.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.trim().is_empty())
        };
        if let Some(text) = get(PSETS_VAR) {
            let named = decode(text, size).map_err(|e| e.context(PSETS_VAR))?;
            return ProcessSets::new(rank, size, named);
        }
        let mut named = Vec::new();
        if let (Some(n), Some(procs)) = (get("OMPI_NUM_APP_CTX"), get("OMPI_APP_CTX_NUM_PROCS")) {
            let counts: Vec<usize> = procs
                .split_whitespace()
                .map(|c| c.parse::<usize>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| {
                    Error::config(format!(
                        "OMPI_APP_CTX_NUM_PROCS=`{procs}` is not a list of counts"
                    ))
                })?;
            let apps = n.trim().parse::<usize>().ok();
            if apps.is_some_and(|a| a > 1 && a == counts.len())
                && counts.iter().sum::<usize>() == size
            {
                let mut first = 0;
                for (k, c) in counts.iter().enumerate() {
                    named.push((app_set_name(k), (first..first + c).collect()));
                    first += c;
                }
            }
        }
        ProcessSets::new(rank, size, named)
    }

    /// Number of sets.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// Always false: `ferry://world` and `ferry://self` exist.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// The name of set `n` (0-based).
    pub fn name(&self, n: usize) -> Result<&str> {
        self.sets
            .get(n)
            .map(|(name, _)| name.as_str())
            .ok_or_else(|| {
                Error::invalid(
                    "process set",
                    format!(
                        "index {n} is out of range: this process sees {} sets (0 to {})",
                        self.sets.len(),
                        self.sets.len() - 1
                    ),
                )
                .on_rank(self.rank)
            })
    }

    /// The world ranks of the set called `name`, ascending.
    pub fn ranks(&self, name: &str) -> Result<&[usize]> {
        self.sets
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.as_slice())
            .ok_or_else(|| {
                let known: Vec<&str> = self.sets.iter().map(|(n, _)| n.as_str()).collect();
                Error::invalid(
                    "process set",
                    format!(
                        "no process set is called `{name}` (known: {})",
                        known.join(", ")
                    ),
                )
                .on_rank(self.rank)
            })
    }

    /// The name of the MPMD application set (`ferry://app/K`) this rank belongs to, if the
    /// launch had several applications.
    pub fn my_app(&self) -> Option<&str> {
        self.sets
            .iter()
            .find(|(n, r)| n.starts_with("ferry://app/") && r.contains(&self.rank))
            .map(|(n, _)| n.as_str())
    }

    /// The number of ranks in the set called `name`.
    pub fn size_of(&self, name: &str) -> Result<usize> {
        self.ranks(name).map(|r| r.len())
    }

    /// The sets given at launch, encoded for [`PSETS_VAR`] (built-in world and self are not
    /// included: every rank makes its own).
    pub fn encode_named(named: &[(String, Vec<usize>)]) -> String {
        named
            .iter()
            .map(|(n, r)| format!("{n}={}", format_ranks(r)))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// Decodes [`PSETS_VAR`]: `NAME=RANKS` entries separated by `;`. Application sets
/// (`ferry://app/K`) are accepted here, as the launcher writes them.
fn decode(text: &str, size: usize) -> Result<Vec<(String, Vec<usize>)>> {
    let mut out = Vec::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, ranks)) = entry.split_once('=') else {
            return Err(Error::config(format!(
                "entry `{entry}`: expected NAME=RANKS"
            )));
        };
        let is_app = name
            .strip_prefix("ferry://app/")
            .is_some_and(|k| k.parse::<usize>().is_ok());
        if !is_app {
            check_name(name)?;
        }
        out.push((name.to_string(), parse_ranks(ranks, size)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_parse_and_print() {
        assert_eq!(parse_ranks("0-1,3", 4).unwrap(), vec![0, 1, 3]);
        assert_eq!(parse_ranks(" 2 , 0 ", 3).unwrap(), vec![0, 2]);
        assert_eq!(format_ranks(&[0, 1, 3, 5, 6, 7]), "0-1,3,5-7");
        for (bad, what) in [
            ("", "empty"),
            ("0-", "not a rank"),
            ("a", "not a rank"),
            ("3-1", "backwards"),
            ("0-4", "out of range"),
            ("1,1", "twice"),
            ("0,,1", "not a rank"),
        ] {
            let e = parse_ranks(bad, 4).unwrap_err().to_string();
            assert!(e.contains(what), "`{bad}`: {e}");
        }
    }

    #[test]
    fn pset_arguments_are_checked() {
        assert_eq!(
            parse_pset_arg("left=0-1", 4).unwrap(),
            ("left".to_string(), vec![0, 1])
        );
        for (bad, what) in [
            ("left", "NAME=RANKS"),
            ("=0", "needs a name"),
            ("a b=0", "white space"),
            ("ferry://x=0", "built in"),
            ("x=9", "out of range"),
        ] {
            let e = parse_pset_arg(bad, 4).unwrap_err().to_string();
            assert!(e.contains(what), "`{bad}`: {e}");
        }
    }

    #[test]
    fn sets_from_the_launcher_and_from_open_mpi() {
        let v = |k: &str, x: &str| (k.to_string(), x.to_string());
        let s = ProcessSets::from_vars(
            &[v(PSETS_VAR, "ferry://app/0=0-1;ferry://app/1=2-4;odd=1,3")],
            3,
            5,
        )
        .unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s.name(0).unwrap(), WORLD);
        assert_eq!(s.ranks(SELF).unwrap(), &[3]);
        assert_eq!(s.name(3).unwrap(), "ferry://app/1");
        assert_eq!(s.size_of("ferry://app/1").unwrap(), 3);
        assert_eq!(s.ranks("odd").unwrap(), &[1, 3]);
        let e = s.ranks("even").unwrap_err().to_string();
        assert!(e.contains("no process set is called `even`"), "{e}");
        assert!(e.contains("rank 3"), "{e}");
        let e = s.name(5).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");

        let ompi = ProcessSets::from_vars(
            &[
                v("OMPI_NUM_APP_CTX", "2"),
                v("OMPI_APP_CTX_NUM_PROCS", "1 2"),
            ],
            0,
            3,
        )
        .unwrap();
        assert_eq!(ompi.ranks("ferry://app/1").unwrap(), &[1, 2]);
        assert_eq!(ompi.my_app(), Some("ferry://app/0"));
        assert_eq!(s.my_app(), Some("ferry://app/1"));
        let plain = ProcessSets::from_vars(&[], 0, 3).unwrap();
        assert_eq!(plain.len(), 2);
        assert_eq!(plain.my_app(), None);
        assert!(ProcessSets::from_vars(&[v(PSETS_VAR, "x=0;x=1")], 0, 3).is_err());
        assert!(ProcessSets::from_vars(&[v(PSETS_VAR, "bad")], 0, 3).is_err());
    }
}
