//! AF_XDP smoke test (privileged): proves on every run that the system dependencies, bpffs and
//! the kernel's AF_XDP support work.
//!
//! In two throwaway namespaces joined by a veth pair, an xsk-rs socket is bound to queue 0 of
//! one end (native XDP, copy mode: veth has no zero-copy) and a UDP frame, crafted byte by byte,
//! is sent from the other end through a raw packet socket. The socket must receive exactly the
//! bytes that were sent.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use xfwd_lab::netns::Netns;
use xsk_rs::config::{BindFlags, SocketConfig, UmemConfig, XdpFlags};
use xsk_rs::{Socket, Umem};

const RX_IF: &str = "xsk-rx";
const TX_IF: &str = "xsk-tx";
const RX_MAC: [u8; 6] = [0x02, 0x58, 0x46, 0x00, 0x10, 0x01];
const TX_MAC: [u8; 6] = [0x02, 0x58, 0x46, 0x00, 0x10, 0x02];
const DST_PORT: u16 = 47_001;
const FRAMES: u32 = 64;
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The frame under test: Ethernet, IPv4, UDP, and a payload that names the run.
fn crafted_frame() -> Vec<u8> {
    let payload = format!("xfwd AF_XDP smoke test, pid {}", std::process::id());
    let builder = PacketBuilder::ethernet2(TX_MAC, RX_MAC)
        .ipv4([198, 18, 9, 2], [198, 18, 9, 1], 64)
        .udp(47_000, DST_PORT);
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut frame, payload.as_bytes()).unwrap();
    frame
}

/// Whether a received frame is the test's UDP datagram (by destination port); other traffic on
/// the link, such as IPv6 router solicitations, does not count.
fn is_probe(frame: &[u8]) -> bool {
    matches!(
        SlicedPacket::from_ethernet(frame).map(|p| p.transport),
        Ok(Some(TransportSlice::Udp(udp))) if udp.destination_port() == DST_PORT
    )
}

/// Turns IPv6 off for interfaces created later in the calling thread's namespace, so that the
/// link carries nothing but the probe.
fn quiet_namespace() -> std::io::Result<()> {
    std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1")?;
    std::fs::write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1")
}

/// Binds an AF_XDP socket to queue 0 of [`RX_IF`], signals `ready`, and returns the first
/// probe frame received, with the number of other frames seen before it.
fn receive_probe(ready: mpsc::Sender<()>, done: &AtomicBool) -> Result<(Vec<u8>, usize), String> {
    let frames = NonZeroU32::new(FRAMES).unwrap();
    let (umem, mut descs) =
        Umem::new(UmemConfig::default(), frames, false).map_err(|e| format!("UMEM: {e}"))?;
    let config = SocketConfig::builder()
        .xdp_flags(XdpFlags::XDP_FLAGS_DRV_MODE)
        .bind_flags(BindFlags::XDP_COPY)
        .build();
    let interface = RX_IF.parse().map_err(|e| format!("{RX_IF}: {e:?}"))?;
    // SAFETY: the UMEM is not shared with another socket, so libxdp may load and later detach
    // its own XDP program on this (device, queue).
    let (_tx, mut rx, fill_and_comp) = unsafe { Socket::new(config, &umem, &interface, 0) }
        .map_err(|e| format!("AF_XDP socket on {RX_IF}: {e}"))?;
    let (mut fill, _comp) = fill_and_comp.ok_or("the first socket of a UMEM gets its fill ring")?;
    // SAFETY: every descriptor comes from `umem` and none is in use yet: handing them all to
    // the kernel is the one place they are owned now.
    let produced = unsafe { fill.produce(&descs) };
    if produced != descs.len() {
        return Err(format!(
            "fill ring took {produced} of {} frames",
            descs.len()
        ));
    }
    ready.send(()).map_err(|e| e.to_string())?;

    let deadline = Instant::now() + RECEIVE_TIMEOUT;
    let mut others = 0;
    while Instant::now() < deadline {
        // SAFETY: `descs` only receives descriptors the kernel hands back from `umem`'s frames;
        // their memory is not written by us while the kernel owns it.
        let received =
            unsafe { rx.poll_and_consume(&mut descs, 100) }.map_err(|e| format!("poll: {e}"))?;
        for desc in &descs[..received] {
            // SAFETY: `desc` was just consumed from the RX ring of a socket on `umem`, so the
            // kernel is done writing its frame, and we do not refill it before reading.
            let data = unsafe { umem.data(desc) };
            if is_probe(data.contents()) {
                done.store(true, Ordering::Release);
                return Ok((data.contents().to_vec(), others));
            }
            others += 1;
        }
        // SAFETY: the frames just read are no longer referenced; they go back to the kernel.
        unsafe { fill.produce(&descs[..received]) };
    }
    Err(format!(
        "no probe frame within {RECEIVE_TIMEOUT:?} ({others} other frames)"
    ))
}

/// Sends `frame` out of [`TX_IF`] through an AF_PACKET socket (no kernel headers added).
fn send_raw(frame: &[u8]) -> std::io::Result<()> {
    let ifindex = nix::net::if_::if_nametoindex(TX_IF)?;
    // SAFETY: plain socket(2) call; the descriptor is owned by `fd` right away.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid descriptor that nothing else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value to fill in.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_IP as u16).to_be();
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&RX_MAC);
    // SAFETY: `frame` is valid for `frame.len()` bytes and `addr` is a sockaddr_ll of the size
    // passed; sendto reads both and keeps neither.
    let sent = unsafe {
        libc::sendto(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    match sent {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        n if n as usize == frame.len() => Ok(()),
        n => Err(std::io::Error::other(format!(
            "sent {n} of {} bytes",
            frame.len()
        ))),
    }
}

#[test]
fn afxdp_socket_receives_the_exact_frame_sent() {
    if !xfwd_lab::privileged("afxdp_socket_receives_the_exact_frame_sent") {
        return;
    }
    let lab = xfwd_lab::Lab::unique("xsk").unwrap();
    let rx_ns = Netns::create(&format!("{}-rx", lab.prefix())).unwrap();
    let tx_ns = Netns::create(&format!("{}-tx", lab.prefix())).unwrap();
    for ns in [&rx_ns, &tx_ns] {
        ns.run(quiet_namespace).unwrap().unwrap();
    }
    tx_ns
        .add_veth(TX_IF, TX_MAC, rx_ns.name(), RX_IF, RX_MAC)
        .unwrap();
    tx_ns.ip(["link", "set", TX_IF, "up"]).unwrap();
    rx_ns.ip(["link", "set", RX_IF, "up"]).unwrap();

    let frame = crafted_frame();
    let done = AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel();
    let received = std::thread::scope(|scope| {
        let receiver = scope.spawn(|| rx_ns.run(|| receive_probe(ready_tx, &done)));
        ready_rx
            .recv_timeout(RECEIVE_TIMEOUT)
            .expect("the AF_XDP socket never became ready");
        // Send until the receiver has it: the first frame may race the link's carrier.
        let sender = tx_ns.run(|| {
            for _ in 0..50 {
                send_raw(&frame)?;
                std::thread::sleep(Duration::from_millis(100));
                if done.load(Ordering::Acquire) {
                    break;
                }
            }
            Ok::<_, std::io::Error>(())
        });
        sender.unwrap().expect("sending the crafted frame");
        receiver.join().unwrap().unwrap()
    });
    let (bytes, others) = received.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        bytes, frame,
        "the AF_XDP socket received other bytes than were sent"
    );
    eprintln!(
        "received the {}-byte frame intact ({others} other frames)",
        bytes.len()
    );
}
