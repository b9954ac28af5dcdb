//! The two ways out of a running instance: the local control socket (a unix socket;
//! `xfwd stats` asks it for a JSON [`Stats`]) and Prometheus text over HTTP
//! ([`metrics`](crate::metrics)).
//!
//! Both are served by one small thread each, polling a non-blocking listener so that they
//! notice the stop flag; neither touches the packet path (they read atomic counters).
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

pub use crate::query::Query;
use crate::stats::Stats;

/// Answers a [`Query`] from the running instance's tables: the text to print, or the error
/// to report (`route get` with no route).
pub type QueryFn = Arc<dyn Fn(&Query) -> Result<String, String> + Send + Sync>;

const ACCEPT_POLL: Duration = Duration::from_millis(100);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// A unix socket that is removed when dropped.
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` (creating its directory). A stale socket file (nobody answering) is
    /// replaced; a live one means another instance runs: an error.
    ///
    /// # Errors
    /// When another instance answers on `path`, or binding fails.
    pub fn bind(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                bail!(
                    "another xfwd answers on {}; stop it or pick another --control socket",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale {}", path.display()))?;
        }
        let listener =
            UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
        listener.set_nonblocking(true)?;
        Ok(ControlSocket {
            listener,
            path: path.to_owned(),
        })
    }

    /// Answers requests until `stop`: a line `stats` gets the JSON of `snapshot()`; a
    /// [`Query`] line gets `ok` or `error` on a line of its own, then the text of `query`
    /// (`error` too when there is no `query`: an instance without tables).
    pub fn serve(&self, snapshot: &dyn Fn() -> Stats, query: Option<&QueryFn>, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let _ = answer(stream, snapshot, query);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(ACCEPT_POLL);
                }
                Err(e) => {
                    tracing::warn!("control socket: {e}");
                    std::thread::sleep(ACCEPT_POLL);
                }
            }
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn answer(
    stream: UnixStream,
    snapshot: &dyn Fn() -> Stats,
    query: Option<&QueryFn>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let mut stream = &stream;
    match line.trim() {
        "stats" => {
            let json = serde_json::to_string(&snapshot()).map_err(std::io::Error::other)?;
            stream.write_all(json.as_bytes())?;
            stream.write_all(b"\n")
        }
        other => match (Query::parse(other), query) {
            (Some(q), Some(query)) => match query(&q) {
                Ok(text) => stream.write_all(format!("ok\n{text}").as_bytes()),
                Err(e) => stream.write_all(format!("error\n{e}\n").as_bytes()),
            },
            (Some(_), None) => stream.write_all(b"error\nthis instance has no tables (bare)\n"),
            (None, _) => stream.write_all(format!("error: unknown request {other:?}\n").as_bytes()),
        },
    }
}

/// Asks the instance behind `path` for its statistics.
///
/// # Errors
/// When nobody answers or the answer is not a [`Stats`].
pub fn query_stats(path: &Path) -> anyhow::Result<Stats> {
    let mut stream = UnixStream::connect(path).with_context(|| {
        format!(
            "connecting to {} (is xfwd running? with --netns, pass the same --netns)",
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.write_all(b"stats\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    serde_json::from_str(&text).with_context(|| format!("unexpected answer: {}", text.trim()))
}

/// Asks the instance behind `path` a [`Query`]: `None` when nobody answers there,
/// `Some(Ok(text))` or `Some(Err(message))` (an instance without tables, or `route get`
/// without a route) otherwise.
///
/// # Errors
/// When an instance answers with something that is not a query's answer.
pub fn query_tables(path: &Path, query: &Query) -> anyhow::Result<Option<Result<String, String>>> {
    let Ok(mut stream) = UnixStream::connect(path) else {
        return Ok(None);
    };
    stream.set_read_timeout(Some(CLIENT_TIMEOUT * 5))?;
    stream.write_all(format!("{}\n", query.line()).as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    match text.split_once('\n') {
        Some(("ok", rest)) => Ok(Some(Ok(rest.to_owned()))),
        Some(("error", rest)) => Ok(Some(Err(rest.trim_end().to_owned()))),
        _ => bail!("unexpected answer from {}: {}", path.display(), text.trim()),
    }
}

/// Serves Prometheus text (`GET /metrics`, or any path) until `stop`.
pub fn serve_metrics(listener: &TcpListener, snapshot: &dyn Fn() -> Stats, stop: &AtomicBool) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request);
                let body = crate::metrics::exposition(&snapshot());
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n{body}",
                    crate::metrics::CONTENT_TYPE,
                    body.len()
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Runs `f` on a named thread that is joined when the returned guard is dropped.
pub(crate) fn spawn_named(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .with_context(|| format!("spawning thread {name}"))
}

/// Keeps the snapshot function shareable across the serving threads.
pub(crate) type SnapshotFn = Arc<dyn Fn() -> Stats + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_socket_round_trip_and_cleanup() {
        let dir = std::env::temp_dir().join(format!("xfwd-ctl-test-{}", std::process::id()));
        let path = dir.join("t.sock");
        let socket = ControlSocket::bind(&path).unwrap();
        assert!(
            ControlSocket::bind(&path).is_err(),
            "a live socket is not replaced"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Stats {
            mode: "bare".into(),
            local_addresses: 7,
            ..Stats::default()
        };
        std::thread::scope(|scope| {
            let s = stats.clone();
            let server = scope.spawn(|| socket.serve(&move || s.clone(), None, &stop));
            let got = query_stats(&path).unwrap();
            assert_eq!(got, stats);
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap();
        });
        drop(socket);
        assert!(!path.exists(), "the socket file is removed on drop");
        // A stale file (nobody listening) is replaced.
        let listener = UnixListener::bind(&path).unwrap();
        drop(listener);
        assert!(path.exists());
        let again = ControlSocket::bind(&path).unwrap();
        drop(again);
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn queries_round_trip_over_the_control_socket() {
        use crate::query::Shown;
        use netlink_mirror::cli::RouteGetArgs;
        let route_get = Query::RouteGet {
            args: RouteGetArgs {
                addr: "192.0.2.1".parse().unwrap(),
                selectors: vec!["from".into(), "198.51.100.7".into()],
                netns: None,
            },
            json: false,
        };
        let json_show = Query::Show {
            what: Shown::Cache,
            json: true,
        };
        for query in [
            Query::Show {
                what: Shown::Nexthops,
                json: false,
            },
            json_show.clone(),
            route_get.clone(),
        ] {
            assert_eq!(Query::parse(&query.line()), Some(query.clone()));
        }
        assert_eq!(Query::parse("show everything"), None);
        assert_eq!(Query::parse("show links extra"), None);
        assert_eq!(Query::parse("json"), None);
        assert_eq!(Query::parse("route-get not-an-address"), None);

        let dir = std::env::temp_dir().join(format!("xfwd-query-test-{}", std::process::id()));
        let path = dir.join("q.sock");
        let socket = ControlSocket::bind(&path).unwrap();
        let stop = AtomicBool::new(false);
        let answer: QueryFn = Arc::new(|q: &Query| match q {
            Query::Show { what, json } => Ok(format!("{what:?} listed, json {json}\n")),
            Query::RouteGet { .. } => Err("RTNETLINK answers: Network is unreachable".into()),
        });
        std::thread::scope(|scope| {
            let server = scope.spawn(|| socket.serve(&Stats::default, Some(&answer), &stop));
            assert_eq!(
                query_tables(
                    &path,
                    &Query::Show {
                        what: Shown::Links,
                        json: false
                    }
                )
                .unwrap(),
                Some(Ok("Links listed, json false\n".into()))
            );
            assert_eq!(
                query_tables(&path, &json_show).unwrap(),
                Some(Ok("Cache listed, json true\n".into()))
            );
            assert_eq!(
                query_tables(&path, &route_get).unwrap(),
                Some(Err("RTNETLINK answers: Network is unreachable".into()))
            );
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap();
        });
        drop(socket);
        assert_eq!(
            query_tables(&path, &route_get).unwrap(),
            None,
            "nobody answers: the caller falls back"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn metrics_answer_http() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let server = scope.spawn(|| {
                serve_metrics(
                    &listener,
                    &|| Stats {
                        local_addresses: 3,
                        ..Stats::default()
                    },
                    &stop,
                )
            });
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
            assert!(text.contains("xfwd_local_addresses 3"), "{text}");
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap();
        });
    }
}
