//! Helpers shared by xfwd's integration tests; the tests themselves are in `tests/tests/`.
//!
//! Privileged tests start with [`xfwd_lab::privileged`] and build their own lab or namespaces
//! with a unique prefix, removed when the test ends (also when it fails).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use xfwd_lab::{LabError, netns};

/// How long [`udp_probe`] waits for each of its datagrams.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How many datagrams [`udp_probe`] sends before giving up.
pub const PROBE_TRIES: usize = 3;

/// Why a probe failed.
#[derive(Debug)]
pub enum ProbeError {
    /// A namespace could not be entered.
    Lab(LabError),
    /// A socket call failed.
    Io(io::Error),
    /// Nothing arrived after [`PROBE_TRIES`] datagrams.
    Lost,
}

impl From<io::Error> for ProbeError {
    fn from(e: io::Error) -> Self {
        ProbeError::Io(e)
    }
}

impl From<LabError> for ProbeError {
    fn from(e: LabError) -> Self {
        ProbeError::Lab(e)
    }
}

/// Sends a UDP datagram from namespace `from` to `to` and receives it with a socket bound to
/// the unspecified address in namespace `at`; returns the sender's address as the receiver saw
/// it. Retries up to [`PROBE_TRIES`] times.
///
/// ```no_run
/// use xfwd_lab::{Lab, Role, topology::DST0};
///
/// let lab = Lab::unique("doc")?.up_scoped()?;
/// let seen = xfwd_tests::udp_probe(&lab.netns(Role::Src), &lab.netns(Role::Dst), DST0.ipv4.into());
/// # Ok::<(), xfwd_lab::LabError>(())
/// ```
pub fn udp_probe(from: &str, at: &str, to: IpAddr) -> Result<SocketAddr, ProbeError> {
    // A socket belongs to the namespace it was created in, whichever thread uses it later.
    let receiver = netns::run_in(at, || {
        UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)))
    })??;
    receiver.set_read_timeout(Some(PROBE_TIMEOUT))?;
    let port = receiver.local_addr()?.port();
    let local: IpAddr = match to {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let sender = netns::run_in(from, || UdpSocket::bind(SocketAddr::new(local, 0)))??;
    let payload = format!("xfwd probe to {to} port {port}");
    let mut buf = [0u8; 128];
    for _ in 0..PROBE_TRIES {
        sender.send_to(payload.as_bytes(), SocketAddr::new(to, port))?;
        match receiver.recv_from(&mut buf) {
            Ok((len, peer)) if &buf[..len] == payload.as_bytes() => return Ok(peer),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ProbeError::Lost)
}

/// The address as the receiver of [`udp_probe`] reports it: IPv4 senders appear v4-mapped on
/// its dual-stack socket.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}
