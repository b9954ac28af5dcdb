//! The writer handles: readers hold the `Arc` the writer hands out (they cannot write: see the
//! `compile_fail` doctests of `src/writer.rs`) and see exactly what the writer published.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use addr_table::{AddrTable, AddrWriter, IfAddr, NetnsId, RhlWriter};

/// A table's interface lists, both families.
type View = (
    Vec<(u32, Vec<IfAddr<Ipv4Addr>>)>,
    Vec<(u32, Vec<IfAddr<Ipv6Addr>>)>,
);

fn view(t: &AddrTable) -> View {
    let guard = crossbeam_epoch::pin();
    let v4 = t
        .interfaces::<Ipv4Addr>(&guard)
        .map(|(i, l)| (i, l.to_vec()))
        .collect();
    let v6 = t
        .interfaces::<Ipv6Addr>(&guard)
        .map(|(i, l)| (i, l.to_vec()))
        .collect();
    (v4, v6)
}

#[test]
fn readers_see_what_the_addr_writer_published() {
    let mut writer = AddrWriter::new(NetnsId(3));
    let reader = Arc::clone(writer.reader());
    for i in 0..3000u32 {
        let a = Ipv4Addr::from(0x0a00_0000 + i * 7);
        writer
            .add(IfAddr::new(a, 16 + (i % 3) as u8, 1 + i % 9))
            .unwrap();
        let b = Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i));
        writer.add(IfAddr::new(b, 64, 1 + i % 5)).unwrap();
    }
    writer.remove_interface(4);
    writer.finish_rehash();
    assert_eq!(view(&reader), view(&writer));
    assert_eq!(reader.len::<Ipv4Addr>(), writer.len::<Ipv4Addr>());
    let guard = crossbeam_epoch::pin();
    for i in 0..3000u32 {
        let a = Ipv4Addr::from(0x0a00_0000 + i * 7);
        assert_eq!(
            reader.dev_find(a, None, &guard),
            writer.dev_find(a, None, &guard)
        );
    }
    let before = view(&reader);
    drop(writer);
    assert_eq!(view(&reader), before, "the writer gone, the table stays");
}

#[test]
fn readers_see_what_the_rhl_writer_published() {
    let mut writer = RhlWriter::<u32, u32>::new();
    let reader = Arc::clone(writer.reader());
    for k in 0..5000u32 {
        writer.insert(k % 4000, k).unwrap();
    }
    for k in (0..4000u32).step_by(3) {
        writer.remove_all(&k);
    }
    writer.update(&1, |_| true, |v| *v += 1);
    let dump = |t: &addr_table::RhlTable<u32, u32>| {
        let mut out = Vec::new();
        t.for_each(|k, v| out.push((*k, *v)));
        out.sort_unstable();
        out
    };
    assert_eq!(dump(&reader), dump(&writer));
    assert_eq!(
        (reader.len(), reader.objects()),
        (writer.len(), writer.objects())
    );
}
