// XDP forwarding through the kernel's own FIB and neighbour table, the "XDP + bpf_fib_lookup"
// baseline of the end-to-end benchmark (`cargo xtask bench e2e`). Written for xfwd.
//
// For each IPv4 or IPv6 frame: ask bpf_fib_lookup for the egress interface and both MACs; on
// success decrement TTL / hop limit (IPv4 checksum updated incrementally, RFC 1624), rewrite the
// MACs and bpf_redirect to the egress interface. Anything else (ARP, ND, TTL about to expire,
// local destinations, unresolved neighbours, errors) goes to the kernel's stack unchanged.
//
// Build: clang -O2 -g -target bpf -c xdp_fib.c -o xdp_fib.o
// Attach: ip link set dev IF xdpdrv obj xdp_fib.o sec xdp

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define FAMILY_INET 2
#define FAMILY_INET6 10

// Replaces the 16-bit word `old` by `new` inside the IPv4 header whose checksum is *check:
// HC' = ~(~HC + ~m + m'), RFC 1624 equation 3, with the carries folded back in.
static __always_inline void csum_replace_word(__u16 *check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~bpf_ntohs(*check);
	sum += (__u16)~old;
	sum += new;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	*check = bpf_htons((__u16)~sum);
}

// Rewrites the MACs from a successful lookup and redirects to its egress interface.
static __always_inline int redirect(struct ethhdr *eth, struct bpf_fib_lookup *fib)
{
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	return bpf_redirect(fib->ifindex, 0);
}

static __always_inline int forward_v4(struct xdp_md *ctx, struct ethhdr *eth, void *end)
{
	struct iphdr *ip = (void *)(eth + 1);
	struct bpf_fib_lookup fib = {};

	if ((void *)(ip + 1) > end || ip->ttl <= 1)
		return XDP_PASS;
	fib.family = FAMILY_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	// TTL is the high byte of the word it shares with the protocol.
	__u16 old = ((__u16)ip->ttl << 8) | ip->protocol;
	ip->ttl--;
	csum_replace_word(&ip->check, old, old - 0x0100);
	return redirect(eth, &fib);
}

static __always_inline int forward_v6(struct xdp_md *ctx, struct ethhdr *eth, void *end)
{
	struct ipv6hdr *ip = (void *)(eth + 1);
	struct bpf_fib_lookup fib = {};

	if ((void *)(ip + 1) > end || ip->hop_limit <= 1)
		return XDP_PASS;
	fib.family = FAMILY_INET6;
	fib.flowinfo = *(__be32 *)ip & bpf_htonl(0x0fffffff);
	fib.l4_protocol = ip->nexthdr;
	fib.tot_len = bpf_ntohs(ip->payload_len);
	__builtin_memcpy(fib.ipv6_src, &ip->saddr, sizeof(fib.ipv6_src));
	__builtin_memcpy(fib.ipv6_dst, &ip->daddr, sizeof(fib.ipv6_dst));
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	ip->hop_limit--;
	return redirect(eth, &fib);
}

SEC("xdp")
int xdp_fib_forward(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return forward_v4(ctx, eth, end);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return forward_v6(ctx, eth, end);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
