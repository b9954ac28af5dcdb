//! How a dataplane embeds `netlink-mirror`: start the mirror of a network namespace (its own
//! control thread follows the kernel from then on), wait for the first synchronisation, hand
//! the tables' `Arc`s to the run loops, and read them under an epoch pin.
//!
//! It mirrors the namespace it runs in (read-only: it changes nothing in the kernel) and checks
//! the copy against what the kernel says through another door: every interface of
//! `/proc/net/dev` is in the link table, and `127.0.0.1` routes as a `local` route through the
//! loopback device, as `ip route get 127.0.0.1` would say.
//!
//! ```sh
//! cargo run -p netlink-mirror --example mirror_namespace            # the current namespace
//! cargo run -p netlink-mirror --example mirror_namespace -- NAME    # a namespace under /run/netns
//! ```

use std::time::Duration;

use fib_trie::{Flow, RouteType};
use netlink_mirror::cli::{RouteGetArgs, route_get};
use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec, crossbeam_epoch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = std::env::args()
        .nth(1)
        .map_or(NetnsSpec::Current, |name| NetnsSpec::parse(&name));
    let mirror = Mirror::start(spec, MirrorOptions::default())?;
    mirror.wait_synced(Duration::from_secs(60))?;
    let tables = mirror.tables().clone(); // what every run loop gets

    let guard = crossbeam_epoch::pin(); // a run loop pins once per batch
    let local = tables
        .fib4
        .lookup(&Flow::to(u32::from(std::net::Ipv4Addr::LOCALHOST)), &guard)
        .map_err(|e| format!("127.0.0.1: {e:?}"))?;
    let lo = tables
        .links
        .by_name("lo", &guard)
        .ok_or("no loopback link")?;
    assert_eq!(local.route_type(), RouteType::Local);
    assert_eq!(local.path.nexthops[0].ifindex, lo.ifindex);

    // Every interface /proc/net/dev lists (this namespace's) is mirrored.
    let proc_net_dev = std::fs::read_to_string("/proc/net/dev")?;
    let names: Vec<&str> = proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|line| line.split(':').next())
        .map(str::trim)
        .collect();
    for name in &names {
        // A link created just now reaches the mirror as an event: give it a moment.
        let mut tries = 0;
        while tables
            .links
            .by_name(name, &crossbeam_epoch::pin())
            .is_none()
        {
            tries += 1;
            if tries > 20 {
                return Err(format!("{name} is in /proc/net/dev but not in the mirror").into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    let args = RouteGetArgs {
        addr: "127.0.0.1".parse()?,
        selectors: vec![],
        netns: None,
    };
    println!("{}", route_get(&tables, &args)?);
    let stats = mirror.stats();
    println!(
        "mirrored {} links ({}), {} IPv4 and {} IPv6 addresses, {} neighbours; {stats:?}",
        tables.links.len(),
        names.join(", "),
        tables.addrs.len::<std::net::Ipv4Addr>(),
        tables.addrs.len::<std::net::Ipv6Addr>(),
        tables.neigh.len(),
    );
    Ok(())
}
