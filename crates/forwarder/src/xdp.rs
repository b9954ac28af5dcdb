//! xfwd's XDP program (`bpf/xfwd.bpf.c`, built by `build.rs`), loaded and attached with aya.
//!
//! The program passes ARP, IPv6 neighbour discovery, multicast, link-local and packets to the
//! forwarder's own addresses to the kernel and redirects every other IPv4/IPv6 frame to the
//! AF_XDP socket of its receive queue (the map `xsks`). The maps `local_v4` / `local_v6` hold
//! the local addresses; [`XdpProgram::add_local`] and [`XdpProgram::remove_local`] keep them
//! in step with the kernel.
//!
//! Attachment uses a BPF link (kernel 5.9 and newer): closing the link's descriptor detaches
//! the program, so it also goes away when the process is killed with SIGKILL. A program that
//! was attached the old way (netlink) and is named like ours is taken for a leftover and
//! replaced; any other program on the interface is an error.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::RawFd;

use aya::Ebpf;
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, XskMap};
use aya::programs::{Xdp, XdpFlags, xdp::XdpLinkId};
use thiserror::Error;

use crate::rtnl;

/// The compiled XDP program.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xfwd.bpf.o"));

/// The program's name in the object file and in the kernel (`bpftool prog`, `ip link`).
pub const PROGRAM_NAME: &str = "xfwd_xdp";

pub use xfwd_config::{MAX_PORTS, QUEUES_PER_PORT};

/// The program's per-CPU counters, in the order of `enum counter` in `bpf/xfwd.bpf.c`.
pub const XDP_COUNTERS: [&str; 10] = [
    "redirect",
    "no_socket",
    "pass_arp",
    "pass_nd",
    "pass_local",
    "pass_multicast",
    "pass_link_local",
    "pass_other",
    "local_udp",
    "pass_diverted",
];

/// What can go wrong with the XDP program.
#[derive(Debug, Error)]
pub enum XdpError {
    /// The embedded object did not load (verifier, missing map support, permissions).
    #[error("loading the XDP program: {0}")]
    Load(String),
    /// Attaching to an interface failed.
    #[error("attaching the XDP program to {iface}: {reason}")]
    Attach {
        /// The interface.
        iface: String,
        /// Why.
        reason: String,
    },
    /// Another XDP program that is not a leftover of ours holds the interface.
    #[error(
        "{iface} already runs XDP program {id} ({name}); detach it first (`ip link set dev {iface} xdp off`)"
    )]
    Foreign {
        /// The interface.
        iface: String,
        /// The kernel's program id.
        id: u32,
        /// The program's name.
        name: String,
    },
    /// A live xfwd (a BPF link, which netlink cannot detach) holds the interface.
    #[error(
        "{iface} is held by a running xfwd (program {id} attached through a BPF link); stop it first"
    )]
    Busy {
        /// The interface.
        iface: String,
        /// The kernel's program id.
        id: u32,
    },
    /// A map operation failed.
    #[error("XDP map {map}: {reason}")]
    Map {
        /// The map.
        map: &'static str,
        /// Why.
        reason: String,
    },
}

/// The loaded program, its attachments and its maps. Dropping it detaches the program from
/// every interface.
pub struct XdpProgram {
    ebpf: Ebpf,
    links: HashMap<u32, XdpLinkId>,
    xsks: XskMap<MapData>,
    ports: BpfHashMap<MapData, u32, u32>,
    local_v4: BpfHashMap<MapData, u32, u8>,
    local_v6: BpfHashMap<MapData, [u8; 16], u8>,
    udp_ports: BpfHashMap<MapData, u16, u8>,
    divert: aya::maps::Array<MapData, u32>,
    counters: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("attached", &self.links.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> XdpError {
    move |e| XdpError::Map {
        map,
        reason: e.to_string(),
    }
}

impl XdpProgram {
    /// Loads the program into the kernel (not attached anywhere yet).
    ///
    /// # Errors
    /// [`XdpError::Load`] when the kernel refuses it.
    pub fn load() -> Result<Self, XdpError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| XdpError::Load(format!("{e:#}")))?;
        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| XdpError::Load(format!("no program {PROGRAM_NAME} in the object")))?
            .try_into()
            .map_err(|e| XdpError::Load(format!("{e}")))?;
        program.load().map_err(|e| XdpError::Load(verbose(&e)))?;
        let take = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name)
                .ok_or_else(|| XdpError::Load(format!("no map {name} in the object")))
        };
        let xsks = XskMap::try_from(take(&mut ebpf, "xsks")?).map_err(map_error("xsks"))?;
        let ports = BpfHashMap::try_from(take(&mut ebpf, "ports")?).map_err(map_error("ports"))?;
        let local_v4 =
            BpfHashMap::try_from(take(&mut ebpf, "local_v4")?).map_err(map_error("local_v4"))?;
        let local_v6 =
            BpfHashMap::try_from(take(&mut ebpf, "local_v6")?).map_err(map_error("local_v6"))?;
        let udp_ports =
            BpfHashMap::try_from(take(&mut ebpf, "udp_ports")?).map_err(map_error("udp_ports"))?;
        let divert =
            aya::maps::Array::try_from(take(&mut ebpf, "divert")?).map_err(map_error("divert"))?;
        let counters =
            PerCpuArray::try_from(take(&mut ebpf, "counters")?).map_err(map_error("counters"))?;
        Ok(XdpProgram {
            ebpf,
            links: HashMap::new(),
            xsks,
            ports,
            local_v4,
            local_v6,
            udp_ports,
            divert,
            counters,
        })
    }

    /// Attaches the program to `iface` in native (driver) mode, or generic (skb) mode when
    /// `generic` is set. A leftover of ours attached through netlink is detached first.
    ///
    /// # Errors
    /// [`XdpError::Foreign`] or [`XdpError::Busy`] when another program holds the interface,
    /// [`XdpError::Attach`] for other failures.
    pub fn attach(&mut self, iface: &str, ifindex: u32, generic: bool) -> Result<(), XdpError> {
        if let Some(attached) = attached_program(iface) {
            if attached.name != PROGRAM_NAME {
                return Err(XdpError::Foreign {
                    iface: iface.to_owned(),
                    id: attached.id,
                    name: attached.name,
                });
            }
            tracing::warn!(
                iface,
                id = attached.id,
                "replacing a leftover {PROGRAM_NAME} (an earlier xfwd that did not detach)"
            );
            let off = rtnl::detach_xdp(ifindex, attached.mode);
            if let Some(still) = attached_program(iface) {
                tracing::warn!(iface, ?off, "could not detach the leftover");
                return Err(XdpError::Busy {
                    iface: iface.to_owned(),
                    id: still.id,
                });
            }
        }
        let flags = if generic {
            XdpFlags::SKB_MODE
        } else {
            XdpFlags::DRV_MODE
        };
        let program: &mut Xdp = self
            .ebpf
            .program_mut(PROGRAM_NAME)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| XdpError::Load("program vanished".to_owned()))?;
        let link = program.attach_to_if_index(ifindex, flags).map_err(|e| {
            let mut reason = verbose(&e);
            if !generic && reason.contains("os error 28") {
                // veth refuses native XDP with ENOSPC when its peer could send on a queue
                // it has no NAPI context for.
                reason.push_str(
                    " (a veth needs at least as many RX queues as its peer has TX queues)",
                );
            }
            XdpError::Attach {
                iface: iface.to_owned(),
                reason,
            }
        })?;
        self.links.insert(ifindex, link);
        Ok(())
    }

    /// Detaches the program from one interface (no-op when it is not attached there). When
    /// the interface is gone the kernel has already dropped the attachment.
    pub fn detach(&mut self, ifindex: u32) {
        if let Some(link) = self.links.remove(&ifindex) {
            if let Some(program) = self
                .ebpf
                .program_mut(PROGRAM_NAME)
                .and_then(|p| <&mut Xdp>::try_from(p).ok())
            {
                let _ = program.detach(link);
            }
        }
    }

    /// The interfaces the program is attached to.
    pub fn attached(&self) -> impl Iterator<Item = u32> + '_ {
        self.links.keys().copied()
    }

    /// Gives interface `ifindex` the block `slot` (< [`MAX_PORTS`]) of the XSKMAP.
    ///
    /// # Errors
    /// [`XdpError::Map`] when the slot is out of range or the map is full.
    pub fn set_port(&mut self, ifindex: u32, slot: u32) -> Result<(), XdpError> {
        if slot >= MAX_PORTS {
            return Err(XdpError::Map {
                map: "ports",
                reason: format!("slot {slot} >= {MAX_PORTS}"),
            });
        }
        self.ports
            .insert(ifindex, slot, 0)
            .map_err(map_error("ports"))
    }

    /// Forgets interface `ifindex` (its frames are passed to the kernel from now on).
    pub fn remove_port(&mut self, ifindex: u32) {
        let _ = self.ports.remove(&ifindex);
    }

    /// Puts the AF_XDP socket of receive queue `queue` of the interface in `slot` into the
    /// XSKMAP.
    ///
    /// # Errors
    /// [`XdpError::Map`] when the kernel refuses (out of range, not an XDP socket).
    pub fn set_socket(&mut self, slot: u32, queue: u32, fd: RawFd) -> Result<(), XdpError> {
        if slot >= MAX_PORTS || queue >= QUEUES_PER_PORT {
            return Err(XdpError::Map {
                map: "xsks",
                reason: format!("slot {slot} queue {queue} out of range"),
            });
        }
        self.xsks
            .set(slot * QUEUES_PER_PORT + queue, fd, 0)
            .map_err(map_error("xsks"))
    }

    /// Marks `addr` as local: the program passes packets to it to the kernel.
    ///
    /// # Errors
    /// [`XdpError::Map`] when the map is full.
    pub fn add_local(&mut self, addr: IpAddr) -> Result<(), XdpError> {
        match addr {
            IpAddr::V4(v4) => self
                .local_v4
                .insert(u32::from_ne_bytes(v4.octets()), 1, 0)
                .map_err(map_error("local_v4")),
            IpAddr::V6(v6) => self
                .local_v6
                .insert(v6.octets(), 1, 0)
                .map_err(map_error("local_v6")),
        }
    }

    /// Removes `addr` from the local set (no-op when absent).
    pub fn remove_local(&mut self, addr: IpAddr) {
        let _ = match addr {
            IpAddr::V4(v4) => self.local_v4.remove(&u32::from_ne_bytes(v4.octets())),
            IpAddr::V6(v6) => self.local_v6.remove(&v6.octets()),
        };
    }

    /// The addresses now in the local set.
    pub fn locals(&self) -> Vec<IpAddr> {
        let v4 = self
            .local_v4
            .keys()
            .flatten()
            .map(|k| IpAddr::from(k.to_ne_bytes()));
        let v6 = self.local_v6.keys().flatten().map(IpAddr::from);
        v4.chain(v6).collect()
    }

    /// Steers local UDP datagrams to `port` into user space (an in-dataplane endpoint holds
    /// it).
    ///
    /// # Errors
    /// [`XdpError::Map`] when the map refuses it.
    pub fn add_udp_port(&mut self, port: u16) -> Result<(), XdpError> {
        self.udp_ports
            .insert(port, 1, 0)
            .map_err(map_error("udp_ports"))
    }

    /// Local UDP datagrams to `port` go to the kernel again (no-op when absent).
    pub fn remove_udp_port(&mut self, port: u16) {
        let _ = self.udp_ports.remove(&port);
    }

    /// Sends every frame to the kernel (`on`), or decides per frame again: the program's
    /// `divert` switch ([`crate::bypass_watch`]). Frames passed meanwhile count as
    /// `pass_diverted`.
    ///
    /// # Errors
    /// [`XdpError::Map`] when the kernel refuses the update.
    pub fn set_divert(&mut self, on: bool) -> Result<(), XdpError> {
        self.divert
            .set(0, u32::from(on), 0)
            .map_err(map_error("divert"))
    }

    /// The UDP ports now steered to user space.
    pub fn udp_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.udp_ports.keys().flatten().collect();
        ports.sort_unstable();
        ports
    }

    /// The program's counters, summed over CPUs, in the order of [`XDP_COUNTERS`].
    pub fn counters(&self) -> [u64; XDP_COUNTERS.len()] {
        let mut out = [0; XDP_COUNTERS.len()];
        for (index, slot) in out.iter_mut().enumerate() {
            if let Ok(values) = self.counters.get(&(index as u32), 0) {
                *slot = values.iter().sum();
            }
        }
        out
    }
}

/// An error with its sources, for the log (the verifier log hides in the source chain).
fn verbose(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(next) = source {
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}

/// An XDP program attached to an interface, as `RTM_GETLINK` (`IFLA_XDP`) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedProgram {
    /// The kernel's program id.
    pub id: u32,
    /// The program's name (may be truncated to 15 characters by the kernel; empty when the
    /// program's information cannot be read, which needs `CAP_SYS_ADMIN` or `CAP_BPF`).
    pub name: String,
    /// How it is attached.
    pub mode: rtnl::XdpMode,
}

/// The XDP program attached to `iface` in the calling thread's namespace, if any: the link
/// through rtnetlink, the program's name through the bpf system call (no `ip` needed).
pub fn attached_program(iface: &str) -> Option<AttachedProgram> {
    let xdp = rtnl::link(iface).ok()?.xdp?;
    let name = aya::programs::loaded_programs()
        .flatten()
        .find(|program| program.id() == xdp.prog_id)
        .and_then(|program| program.name_as_str().map(str::to_owned))
        .unwrap_or_default();
    Some(AttachedProgram {
        id: xdp.prog_id,
        name,
        mode: xdp.mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_holds_the_program() {
        // The build embedded an ELF file (magic) that names our program.
        assert_eq!(&OBJECT[..4], b"\x7fELF");
        let name = PROGRAM_NAME.as_bytes();
        assert!(OBJECT.windows(name.len()).any(|w| w == name));
    }
}
