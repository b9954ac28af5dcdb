//! Readiness for service managers: the `sd_notify(3)` protocol of systemd's `Type=notify`
//! units, without libsystemd. When `NOTIFY_SOCKET` names a Unix datagram socket (a path, or
//! an abstract name written `@name`), state changes are sent there as `KEY=value` lines;
//! without it (not started by a service manager) nothing is sent.
//!
//! xfwd reports `READY=1` once the mirror is synchronised, the XDP program attached to every
//! interface and the run loops started, and `STOPPING=1` when it begins to shut down.
#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::io;
use std::os::unix::net::UnixDatagram;

/// The environment variable a service manager sets to its notification socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (newline-separated `KEY=value` assignments) to the socket named by
/// `NOTIFY_SOCKET`; `Ok(false)` when the variable is unset (no service manager listens).
///
/// # Errors
/// When the socket cannot be reached (the service manager would then time the unit out).
pub fn notify(state: &str) -> io::Result<bool> {
    match std::env::var_os(NOTIFY_SOCKET) {
        Some(socket) => notify_to(&socket, state).map(|()| true),
        None => Ok(false),
    }
}

/// Sends `state` to the notification socket `socket`: a filesystem path, or `@name` for the
/// abstract name `name`.
///
/// ```
/// use std::os::unix::net::UnixDatagram;
///
/// let dir = std::env::temp_dir().join(format!("xfwd-notify-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("notify");
/// let manager = UnixDatagram::bind(&path)?;
/// forwarder::notify::notify_to(path.as_os_str(), "READY=1")?;
/// let mut buf = [0u8; 64];
/// let n = manager.recv(&mut buf)?;
/// assert_eq!(&buf[..n], b"READY=1");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// An empty or relative name, or the failing `sendto`.
pub fn notify_to(socket: &OsStr, state: &str) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let sender = UnixDatagram::unbound()?;
    let bytes = socket.as_bytes();
    match bytes.first() {
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt as _;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])?;
            sender.send_to_addr(state.as_bytes(), &address)?;
        }
        Some(b'/') => {
            sender.send_to(state.as_bytes(), socket)?;
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{NOTIFY_SOCKET}={socket:?} is neither an absolute path nor @abstract"),
            ));
        }
    }
    Ok(())
}

/// Tells the service manager that xfwd is ready (`READY=1`, with a status line); a failure is
/// logged, not fatal (xfwd forwards either way).
pub fn ready(status: &str) {
    let state = format!("READY=1\nSTATUS={status}\nMAINPID={}", std::process::id());
    match notify(&state) {
        Ok(true) => tracing::debug!("told the service manager: ready"),
        Ok(false) => {}
        Err(e) => tracing::warn!("cannot notify the service manager of readiness: {e}"),
    }
}

/// Tells the service manager that xfwd is stopping (`STOPPING=1`).
pub fn stopping() {
    if let Err(e) = notify("STOPPING=1") {
        tracing::warn!("cannot notify the service manager of the stop: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_and_path_sockets() {
        use std::os::linux::net::SocketAddrExt as _;
        let name = format!("xfwd-notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let manager = UnixDatagram::bind_addr(&address).unwrap();
        notify_to(OsStr::new(&format!("@{name}")), "READY=1\nSTATUS=x").unwrap();
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x");

        for bad in ["", "relative/path"] {
            let error = notify_to(OsStr::new(bad), "READY=1").unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        }
        // Nobody listening there: an error, which `ready` logs.
        assert!(notify_to(OsStr::new("/nonexistent/xfwd-notify"), "READY=1").is_err());
    }
}
