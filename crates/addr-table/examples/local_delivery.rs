//! How a dataplane embeds `addr-table`: the control plane mirrors a namespace's addresses
//! (`RTM_NEWADDR` / `RTM_DELADDR`) while run loops ask, per packet, "is this destination one of
//! ours, and on which interface?" (`__ip_dev_find`) and "is this source one of ours?" (a
//! martian), and pick the source of an ICMP error (`inet_select_addr`), each batch under one
//! epoch pin.
//!
//! The control thread adds 20,000 addresses (the table grows through several resizes) and
//! removes them again while two run loops look up addresses that are always there and
//! addresses that never are: a wrong answer at any point during the resizes fails the example.
//!
//! ```sh
//! cargo run -p addr-table --example local_delivery
//! ```

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use addr_table::{AddrWriter, IfAddr, NetnsId, Scope, crossbeam_epoch};

/// Addresses the control thread adds and removes (256 per interface, from interface 10 on).
const CHURN: u32 = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut table = AddrWriter::new(NetnsId(1));
    table.add(IfAddr::new(Ipv4Addr::new(127, 0, 0, 1), 8, 1).with_scope(Scope::HOST))?;
    table.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 10), 24, 2))?;
    table.add(IfAddr::new(Ipv4Addr::new(198, 51, 100, 1), 24, 3))?;

    let done = Arc::new(AtomicBool::new(false));
    let run_loops: Vec<_> = (0..2)
        .map(|_| {
            let (table, done) = (Arc::clone(table.reader()), Arc::clone(&done));
            std::thread::spawn(move || -> Result<u64, String> {
                let mut packets = 0u64;
                while !done.load(Ordering::Acquire) {
                    let guard = crossbeam_epoch::pin(); // once per batch
                    for i in 0..64u8 {
                        // A packet for us, on interface 2: deliver locally.
                        let ours = table.dev_find(Ipv4Addr::new(192, 0, 2, 10), None, &guard);
                        // A packet to forward: its destination is nobody's address here.
                        let transit = table.dev_find(Ipv4Addr::new(203, 0, 113, i), None, &guard);
                        // An ICMP error out of interface 2 takes its source from there.
                        let icmp_src = table.select_src_v4(
                            2,
                            Some(Ipv4Addr::new(192, 0, 2, 77)),
                            Scope::UNIVERSE,
                            &guard,
                        );
                        if ours != Some(2)
                            || transit.is_some()
                            || icmp_src != Some(Ipv4Addr::new(192, 0, 2, 10))
                        {
                            return Err(format!("{ours:?} {transit:?} {icmp_src:?}"));
                        }
                        packets += 1;
                    }
                }
                Ok(packets)
            })
        })
        .collect();

    let churn = |i: u32| Ipv4Addr::from(0x0a00_0000 + i);
    for i in 0..CHURN {
        table.add(IfAddr::new(churn(i), 32, 10 + i / 256))?;
    }
    let grown = table.len::<Ipv4Addr>();
    for i in 0..CHURN {
        table.remove(churn(i), 32, 10 + i / 256)?;
    }
    done.store(true, Ordering::Release);
    for run_loop in run_loops {
        let packets = run_loop.join().expect("run loop panicked")?;
        println!("a run loop checked {packets} packets while the table grew and shrank");
    }
    println!(
        "{grown} addresses at the peak, {} now",
        table.len::<Ipv4Addr>()
    );
    assert_eq!(table.len::<Ipv4Addr>(), 3);
    Ok(())
}
