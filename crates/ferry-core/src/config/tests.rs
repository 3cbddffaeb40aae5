use super::cores::{cgroup_quota_cores, job_cpus};
use super::*;

#[test]
fn defaults_are_valid() {
    let c = Config::load(None, &[]).unwrap();
    assert_eq!(c, Config::default());
}

/// `mpirun` binds every rank to one core: its affinity mask then holds one CPU, yet two
/// ranks on a two-core host are not oversubscribed, and `auto` must not make them yield
/// on every poll. Runs on a thread whose mask is narrowed to one CPU.
#[test]
fn auto_yield_counts_the_hosts_cores_not_the_affinity_mask() {
    let host = host_cores();
    let policies = std::thread::spawn(move || {
        bind_thread_to_its_first_cpu().expect("narrow the mask");
        assert_eq!(available_cores(), 1, "the mask was narrowed");
        assert_eq!(
            host_cores(),
            host,
            "the host's cores do not depend on the mask"
        );
        let c = Config::default();
        (c.wait_policy(host), c.wait_policy(host + 1))
    })
    .join()
    .expect("policy thread");
    assert!(
        !policies.0.yield_each_poll,
        "{host} ranks on {host} cores are not oversubscribed"
    );
    assert!(
        policies.1.yield_each_poll,
        "{} ranks on {host} cores are",
        host + 1
    );
    // The same bound thread spins without yields only while the host is not oversubscribed.
    assert!(
        !policies.0.spin_yields,
        "a rank bound alone to its CPU does not yield while spinning"
    );
    assert!(
        policies.1.spin_yields,
        "a bound rank of an oversubscribed host still yields"
    );
    assert_eq!(cgroup_quota_cores("max 100000\n"), None);
    assert_eq!(cgroup_quota_cores("150000 100000\n"), Some(2));
    assert_eq!(cgroup_quota_cores("50000 100000"), Some(1));
    assert_eq!(cgroup_quota_cores("garbage"), None);
}

#[test]
fn only_a_bound_rank_of_a_host_that_is_not_oversubscribed_spins_alone() {
    assert!(spins_alone(true, 2, 2));
    assert!(spins_alone(true, 1, 4));
    assert!(!spins_alone(true, 3, 2), "oversubscribed");
    assert!(
        !spins_alone(false, 2, 2),
        "unbound: the scheduler may pair it with a peer"
    );
    assert!(!spins_alone(false, 3, 2));
}

#[test]
fn waits_are_bounded_by_liveness_unless_an_operation_timeout_is_set() {
    let c = Config::default();
    assert_eq!(c.operation_timeout(), None);
    assert_eq!(c.wait_policy(1).timeout, None);
    assert_eq!(c.failure_timeout(), Duration::from_secs(10));
    // The old key name still sets the optional operation timeout, from a file or the
    // environment.
    let f = Config::from_toml("[general]\ntimeout_ms = 500\n", "f.toml").unwrap();
    assert_eq!(f.operation_timeout(), Some(Duration::from_millis(500)));
    let vars = [("FERRY_GENERAL_TIMEOUT_MS".to_string(), "700".to_string())];
    let e = Config::load(None, &vars).unwrap();
    assert_eq!(e.wait_policy(1).timeout, Some(Duration::from_millis(700)));
    let z = Config::from_toml("[general]\nfailure_timeout_ms = 0\n", "f.toml").unwrap_err();
    assert!(z.to_string().contains("general.failure_timeout_ms"), "{z}");
}

#[test]
fn unknown_key_is_named() {
    let e = Config::from_toml("[tcp]\nconection_cap = 3\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("conection_cap"), "{e}");
    let e = Config::from_toml("[tpc]\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("tpc"), "{e}");
}

#[test]
fn bad_value_is_named() {
    let e = Config::from_toml("[tcp]\nconnection_cap = \"many\"\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("connection_cap"), "{e}");
    let e = Config::from_toml("[tcp]\nconnection_cap = 0\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("tcp.connection_cap"), "{e}");
    let e = Config::from_toml("[tcp]\naddresses = [\"nohost\"]\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("tcp.addresses[0]"), "{e}");
}

#[test]
fn bad_environment_values_name_the_variable() {
    let vars = vec![("FERRY_TCP_CONNECTION_CAP".to_string(), "abc".to_string())];
    let e = Config::load(None, &vars).unwrap_err().to_string();
    assert!(
        e.contains("FERRY_TCP_CONNECTION_CAP=abc: `tcp.connection_cap`"),
        "{e}"
    );
    assert!(!e.contains("defaults"), "{e}");
    let vars = vec![("FERRY_SHM_RING_SLOTS".to_string(), "3".to_string())];
    let e = Config::load(None, &vars).unwrap_err().to_string();
    assert!(
        e.contains("FERRY_SHM_RING_SLOTS=3: `shm.ring_slots`"),
        "{e}"
    );
    let vars = vec![("FERRY_TCP_ADDRESSES".to_string(), "[\"x\"]".to_string())];
    let e = Config::load(None, &vars).unwrap_err().to_string();
    assert!(e.contains("FERRY_TCP_ADDRESSES="), "{e}");
}

#[test]
fn integers_beyond_toml_range_are_range_errors() {
    let big = u64::MAX.to_string();
    let vars = vec![("FERRY_TCP_MAX_MESSAGE_BYTES".to_string(), big.clone())];
    let e = Config::load(None, &vars).unwrap_err().to_string();
    assert!(!e.contains("invalid type"), "{e}");
    assert!(
        e.contains(&format!("FERRY_TCP_MAX_MESSAGE_BYTES={big}")),
        "{e}"
    );
    assert!(e.contains("out of range"), "{e}");
    assert!(e.contains(&i64::MAX.to_string()), "{e}");
    // i64::MAX itself fits.
    let vars = vec![(
        "FERRY_TCP_MAX_MESSAGE_BYTES".to_string(),
        i64::MAX.to_string(),
    )];
    assert_eq!(
        Config::load(None, &vars).unwrap().tcp.max_message_bytes,
        i64::MAX as u64
    );
    let e = Config::from_toml(&format!("[tcp]\n\nmax_message_bytes = {big}\n"), "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("f.toml, line 3: `max_message_bytes`"), "{e}");
    assert!(e.contains(&i64::MAX.to_string()), "{e}");
}

#[test]
fn watcher_sees_a_changed_address_and_reports_a_broken_file() {
    let dir = std::env::temp_dir().join(format!("ferry-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("job.toml");
    std::fs::write(
        &file,
        "[tcp]\naddresses = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\n",
    )
    .unwrap();
    let vars = vec![("FERRY_TCP_CONNECTION_CAP".to_string(), "2".to_string())];
    let mut w = ConfigWatcher::new(Some(file.clone()), vars, Duration::ZERO);
    assert!(w.poll().is_none(), "unchanged file must not reload");
    // A rank moved to another port while the job runs (000 §5.1).
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(
        &file,
        "[tcp]\naddresses = [\"127.0.0.1:7000\", \"127.0.0.1:7101\"]\n",
    )
    .unwrap();
    let c = w.poll().expect("changed file reloads").unwrap();
    assert_eq!(c.tcp.addresses[1], "127.0.0.1:7101");
    assert_eq!(c.tcp.connection_cap, 2, "overrides apply to re-reads too");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&file, "[tcp]\naddreses = []\n").unwrap();
    let e = w.poll().expect("changed file reloads").unwrap_err();
    assert!(e.to_string().contains("addreses"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn environment_overrides_file_and_is_checked() {
    let vars = vec![
        ("FERRY_TCP_CONNECTION_CAP".to_string(), "2".to_string()),
        ("FERRY_RANK".to_string(), "3".to_string()),
    ];
    let c = Config::load(None, &vars).unwrap();
    assert_eq!(c.tcp.connection_cap, 2);
    let vars = vec![("FERRY_TCP_NO_SUCH_KEY".to_string(), "1".to_string())];
    let e = Config::load(None, &vars).unwrap_err();
    assert!(e.to_string().contains("no_such_key"), "{e}");
    let vars = vec![("FERRY_SHM_SINGLE_COPY".to_string(), "off".to_string())];
    assert_eq!(
        Config::load(None, &vars).unwrap().shm.single_copy,
        SingleCopy::Off
    );
}

#[test]
fn the_launchers_cpu_count_is_read_strictly() {
    assert_eq!(job_cpus(None), None);
    assert_eq!(job_cpus(Some("1")), Some(1));
    assert_eq!(job_cpus(Some(" 8\n")), Some(8));
    assert_eq!(job_cpus(Some("0")), None, "no CPUs is not a count");
    assert_eq!(job_cpus(Some("two")), None);
}
