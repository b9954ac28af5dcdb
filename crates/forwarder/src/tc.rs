//! Traffic control on the served devices, found at start so that xfwd can refuse to bypass it
//! (docs/forwarder.md, "What xfwd bypasses").
//!
//! The XDP program takes a served device's frames before tc's ingress hook, and AF_XDP
//! transmits past the device's qdisc and tc's egress hook. [`served_hooks`] lists what on a
//! served device would therefore never see forwarded traffic:
//!
//! - **filters** (any classifier: `u32`, `flower`, `bpf`, `matchall`, ...) on the device's
//!   `ingress` or `clsact` qdisc (both directions) or on any other qdisc of the device, shared
//!   filter blocks included (the kernel resolves them for the device's dump);
//! - **tcx programs** (BPF programs attached through `bpf_mprog`, kernel 6.6 and later:
//!   `SchedClassifier::attach` in tcx mode, Cilium), which no qdisc dump shows;
//! - **qdiscs that shape or schedule** (`htb`, `tbf`, `netem`, `cake`, `prio`, `mqprio`, ...):
//!   every qdisc other than the work-conserving queues a kernel installs by default or that
//!   `net.core.default_qdisc` can name ([`WORK_CONSERVING`]), whose only effect is the order
//!   and the drops under congestion that xfwd's own transmit ring replaces.
//!
//! Qdiscs are read with an `RTM_GETQDISC` dump and filters with one `RTM_GETTFILTER` dump per
//! qdisc (netlink-packet-route's `tc` types); a filter the crate cannot decode still counts.

use std::collections::BTreeSet;
use std::fmt;
use std::io;

use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};

/// The qdiscs whose bypass changes nothing but queueing under congestion: the kernel's
/// defaults (`noqueue`, `pfifo_fast`, `mq`), the FIFOs, and the fair-queueing AQMs
/// `net.core.default_qdisc` may name. `ingress` and `clsact` only hold filters, which are
/// checked on their own.
pub const WORK_CONSERVING: [&str; 9] = [
    "noqueue",
    "pfifo_fast",
    "pfifo",
    "bfifo",
    "pfifo_head_drop",
    "mq",
    "fq_codel",
    "fq",
    "sfq",
];

/// What on a served device xfwd would bypass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcHook {
    /// The device.
    pub device: String,
    /// Where it acts: `ingress`, `egress`, or the qdisc's handle (`1:`, `root`).
    pub point: String,
    /// What is there.
    pub what: TcFinding,
}

/// The kinds of [`TcHook`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TcFinding {
    /// Classifiers: how many filter lists (one per chain, priority and protocol), and their
    /// kinds (`?` for one the crate could not decode).
    Filters {
        /// Filter lists.
        lists: usize,
        /// Classifier kinds.
        kinds: BTreeSet<String>,
    },
    /// BPF programs attached through tcx, by name (or id).
    Tcx(Vec<String>),
    /// A qdisc outside [`WORK_CONSERVING`].
    Qdisc(String),
}

impl fmt::Display for TcHook {
    /// ```
    /// use forwarder::tc::{TcFinding, TcHook};
    /// let hook = TcHook {
    ///     device: "eth0".into(),
    ///     point: "ingress".into(),
    ///     what: TcFinding::Filters { lists: 2, kinds: ["flower".into(), "u32".into()].into() },
    /// };
    /// assert_eq!(hook.to_string(), "tc: eth0 ingress: 2 filter lists (flower, u32)");
    /// let qdisc = TcHook { device: "eth1".into(), point: "root".into(), what: TcFinding::Qdisc("htb".into()) };
    /// assert_eq!(qdisc.to_string(), "tc: eth1 root: qdisc htb");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tc: {} {}: ", self.device, self.point)?;
        match &self.what {
            TcFinding::Filters { lists, kinds } => {
                let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
                write!(
                    f,
                    "{lists} filter list{} ({})",
                    if *lists == 1 { "" } else { "s" },
                    kinds.join(", ")
                )
            }
            TcFinding::Tcx(programs) => write!(f, "tcx programs {}", programs.join(", ")),
            TcFinding::Qdisc(kind) => write!(f, "qdisc {kind}"),
        }
    }
}

/// Everything on the devices `served` (in the calling thread's namespace) that forwarded
/// traffic would bypass (see the module documentation), and the warnings of checks that
/// could not be made (tcx attachments without the privilege to read them).
///
/// ```no_run
/// // As root, in the forwarder's namespace:
/// let (hooks, _warnings) = forwarder::tc::served_hooks(&["eth0".into()])?;
/// for hook in hooks {
///     println!("{hook}");
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// A device that does not exist has nothing on it.
///
/// # Errors
/// When a dump fails.
pub fn served_hooks(served: &[String]) -> io::Result<(Vec<TcHook>, Vec<String>)> {
    let mut qdiscs = Vec::new();
    crate::rtnl::dump(
        RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
        |reply| {
            if let Ok(RouteNetlinkMessage::NewQueueDiscipline(q)) = reply {
                qdiscs.push(q);
            }
        },
    )?;
    let mut hooks = Vec::new();
    let mut warnings = Vec::new();
    for device in served {
        let index = match crate::rtnl::link(device) {
            Ok(link) => link.index,
            // Gone (a veth deleted and not yet re-created): nothing on it to bypass.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENODEV) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        for q in qdiscs.iter().filter(|q| q.header.index == index as i32) {
            let kind = kind_of(&q.attributes).unwrap_or_default();
            let parents: Vec<(String, TcHandle)> = match kind.as_str() {
                "ingress" => vec![("ingress".into(), clsact(TcHandle::MIN_INGRESS))],
                "clsact" => vec![
                    ("ingress".into(), clsact(TcHandle::MIN_INGRESS)),
                    ("egress".into(), clsact(TcHandle::MIN_EGRESS)),
                ],
                _ => {
                    let point = point_of(q);
                    if !WORK_CONSERVING.contains(&kind.as_str()) {
                        hooks.push(TcHook {
                            device: device.clone(),
                            point: point.clone(),
                            what: TcFinding::Qdisc(kind.clone()),
                        });
                    }
                    // A child queue without a handle of its own (`mq`'s per-queue qdiscs
                    // are `0:`) holds no filters: a dump for `0:` would read the root's.
                    if q.header.handle == TcHandle::UNSPEC && q.header.parent != TcHandle::ROOT {
                        vec![]
                    } else {
                        vec![(point, q.header.handle)]
                    }
                }
            };
            for (point, parent) in parents {
                if let Some(what) = filters(index, parent)? {
                    hooks.push(TcHook {
                        device: device.clone(),
                        point,
                        what,
                    });
                }
            }
        }
        for (point, attach) in [
            ("ingress", aya::programs::tc::TcAttachType::Ingress),
            ("egress", aya::programs::tc::TcAttachType::Egress),
        ] {
            match aya::programs::SchedClassifier::query_tcx(device, attach) {
                Ok((_, programs)) if !programs.is_empty() => hooks.push(TcHook {
                    device: device.clone(),
                    point: point.into(),
                    what: TcFinding::Tcx(
                        programs
                            .iter()
                            .map(|p| match p.name_as_str() {
                                Some(name) if !name.is_empty() => name.to_owned(),
                                _ => format!("id {}", p.id()),
                            })
                            .collect(),
                    ),
                }),
                Ok(_) => {}
                // EINVAL: a kernel without tcx (before 6.6), where nothing can be attached.
                Err(error) if tcx_unsupported(&error) => {}
                Err(error) => warnings.push(format!(
                    "tcx programs on {device} {point} not checked: {error}"
                )),
            }
        }
    }
    Ok((hooks, warnings))
}

/// The start-up check: `Ok` with what is bypassed (empty when there is nothing, or when
/// `bypass` allows it) and the warnings of [`served_hooks`], else the refusal naming it.
///
/// # Errors
/// [`Bypassed`] when something would be bypassed and `bypass` is false; an [`io::Error`]
/// (as `anyhow`) when the devices' tc state cannot be read.
pub fn check(served: &[String], bypass: bool) -> anyhow::Result<(Vec<TcHook>, Vec<String>)> {
    let (hooks, warnings) = served_hooks(served).map_err(|e| {
        anyhow::anyhow!("reading tc on the served devices (refusing to start): {e}")
    })?;
    if hooks.is_empty() || bypass {
        return Ok((hooks, warnings));
    }
    Err(Bypassed(hooks).into())
}

/// The refusal of [`check`]: what xfwd would bypass.
#[derive(Debug)]
pub struct Bypassed(pub Vec<TcHook>);

impl fmt::Display for Bypassed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "tc acts on the served devices, which xfwd would bypass (frames it forwards never \
             see tc filters, tcx programs or the device's qdisc):"
        )?;
        for hook in &self.0 {
            writeln!(f, "  {hook}")?;
        }
        write!(
            f,
            "remove them, or set `tc = \"bypass\"` in the configuration (--tc bypass) to forward \
             without them (docs/forwarder.md)"
        )
    }
}

impl std::error::Error for Bypassed {}

/// The `clsact`/`ingress` pseudo-class `minor` (`ffff:fff2` ingress, `ffff:fff3` egress).
fn clsact(minor: u16) -> TcHandle {
    TcHandle {
        major: TcHandle::CLSACT.major,
        minor,
    }
}

/// `root`, or the qdisc's handle as `tc` prints it (`1:`).
fn point_of(q: &TcMessage) -> String {
    if q.header.parent == TcHandle::ROOT {
        "root".into()
    } else {
        format!("qdisc {:x}:", q.header.handle.major)
    }
}

fn kind_of(attributes: &[TcAttribute]) -> Option<String> {
    attributes.iter().find_map(|a| match a {
        TcAttribute::Kind(kind) => Some(kind.clone()),
        _ => None,
    })
}

/// The filters attached under `parent` on device `index`, if any.
fn filters(index: u32, parent: TcHandle) -> io::Result<Option<TcFinding>> {
    let mut request = TcMessage::default();
    request.header.index = index as i32;
    request.header.parent = parent;
    let mut lists = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    crate::rtnl::dump(
        RouteNetlinkMessage::GetTrafficFilter(request),
        |reply| match reply {
            Ok(RouteNetlinkMessage::NewTrafficFilter(filter)) => {
                let chain = filter.attributes.iter().find_map(|a| match a {
                    TcAttribute::Chain(chain) => Some(*chain),
                    _ => None,
                });
                // `tcm_info`: the priority (high 16 bits) and protocol of the filter list.
                lists.insert((chain.unwrap_or(0), filter.header.info));
                kinds.insert(kind_of(&filter.attributes).unwrap_or_else(|| "?".into()));
            }
            Ok(_) => {}
            Err(bytes) => {
                // Undecodable: still a filter. `struct tcmsg` follows the 16-byte header;
                // its `tcm_info` is at offset 16 + 16.
                let info = bytes
                    .get(32..36)
                    .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                lists.insert((u32::MAX, info));
                kinds.insert("?".into());
            }
        },
    )?;
    Ok((!lists.is_empty()).then_some(TcFinding::Filters {
        lists: lists.len(),
        kinds,
    }))
}

/// Whether a tcx query failed because the kernel has no tcx (`EINVAL` from `BPF_PROG_QUERY`).
fn tcx_unsupported(error: &aya::programs::ProgramError) -> bool {
    matches!(
        error,
        aya::programs::ProgramError::SyscallError(e) if e.io_error.raw_os_error() == Some(libc::EINVAL)
    )
}
