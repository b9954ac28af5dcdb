// xfwd's XDP program: decides, per received frame, whether the kernel or xfwd's AF_XDP
// socket on the receive queue gets it.
//
// To the kernel (XDP_PASS): ARP; IPv6 neighbour discovery (RS, RA, NS, NA, redirect); IPv4
// and IPv6 packets whose destination is one of the forwarder's own addresses (the maps
// local_v4 / local_v6, kept in step by xfwd), except UDP datagrams (not fragments; IPv6 without
// extension headers) to a port of xfwd's in-dataplane endpoints (the map udp_ports, kept in
// step with their binds and closes), which go to user space; multicast and broadcast; IPv6
// link-local destinations; every EtherType other than IPv4 and IPv6.
//
// To user space (bpf_redirect_map into xsks, slot = port slot of the ingress interface times
// QUEUES_PER_PORT plus rx_queue_index; the map `ports` gives the slot): all other IPv4 and IPv6
// frames, truncated ones included, so that the dataplane drops them and counts the reason.
// A queue without a socket falls back to XDP_PASS (counted).
//
// While the one entry of the array `divert` is non-zero, every frame goes to the kernel
// (XDP_PASS, counted): xfwd sets it when something it may not bypass (netfilter rules, tc on
// a served interface) appears while it runs, so that the kernel forwards with them.
//
// Per-CPU counters (array `counters`, indices below) are summed by xfwd.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Counter indices; xfwd reads them by the same numbers (src/xdp.rs: XdpCounter).
enum counter {
	C_REDIRECT = 0,    // handed to the AF_XDP socket of the receive queue
	C_NO_SOCKET,       // meant for user space, but the queue has no socket: passed
	C_PASS_ARP,        // ARP
	C_PASS_ND,         // ICMPv6 router/neighbour discovery
	C_PASS_LOCAL,      // IPv4/IPv6 to one of our own addresses
	C_PASS_MULTICAST,  // L2 or L3 multicast/broadcast
	C_PASS_LINK_LOCAL, // IPv6 link-local destination
	C_PASS_OTHER,      // any other EtherType (VLAN, LLDP, ...)
	C_LOCAL_UDP,       // local UDP to an endpoint's port: to user space (also counted above)
	C_PASS_DIVERTED,   // every frame while `divert` is set
	C_MAX,
};

// One program serves every interface of an xfwd instance, and an AF_XDP socket only takes
// frames of the (device, queue) it is bound to: each interface has its own block of
// QUEUES_PER_PORT entries of xsks, found through `ports`. xfwd uses the same numbers
// (src/xdp.rs: MAX_PORTS, QUEUES_PER_PORT).
#define MAX_PORTS 64
#define QUEUES_PER_PORT 64

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_PORTS * QUEUES_PER_PORT);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);   // ifindex
	__type(value, __u32); // slot, < MAX_PORTS
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); // IPv4 address, network byte order
	__type(value, __u8);
} local_v4 SEC(".maps");

struct v6_key {
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct v6_key);
	__type(value, __u8);
} local_v6 SEC(".maps");

// UDP destination ports (host byte order) that xfwd's in-dataplane endpoints are bound to.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u16);
	__type(value, __u8);
} udp_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); // non-zero: every frame to the kernel
} divert SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 index, int action)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &index);
	if (value)
		*value += 1;
	return action;
}

static __always_inline int to_user(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->ingress_ifindex;
	__u32 *slot = bpf_map_lookup_elem(&ports, &ifindex);
	if (!slot || *slot >= MAX_PORTS || ctx->rx_queue_index >= QUEUES_PER_PORT)
		return count(C_NO_SOCKET, XDP_PASS);
	__u32 key = *slot * QUEUES_PER_PORT + ctx->rx_queue_index;
	int action = bpf_redirect_map(&xsks, key, XDP_PASS);
	if (action == XDP_REDIRECT)
		return count(C_REDIRECT, action);
	return count(C_NO_SOCKET, action);
}

#define ETH_HLEN_ 14
#define IPV4_DST_OFF (ETH_HLEN_ + 16)
#define IPV6_NEXT_OFF (ETH_HLEN_ + 6)
#define IPV6_DST_OFF (ETH_HLEN_ + 24)
#define IPV6_HLEN 40

// A UDP datagram for one of our own addresses, its header at `off`: to user space when an
// in-dataplane endpoint holds its destination port, else to the kernel. `off` must be a
// constant at each call (the function is inlined, the offset an immediate): without
// CAP_PERFMON the verifier refuses packet pointer arithmetic with a variable (Spectre v1
// sanitation: "pointer arithmetic with it prohibited for !root"), and the service runs with
// CAP_BPF only.
static __always_inline int local_udp(struct xdp_md *ctx, __u8 *data, __u8 *end, const __u32 off)
{
	__u8 *l4 = data + off;
	if (l4 + 4 > end)
		return count(C_PASS_LOCAL, XDP_PASS);
	__u16 port = bpf_ntohs(*(__u16 *)(l4 + 2));
	if (!bpf_map_lookup_elem(&udp_ports, &port))
		return count(C_PASS_LOCAL, XDP_PASS);
	count(C_LOCAL_UDP, 0);
	return to_user(ctx);
}

SEC("xdp")
int xfwd_xdp(struct xdp_md *ctx)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	__u32 zero = 0;
	__u32 *diverted = bpf_map_lookup_elem(&divert, &zero);

	if (diverted && *diverted)
		return count(C_PASS_DIVERTED, XDP_PASS);
	if (data + ETH_HLEN_ > end)
		return to_user(ctx); // runt frame: the dataplane drops and counts it
	__u16 proto = bpf_ntohs(*(__u16 *)(data + 12));

	if (proto == ETH_P_ARP)
		return count(C_PASS_ARP, XDP_PASS);
	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return count(C_PASS_OTHER, XDP_PASS);
	if (data[0] & 1) // group bit of the destination MAC: broadcast or multicast
		return count(C_PASS_MULTICAST, XDP_PASS);

	if (proto == ETH_P_IP) {
		if (data + IPV4_DST_OFF + 4 > end)
			return to_user(ctx);
		__u32 daddr = *(__u32 *)(data + IPV4_DST_OFF);
		__u8 first = data[IPV4_DST_OFF];
		if (first >= 224 || daddr == 0xffffffff)
			return count(C_PASS_MULTICAST, XDP_PASS);
		if (bpf_map_lookup_elem(&local_v4, &daddr)) {
			__u8 *ip = data + ETH_HLEN_;
			__u32 ihl = (ip[0] & 0x0f) << 2;
			__u16 frag = bpf_ntohs(*(__u16 *)(ip + 6));
			// Fragments and other protocols: the kernel's.
			if (ip[9] != IPPROTO_UDP || ihl < 20 || (frag & 0x3fff))
				return count(C_PASS_LOCAL, XDP_PASS);
			// With IP options the UDP header's offset varies: user space decides (the
			// pipeline's socket lookup; no endpoint there: punted to the kernel).
			if (ihl != 20)
				return to_user(ctx);
			return local_udp(ctx, data, end, ETH_HLEN_ + 20);
		}
		return to_user(ctx);
	}

	if (data + ETH_HLEN_ + IPV6_HLEN > end)
		return to_user(ctx);
	struct v6_key key;
	__builtin_memcpy(key.addr, data + IPV6_DST_OFF, 16);
	if (key.addr[0] == 0xff)
		return count(C_PASS_MULTICAST, XDP_PASS);
	if (key.addr[0] == 0xfe && (key.addr[1] & 0xc0) == 0x80)
		return count(C_PASS_LINK_LOCAL, XDP_PASS);
	if (data[IPV6_NEXT_OFF] == IPPROTO_ICMPV6) {
		if (data + ETH_HLEN_ + IPV6_HLEN + 1 > end)
			return to_user(ctx);
		__u8 type = data[ETH_HLEN_ + IPV6_HLEN];
		if (type >= 133 && type <= 137) // RS, RA, NS, NA, redirect
			return count(C_PASS_ND, XDP_PASS);
	}
	if (bpf_map_lookup_elem(&local_v6, &key)) {
		// Extension headers (fragments included) and other protocols: the kernel's.
		if (data[IPV6_NEXT_OFF] != IPPROTO_UDP)
			return count(C_PASS_LOCAL, XDP_PASS);
		return local_udp(ctx, data, end, ETH_HLEN_ + IPV6_HLEN);
	}
	return to_user(ctx);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
