//! MPMD launches and process sets on the command line (X2): `ferry run -n 2 progA : -n 3
//! progB` starts two applications in one job, and `--pset NAME=RANKS` names sets of ranks.
//! The ranks learn the sets from `FERRY_PSETS` (see `ferry_core::pset`) and their
//! application's number from `FERRY_APPNUM`.

use ferry_core::pset::{self, ProcessSets};

/// One application of the job: how many ranks run which command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    pub ranks: usize,
    pub command: Vec<String>,
}

/// The options that start a further application after a `:`.
const COUNT_FLAGS: [&str; 3] = ["-n", "--np", "-np"];

/// Splits the command line after `ferry run -n FIRST` into applications. A `:` separates two
/// applications only when `-n N` (or `--np N`, `-np N`) follows it, as under mpirun; any other
/// `:` is an argument of the program.
pub fn split_apps(first: usize, command: &[String]) -> Result<Vec<App>, String> {
    let mut apps = vec![App {
        ranks: first,
        command: Vec::new(),
    }];
    let mut i = 0;
    while i < command.len() {
        let starts_app = command[i] == ":"
            && command
                .get(i + 1)
                .is_some_and(|f| COUNT_FLAGS.contains(&f.as_str()));
        if !starts_app {
            if let Some(app) = apps.last_mut() {
                app.command.push(command[i].clone());
            }
            i += 1;
            continue;
        }
        let k = apps.len();
        let count = command.get(i + 2).ok_or_else(|| {
            format!(
                "application {k} after `:`: `{}` needs a number of ranks",
                command[i + 1]
            )
        })?;
        let ranks = count
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                format!("application {k} after `:`: `{count}` is not a number of ranks (1 or more)")
            })?;
        apps.push(App {
            ranks,
            command: Vec::new(),
        });
        i += 3;
        if command.get(i).is_some_and(|a| a == "--") {
            i += 1;
        }
    }
    for (k, app) in apps.iter().enumerate() {
        if app.command.is_empty() {
            return Err(format!("application {k} has no program"));
        }
    }
    Ok(apps)
}

/// The sets to pass to the ranks: one per application when there are several, then those of
/// `--pset`, checked against the world of `world` ranks. Returns the `FERRY_PSETS` value
/// (None when there are no sets beyond world and self).
pub fn psets_value(apps: &[App], psets: &[String], world: usize) -> Result<Option<String>, String> {
    let mut named: Vec<(String, Vec<usize>)> = Vec::new();
    if apps.len() > 1 {
        let mut first = 0;
        for (k, app) in apps.iter().enumerate() {
            named.push((pset::app_set_name(k), (first..first + app.ranks).collect()));
            first += app.ranks;
        }
    }
    for arg in psets {
        let (name, ranks) = pset::parse_pset_arg(arg, world).map_err(|e| e.to_string())?;
        named.push((name, ranks));
    }
    if named.is_empty() {
        return Ok(None);
    }
    // The same checks the ranks make (distinct names), made once here with a usage error.
    ProcessSets::new(0, world.max(1), named.clone()).map_err(|e| e.to_string())?;
    Ok(Some(ProcessSets::encode_named(&named)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn applications_are_split_at_colons_followed_by_a_count() {
        let apps = split_apps(2, &words("a x : -n 3 b y z : --np 1 -- c")).unwrap();
        assert_eq!(
            apps,
            vec![
                App {
                    ranks: 2,
                    command: words("a x")
                },
                App {
                    ranks: 3,
                    command: words("b y z")
                },
                App {
                    ranks: 1,
                    command: words("c")
                },
            ]
        );
        // A colon without a count is an argument.
        let apps = split_apps(2, &words("echo a : b")).unwrap();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].command, words("echo a : b"));
        for (bad, what) in [
            ("a : -n", "needs a number"),
            ("a : -n x b", "not a number"),
            ("a : -n 0 b", "not a number"),
            ("a : -n 2", "no program"),
        ] {
            let e = split_apps(1, &words(bad)).unwrap_err();
            assert!(e.contains(what), "`{bad}`: {e}");
        }
    }

    #[test]
    fn sets_of_applications_and_of_the_command_line() {
        let apps = split_apps(2, &words("a : -n 3 b")).unwrap();
        assert_eq!(
            psets_value(&apps, &["odd=1,3".into()], 5).unwrap().unwrap(),
            "ferry://app/0=0-1;ferry://app/1=2-4;odd=1,3"
        );
        assert_eq!(psets_value(&apps[..1], &[], 2).unwrap(), None);
        assert!(psets_value(&apps, &["x=0".into(), "x=1".into()], 5)
            .unwrap_err()
            .contains("twice"));
        assert!(psets_value(&apps, &["x=0-9".into()], 5)
            .unwrap_err()
            .contains("out of range"));
    }
}
