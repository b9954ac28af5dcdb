//! How a dataplane embeds `udp-socktab`: the run loop finds the receiving socket of each
//! datagram addressed to a local address (`__udp4_lib_lookup`), under its batch's epoch pin,
//! while the control side opens, binds and closes sockets through the table's one [`Writer`].
//!
//! A tunnel endpoint: four workers share `0.0.0.0:4789` through `SO_REUSEPORT`, a management
//! socket is bound to one address on the same port, and a connected socket talks to one peer.
//! The example checks the kernel's rules: the bound address beats the wildcard, a flow hash
//! always picks the same worker, every worker gets a share, the connected socket takes only its
//! peer's datagrams, and a closed worker's flows move to the others.
//!
//! ```sh
//! cargo run -p udp-socktab --example udp_endpoints
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;

use udp_socktab::{
    Family, Lookup, NetnsConfig, SockId, SockOptions, SockTable, TableConfig, crossbeam_epoch,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (table, mut writer) = SockTable::new(TableConfig::default())?;
    let ns = writer.add_netns(NetnsConfig::default())?;
    writer.add_local_addr(ns, "192.0.2.1".parse()?, 2)?;
    writer.add_local_addr(ns, "192.0.2.2".parse()?, 2)?;
    let reuseport = SockOptions {
        reuseport: true,
        ..SockOptions::default()
    };
    let mut workers = Vec::new();
    for _ in 0..4 {
        let worker = writer.socket(ns, Family::V4, reuseport)?;
        writer.bind(worker, "0.0.0.0:4789".parse()?)?;
        workers.push(worker);
    }
    let management = writer.socket(ns, Family::V4, reuseport)?;
    writer.bind(management, "192.0.2.2:4789".parse()?)?;
    let peer: SocketAddr = "198.51.100.9:4789".parse()?;
    let connected = writer.socket(ns, Family::V4, SockOptions::default())?;
    writer.connect(connected, peer, "192.0.2.1".parse()?)?;
    let connected_port = writer
        .sock(connected)
        .ok_or("connected socket")?
        .local_addr()
        .port();

    // The run loop's side: one lookup per datagram, the flow hash from the NIC (RSS).
    let receiver = |src: SocketAddr, dst: SocketAddr, hash: u32| -> Option<SockId> {
        let guard = crossbeam_epoch::pin(); // a real run loop pins once per batch
        let key = Lookup {
            netns: ns,
            src,
            dst,
            ifindex: 2,
            hash,
            cpu: 0,
        };
        table.lookup(&key, &guard).map(|sock| sock.id())
    };
    let flow = |i: u32| -> SocketAddr {
        SocketAddr::from(([203, 0, 113, (i % 250) as u8], 10_000 + i as u16))
    };
    let hash = |i: u32| i.wrapping_mul(0x9e37_79b9);

    let tunnel: SocketAddr = "192.0.2.1:4789".parse()?;
    let mut share = BTreeMap::<SockId, u32>::new();
    let mut before = Vec::new();
    for i in 0..4_000 {
        let got = receiver(flow(i), tunnel, hash(i)).ok_or("no socket for the tunnel port")?;
        if !workers.contains(&got) || receiver(flow(i), tunnel, hash(i)) != Some(got) {
            return Err(
                format!("flow {i} went to {got:?}, or not always to the same worker").into(),
            );
        }
        *share.entry(got).or_default() += 1;
        before.push(got);
    }
    assert_eq!(
        share.len(),
        workers.len(),
        "every worker gets a share: {share:?}"
    );
    let mgmt = receiver(flow(1), "192.0.2.2:4789".parse()?, hash(1));
    assert_eq!(
        mgmt,
        Some(management),
        "the bound address beats the wildcard"
    );
    let to_connected = SocketAddr::from(([192, 0, 2, 1], connected_port));
    assert_eq!(receiver(peer, to_connected, 7), Some(connected));
    assert_eq!(
        receiver(flow(3), to_connected, 7),
        None,
        "a stranger cannot reach it"
    );

    // A worker exits: its flows go to the others; no flow lands on the closed socket.
    writer.close(workers[0])?;
    let moved = (0..4_000)
        .filter(|&i| {
            let got = receiver(flow(i), tunnel, hash(i));
            assert!(got.is_some() && got != Some(workers[0]));
            got != Some(before[i as usize])
        })
        .count();
    println!(
        "4 workers shared 4000 flows as {:?}; after one closed, {moved} flows moved",
        share.values().collect::<Vec<_>>()
    );
    Ok(())
}
