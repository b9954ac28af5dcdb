//! How a dataplane embeds `neigh-table`: the control plane mirrors links and neighbours (NUD
//! state changes as the kernel reports them), a run loop builds each frame's Ethernet header
//! from them under its batch's epoch pin, and parks frames whose next hop has no usable MAC
//! until the neighbour table's generation moves.
//!
//! The control thread walks a gateway through `INCOMPLETE → REACHABLE → STALE → FAILED` and
//! back; the run loop checks that it only ever writes a MAC the table held in a valid state,
//! and that every parked frame leaves once the neighbour resolves.
//!
//! ```sh
//! cargo run -p neigh-table --example next_hop_macs
//! ```

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use neigh_table::{Link, LinkFlags, LinkWriter, NeighWriter, Neighbour, NudState, OperState};

const EGRESS: u32 = 2;
const GATEWAY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn main() -> Result<(), String> {
    let mut links = LinkWriter::new();
    // The control thread takes the neighbour table's writer; the run loop holds the table.
    let neigh_writer = NeighWriter::new();
    let neigh = Arc::clone(neigh_writer.reader());
    let gateway = Ipv4Addr::new(192, 0, 2, 1);
    let mut link = Link {
        mac: Some(OUR_MAC),
        mtu: 1500,
        ..Link::new(EGRESS, "eth1")
    };
    (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
    links.upsert(link);

    let done = Arc::new(AtomicBool::new(false));
    let control = {
        let (mut neigh, done) = (neigh_writer, Arc::clone(&done));
        std::thread::spawn(move || {
            let states = [
                (NudState::INCOMPLETE, None),
                (NudState::REACHABLE, Some(GATEWAY_MAC)),
                (NudState::STALE, Some(GATEWAY_MAC)),
                (NudState::FAILED, None),
            ];
            for round in 0..2_000 {
                let (state, mac) = states[round % states.len()];
                neigh.upsert(Neighbour::new(EGRESS, IpAddr::V4(gateway), mac, state));
                // The kernel's state changes come milliseconds apart, not back to back.
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            // Settle on REACHABLE, as after a successful resolution.
            neigh.upsert(Neighbour::new(
                EGRESS,
                IpAddr::V4(gateway),
                Some(GATEWAY_MAC),
                NudState::REACHABLE,
            ));
            done.store(true, Ordering::Release);
        })
    };

    // The run loop: a parked frame remembers the neighbour generation it waited at.
    let (mut sent, mut parked, mut parked_at) = (0u64, 0u64, None::<u64>);
    loop {
        let finished = done.load(Ordering::Acquire);
        // Read before looking: a change after this point makes a parked frame look again.
        let generation = neigh.generation();
        let guard = neigh_table::crossbeam_epoch::pin(); // once per batch
        if let Some(at) = parked_at {
            if neigh.generation() == at {
                continue; // nothing changed: do not look again (cheap, no lookups)
            }
            parked_at = None;
        }
        for _ in 0..64 {
            let src = links
                .get(EGRESS, &guard)
                .filter(|l| l.is_up())
                .and_then(|l| l.mac)
                .ok_or("egress link vanished")?;
            match neigh.lookup_v4(EGRESS, gateway, &guard) {
                Some(n) => match n.usable_mac() {
                    Some(dst) => {
                        if !n.state.is_valid() || dst != GATEWAY_MAC || src != OUR_MAC {
                            return Err(format!("wrote {dst:x?} from {:?}", n.state));
                        }
                        sent += 1;
                    }
                    None => {
                        // INCOMPLETE/FAILED: hold the frame, ask for resolution (xfwd sends
                        // RTM_NEWNEIGH with NTF_USE), look again when the table changes.
                        parked += 1;
                        parked_at = Some(generation);
                        break;
                    }
                },
                None => {
                    parked += 1;
                    parked_at = Some(generation);
                    break;
                }
            }
        }
        if finished && parked_at.is_none() {
            break;
        }
    }
    control.join().map_err(|_| "control thread panicked")?;
    let guard = neigh_table::crossbeam_epoch::pin();
    let final_state = neigh.lookup_v4(EGRESS, gateway, &guard).map(|n| n.state);
    assert_eq!(final_state, Some(NudState::REACHABLE));
    println!("{sent} frames sent with a valid MAC, {parked} parked until the neighbour changed");
    Ok(())
}
