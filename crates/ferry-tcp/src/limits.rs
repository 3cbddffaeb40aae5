//! What the operating system bounds: descriptors (`RLIMIT_NOFILE`), how long the kernel keeps
//! a connection to an unreachable host (TCP user timeout and keepalive, from
//! `general.failure_timeout_ms`), and the congestion control of connections within one host.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

/// Keepalive probes sent before an idle connection's peer is declared unreachable.
const KEEPALIVE_PROBES: u32 = 3;

/// Makes the kernel report an unreachable peer host within `failure_timeout`, even while this
/// rank computes and sends nothing: unacknowledged data fails the connection after the
/// timeout (`TCP_USER_TIMEOUT`), and an idle connection is probed after half the timeout, then
/// [`KEEPALIVE_PROBES`] times over the other half (at least one second apart: the kernel
/// counts keepalive in seconds). A reachable peer answers the probes at the kernel level, so a
/// rank that computes for hours is never mistaken for a dead one.
pub(crate) fn set_liveness(sock: &TcpStream, failure_timeout: Duration) -> io::Result<()> {
    let s = SockRef::from(sock);
    let ft = failure_timeout.max(Duration::from_secs(1));
    let idle = (ft / 2).max(Duration::from_secs(1));
    let interval = (ft.saturating_sub(idle) / KEEPALIVE_PROBES).max(Duration::from_secs(1));
    let ka = TcpKeepalive::new()
        .with_time(idle)
        .with_interval(interval)
        .with_retries(KEEPALIVE_PROBES);
    s.set_tcp_keepalive(&ka)?;
    s.set_tcp_user_timeout(Some(failure_timeout))?;
    Ok(())
}

/// Congestion controllers for a connection between two processes of one host, in order of
/// preference; `reno` is the one every Linux kernel lets any process choose.
const LOCAL_CONGESTION: [&str; 2] = ["cubic", "reno"];

/// Whether a connection from `local` to `peer` stays within this host (loopback, or this
/// host's own address, which the kernel also routes over loopback).
pub(crate) fn same_host(local: IpAddr, peer: IpAddr) -> bool {
    peer.is_loopback() || peer == local
}

/// A connection to `peer` that stays within this host gets a congestion controller that does
/// not pace. A host configured for BBR (a common default) paces every connection at BBR's
/// estimate of the path's bandwidth; over loopback that estimate sat at 8-16 GB/s, and a
/// 2 MiB ping-pong took 1.3x as long as Open MPI's, 0.85x without pacing (docs/PERFORMANCE.md,
/// "TCP large messages: pacing on loopback"). There is no network to be fair to inside one
/// host. Returns the controller set; `None` when the connection leaves the host or the kernel
/// refused them all (the connection then works as before: this is only about speed).
pub(crate) fn set_local_congestion(sock: &TcpStream, peer: SocketAddr) -> Option<&'static str> {
    let local = sock.local_addr().ok()?;
    if !same_host(local.ip(), peer.ip()) {
        return None;
    }
    let s = SockRef::from(sock);
    LOCAL_CONGESTION
        .into_iter()
        .find(|name| s.set_tcp_congestion(name.as_bytes()).is_ok())
}

/// The soft limit of open files of this process, if there is one.
pub(crate) fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// The connection cap given the configured one and the open-file limit `nofile`: half of what
/// the limit leaves after a reserve for the program (a quarter of the limit, at least 8 and at
/// most 64 descriptors: standard streams, the poll set, the listener, the store connection,
/// the program's own files). Half, because connections that peers dial are accepted even at
/// the cap (a peer stuck in the backlog could wait for us while we wait for it) until idle ones
/// close. Never below 1.
pub(crate) fn connection_cap(configured: usize, nofile: Option<u64>) -> usize {
    let Some(limit) = nofile else {
        return configured.max(1);
    };
    let reserve = (limit / 4).clamp(8, 64);
    let room = limit.saturating_sub(reserve) / 2;
    configured
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// Whether `e` says this process (EMFILE) or the system (ENFILE) is out of descriptors.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(c) if c == rustix::io::Errno::MFILE.raw_os_error()
            || c == rustix::io::Errno::NFILE.raw_os_error()
    )
}

/// The text of an out-of-descriptors report: the cause, the limit, and what to change.
pub(crate) fn describe_out_of_descriptors(e: &io::Error, what: &str) -> String {
    let limit = open_file_limit().map_or("unlimited".to_string(), |l| l.to_string());
    format!(
        "too many open files: {what}: {e}; the soft limit of open files (RLIMIT_NOFILE) is \
         {limit} and no idle connection can be closed: raise it (ulimit -n) or lower \
         tcp.connection_cap"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn cap_leaves_room_for_the_program() {
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(1024, Some(16)), 4);
        assert_eq!(connection_cap(1024, Some(8)), 1);
        assert_eq!(connection_cap(1024, Some(1024)), 480);
        assert_eq!(connection_cap(1024, Some(1 << 20)), 1024);
        assert_eq!(connection_cap(3, Some(1 << 20)), 3);
    }

    #[test]
    fn liveness_options_reach_the_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_liveness(&s, Duration::from_millis(2500)).unwrap();
        let r = SockRef::from(&s);
        assert!(r.keepalive().unwrap());
        assert_eq!(r.keepalive_time().unwrap(), Duration::from_secs(1));
        assert_eq!(r.keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert_eq!(
            r.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(2500))
        );
    }

    #[test]
    fn connections_within_the_host_get_a_controller_that_does_not_pace() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let a = TcpStream::connect(to).unwrap();
        let (b, from) = l.accept().unwrap();
        for (sock, peer) in [(&a, to), (&b, from)] {
            let set = set_local_congestion(sock, peer).expect("a controller was set");
            let now = SockRef::from(sock).tcp_congestion().unwrap();
            // The kernel reports the name padded with NULs.
            let now = String::from_utf8_lossy(&now)
                .trim_end_matches('\0')
                .to_string();
            assert_eq!(now, set);
            assert!(LOCAL_CONGESTION.contains(&now.as_str()), "{now}");
        }
        // Only connections that stay within the host are changed.
        let other: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(set_local_congestion(&a, SocketAddr::new(other, 9)).is_none());
    }

    #[test]
    fn same_host_means_loopback_or_this_hosts_own_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_host(ip("127.0.0.1"), ip("127.0.0.1")));
        assert!(same_host(ip("10.1.2.3"), ip("127.0.0.2")));
        assert!(same_host(ip("::1"), ip("::1")));
        assert!(same_host(ip("10.1.2.3"), ip("10.1.2.3")));
        assert!(!same_host(ip("10.1.2.3"), ip("10.1.2.4")));
        assert!(!same_host(ip("127.0.0.1"), ip("192.0.2.1")));
    }

    #[test]
    fn emfile_is_recognised() {
        let e = io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        assert!(out_of_descriptors(&e));
        assert!(describe_out_of_descriptors(&e, "connect to rank 3").contains("RLIMIT_NOFILE"));
        assert!(!out_of_descriptors(&io::Error::from(
            io::ErrorKind::ConnectionRefused
        )));
    }
}
