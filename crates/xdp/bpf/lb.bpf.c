// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// Fulcrum's L4 data plane: an XDP program that load-balances IPv4 TCP and UDP
// services (VIP, port, protocol) over backends.
//
// The program is small and dumb on purpose (Katran's split): it hashes the
// flow's 5-tuple (xxHash64 or MurmurHash3, chosen per service), indexes the
// service's consistent-hash table (built in userspace by fulcrum-balance's
// Maglev or rendezvous code) and looks the backend up. An LRU conntrack map
// keeps established flows on their backend when the table changes; it is
// looked up first, and holds what a packet of a known flow needs (the
// backend slot and generation, or for a NAT reply the VIP to put back), so
// such a packet costs one hash lookup: the services map is read only for a
// flow's first packet and for traffic that is not for a service. In front of
// it, a small direct-mapped per-CPU flow cache (an array) spares a flow this
// CPU saw recently even that lookup. Conntrack entries age by protocol and
// TCP state (see "Connection tracking by state" below). Two forwarding modes:
//   NAT: the destination is rewritten to the backend (address and port), and
//        the replies, which the backends route back through the LB, get the
//        VIP back as their source; checksums are updated incrementally.
//   DSR: only the Ethernet addresses change; the backend holds the VIP on its
//        loopback and answers the client directly.
// The next hop comes from the kernel FIB (bpf_fib_lookup); when it cannot be
// resolved yet the rewritten packet goes to the kernel, which forwards it and
// learns the neighbour. A backend's next hop is cached per CPU for
// NEXTHOP_TTL_JIFFIES: the lookup costs more than the rest of the program,
// and a route or neighbour change is followed within the TTL. Everything that
// is not for a service passes to the kernel; malformed IPv4 is dropped and
// counted.
//
// The layouts below are mirrored by crates/xdp/src/maps.rs: change both.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_SERVICES 64
#define RING_SIZE 65537 /* prime, fulcrum-balance's default Maglev size */
#define MAX_BACKENDS 1024
#define MAX_FLOWS 262144 /* the default; the control plane may size conntrack otherwise */
#define NO_BACKEND 0xffffffffu
#define FLOW_REPLY 0xfffffffeu /* conntrack entry of a NAT flow's reply direction */

#define SVC_DSR 1u     /* forwarding mode: DSR instead of NAT */
#define SVC_MURMUR3 2u /* flow hash: MurmurHash3 instead of xxHash64 */

#define BACKEND_ACTIVE 1u
#define BACKEND_DSR 2u /* the service's SVC_DSR, so that a conntrack hit needs no service lookup */
#define BACKEND_DOWN 4u /* control plane only */
#define BACKEND_V6 8u /* its address is in backends6 */

#define MAX_FLOWS6 65536 /* IPv6 flows: compiled in */

/* 0.25 s to 2.5 s, by CONFIG_HZ: jiffies are the cheapest clock a program has. */
#define NEXTHOP_TTL_JIFFIES 250

/* Per-CPU flow caches: entries (a power of two; 256 KiB a CPU for IPv4,
 * 448 KiB for IPv6, small enough to stay in the CPU's caches, so that
 * looking a new flow up here is cheap),
 * and how often a flow served from it is looked up in the conntrack map
 * anyway, which keeps the flow's LRU entry fresh (and puts it back if it was
 * evicted). */
#define FLOW_CACHE_SIZE 8192
#define FLOW_CACHE_SHIFT 51 /* 64 - log2(FLOW_CACHE_SIZE) */
#define FLOW_CACHE_REFRESH_JIFFIES 250

#define AF_INET 2
#define AF_INET6 10

/* TCP flags (byte 13 of the header). */
#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

/* Connection tracking by state. An entry records the state of its flow and
 * when a packet last went through it (bpf_ktime_get_coarse_ns(), which is
 * CLOCK_MONOTONIC_COARSE to userspace); it has expired once idle for longer
 * than its state's timeout (ct_config, written by the control plane):
 *   CT_SYN          the flow's packets so far were SYNs (a SYN flood's
 *                   entries, or the server's SYN-ACK in the reply direction);
 *   CT_ESTABLISHED  a TCP packet without SYN was seen;
 *   CT_CLOSING      a FIN or RST was seen in either direction;
 *   CT_UDP          UDP.
 * A packet whose forward entry has expired, or a SYN on a closing entry (the
 * client reusing its port), is a new flow: it takes the table's backend. The
 * LRU map cannot choose what it evicts, so expired entries are deleted by a
 * userspace sweep (`fulcrum lb conntrack --gc`), which returns their room to
 * the map before a new flow would have to evict a live one. Only flows in
 * CT_ESTABLISHED or CT_UDP enter the per-CPU flow cache, and a TCP FIN or
 * RST never takes the cache's path, so that every state change passes
 * through the conntrack entry; a cached flow refreshes its entry's time
 * every FLOW_CACHE_REFRESH_JIFFIES. */
enum {
	CT_SYN = 0,
	CT_ESTABLISHED = 1,
	CT_CLOSING = 2,
	CT_UDP = 3,
	CT_STATES = 4,
};

/* Indices of the `totals` counters. */
enum {
	T_PASS = 0,      /* not for a service: passed to the kernel */
	T_MALFORMED = 1, /* malformed IPv4 or truncated header: dropped */
	T_NO_BACKEND = 2,/* service without a usable backend: dropped */
	T_REPLY = 3,     /* NAT reply rewritten back to the VIP */
	T_KERNEL = 4,    /* rewritten, next hop unresolved: forwarded by the kernel */
	T_UNSUPPORTED = 5, /* IP options or fragments: passed to the kernel */
	T_MAX = 6,
};

struct svc_key {
	__u32 vip;   /* network order */
	__u16 port;  /* network order */
	__u8 proto;  /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};

struct svc_value {
	__u32 id;    /* index into ring (id * RING_SIZE) and svc_stats */
	__u32 flags; /* SVC_* */
};

struct backend {
	__u32 ip;     /* network order */
	__u16 port;   /* network order */
	__u16 pad;
	__u32 svc_id;
	__u32 weight; /* control plane only */
	__u32 gen;    /* bumped when the slot is freed, to expire conntrack entries */
	__u32 flags;  /* BACKEND_* */
};

/* A flow's 5-tuple, as in the packet (network order). These 16 bytes are
 * also the input of the flow hash: crates/xdp/src/flow.rs builds the same. */
struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* A conntrack entry. A flow to a service names its backend: the slot, and
 * the slot's generation when the flow was assigned (a freed slot's entries
 * stop matching). The reply direction of a NAT flow (backend -> client) has
 * backend == FLOW_REPLY and the VIP and port the client addressed. */
struct flow {
	__u32 backend; /* slot, or FLOW_REPLY */
	__u32 gen;
	__u32 vip;     /* FLOW_REPLY: network order */
	__u16 port;    /* FLOW_REPLY: network order */
	__u8 state;    /* CT_* */
	__u8 pad;
	__u64 seen;    /* bpf_ktime_get_coarse_ns() of the last packet */
};

/* Idle timeout of each CT_* state, in nanoseconds. */
struct ct_config {
	__u64 timeout_ns[CT_STATES];
};

/* A flow cache entry: a copy of a forward flow's conntrack entry, after
 * its key (struct cached_flow, or cached_flow6 below for IPv6). */
struct cache_meta {
	__u32 backend;
	__u32 gen;
	__u64 refreshed; /* bpf_jiffies64() of the last conntrack lookup */
};

struct cached_flow {
	struct flow_key key;
	struct cache_meta m;
};

struct nexthop {
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u32 ip;         /* the backend it was looked up for (IPv4) */
	__u32 in_ifindex; /* the ingress interface it was looked up from */
	__u32 ifindex;    /* the egress interface */
	__u64 expires;    /* bpf_jiffies64() deadline */
	__u32 ip6[4];     /* the backend it was looked up for (IPv6) */
};

struct counters {
	__u64 packets;
	__u64 bytes;
	__u64 flows; /* new flows assigned (conntrack misses) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SERVICES);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES * RING_SIZE);
	__type(key, __u32);
	__type(value, __u32);
} ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* Both directions of a NAT flow take an entry, hence twice MAX_FLOWS. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 2 * MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, struct flow);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_config);
} ct_config SEC(".maps");

/* Direct-mapped, per CPU (no locks, no torn entries), in front of the
 * conntrack map: a packet of a flow this CPU has seen recently costs no hash
 * map lookup, only an array read. An entry is trusted only while its backend
 * slot still has the entry's generation, as for conntrack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FLOW_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct cached_flow);
} flow_cache SEC(".maps");

/* Backend slot -> its cached next hop. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct nexthop);
} nexthops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct counters);
} svc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct counters);
} backend_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, T_MAX);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

/* IPv6 services have maps of their own, so that the IPv4 path's keys,
 * entries and cache lines are unchanged. They share the service ids (ring,
 * svc_stats), the backend slots (backends, backend_stats) and the counters
 * with IPv4: a v6 backend's slot has BACKEND_V6 and its address in
 * backends6. The flow cache (flow_cache6) and the next-hop cache work as
 * for IPv4, through the same code. */
struct in6 {
	__u32 a[4]; /* network order */
};

struct svc_key6 {
	struct in6 vip;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/* 40 bytes, also the input of the v6 flow hash (crates/xdp/src/flow.rs). */
struct flow_key6 {
	struct in6 saddr;
	struct in6 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct flow6 {
	__u32 backend; /* slot, or FLOW_REPLY */
	__u32 gen;
	struct in6 vip; /* FLOW_REPLY */
	__u16 port;     /* FLOW_REPLY */
	__u8 state;
	__u8 pad;
	__u64 seen;
};

struct cached_flow6 {
	struct flow_key6 key;
	struct cache_meta m;
};

/* As flow_cache, for IPv6 flows. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FLOW_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct cached_flow6);
} flow_cache6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SERVICES);
	__type(key, struct svc_key6);
	__type(value, struct svc_value);
} services6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct in6);
} backends6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 2 * MAX_FLOWS6);
	__type(key, struct flow_key6);
	__type(value, struct flow6);
} conntrack6 SEC(".maps");

static __always_inline int count(__u32 which, int action)
{
	__u64 *n = bpf_map_lookup_elem(&totals, &which);
	if (n)
		*n += 1;
	return action;
}

static __always_inline void add(void *map, __u32 index, __u64 bytes, __u64 flows)
{
	struct counters *c = bpf_map_lookup_elem(map, &index);
	if (c) {
		c->packets += 1;
		c->bytes += bytes;
		c->flows += flows;
	}
}

static __always_inline __u64 rotl64(__u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* xxHash64 (seed 0) of the 16-byte flow key: the short-input path of the
 * reference algorithm, unrolled for exactly two 8-byte lanes. */
static __always_inline __u64 xxh64_16(__u64 lane0, __u64 lane1)
{
	const __u64 p1 = 0x9E3779B185EBCA87ULL, p2 = 0xC2B2AE3D27D4EB4FULL;
	const __u64 p3 = 0x165667B19E3779F9ULL, p4 = 0x85EBCA77C2B2AE63ULL;
	const __u64 p5 = 0x27D4EB2F165667C5ULL;
	__u64 h = p5 + 16;
	h ^= rotl64(lane0 * p2, 31) * p1;
	h = rotl64(h, 27) * p1 + p4;
	h ^= rotl64(lane1 * p2, 31) * p1;
	h = rotl64(h, 27) * p1 + p4;
	h ^= h >> 33;
	h *= p2;
	h ^= h >> 29;
	h *= p3;
	h ^= h >> 32;
	return h;
}

static __always_inline __u64 fmix64(__u64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* MurmurHash3 x64_128 (seed 0) of the 16-byte flow key, low 64 bits: one
 * block, no tail. */
static __always_inline __u64 murmur3_16(__u64 k1, __u64 k2)
{
	const __u64 c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
	__u64 h1 = 0, h2 = 0;
	k1 = rotl64(k1 * c1, 31) * c2;
	h1 ^= k1;
	h1 = (rotl64(h1, 27) + h2) * 5 + 0x52dce729;
	k2 = rotl64(k2 * c2, 33) * c1;
	h2 ^= k2;
	h2 = (rotl64(h2, 31) + h1) * 5 + 0x38495ab5;
	h1 ^= 16;
	h2 ^= 16;
	h1 += h2;
	h2 += h1;
	h1 = fmix64(h1);
	h2 = fmix64(h2);
	return h1 + h2;
}

/* Flow cache index: a multiplicative hash of the flow key's `n` 8-byte
 * lanes (2 for IPv4, 5 for IPv6). */
static __always_inline __u32 cache_index(const __u64 *lanes, int n)
{
	__u64 h = lanes[0];
	for (int i = 1; i < n; i++)
		h = (h * 0x9E3779B97F4A7C15ULL) ^ lanes[i];
	return (__u32)((h * 0xC2B2AE3D27D4EB4FULL) >> FLOW_CACHE_SHIFT);
}

/* This CPU's flow cache entry (in `map`) for the flow whose key is `lanes`:
 * the entry's key (its cache_meta follows), and whether it holds this flow.
 * The same code for both families: the key's length is all they differ in. */
struct cache_ref {
	__u64 *key; /* 0: no entry */
	int same;
};

static __always_inline struct cache_ref cache_ref(void *map, const __u64 *lanes, int n)
{
	__u32 ci = cache_index(lanes, n);
	struct cache_ref c = { .key = bpf_map_lookup_elem(map, &ci) };
	if (c.key) {
		c.same = 1;
		for (int i = 0; i < n; i++)
			c.same &= c.key[i] == lanes[i];
	}
	return c;
}

#define CACHE_META(c, n) ((struct cache_meta *)((c)->key + (n)))

/* The backend of a flow in the cache `c` that a packet with TCP flags
 * `flags` may take from there (its slot in `*slot`), or 0. A FIN or RST
 * goes on to the conntrack entry, which records the state change. */
static __always_inline struct backend *cache_backend(const struct cache_ref *c, int n, __u8 flags, __u32 *slot)
{
	if (!c->key || !c->same || (flags & (TCP_FIN | TCP_RST)))
		return 0;
	struct cache_meta *m = CACHE_META(c, n);
	*slot = m->backend;
	struct backend *b = bpf_map_lookup_elem(&backends, slot);
	if (b && b->gen == m->gen && (b->flags & BACKEND_ACTIVE))
		return b;
	return 0;
}

/* The 5-tuple of an IPv4 packet whose TCP or UDP ports are at `ports`. */
static __always_inline struct flow_key flow_key_of(const struct iphdr *ip, const __u16 *ports)
{
	struct flow_key key = {
		.saddr = ip->saddr,
		.daddr = ip->daddr,
		.sport = ports[0],
		.dport = ports[1],
		.proto = ip->protocol,
	};
	return key;
}

static __always_inline __u64 flow_hash(const struct flow_key *key, __u32 flags)
{
	const __u64 *lanes = (const __u64 *)key;
	if (flags & SVC_MURMUR3)
		return murmur3_16(lanes[0], lanes[1]);
	return xxh64_16(lanes[0], lanes[1]);
}

/* RFC 1624 incremental checksum update: HC' = ~(~HC + ~m + m'), on 16-bit
 * words as they sit in memory (one's-complement sums ignore byte order). */
static __always_inline void csum_replace(__u16 *sum, __u32 from, __u32 to)
{
	__u32 c = (__u16)~*sum;
	c += (__u16)~(from & 0xffff) + (__u16)~(from >> 16);
	c += (to & 0xffff) + (to >> 16);
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	*sum = ~c;
}

/* Rewrite one address and one port of the packet, fixing the IP header and
 * L4 checksums (a UDP checksum of 0 means none and stays 0). */
static __always_inline void rewrite(struct iphdr *ip, __u16 *l4sum, __u32 *addr, __u16 *port, __u32 new_addr,
				    __u16 new_port, int is_udp)
{
	__u32 old_addr = *addr;
	__u16 old_port = *port;
	csum_replace(&ip->check, old_addr, new_addr);
	if (!is_udp || *l4sum) {
		csum_replace(l4sum, old_addr, new_addr);
		csum_replace(l4sum, old_port, new_port);
		if (is_udp && *l4sum == 0)
			*l4sum = 0xffff;
	}
	*addr = new_addr;
	*port = new_port;
}

static __always_inline int send(struct xdp_md *ctx, struct ethhdr *eth, const __u8 *dmac, const __u8 *smac,
				__u32 ifindex)
{
	__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

/* Send the packet towards `next` (the backend in slot `slot`, or the client
 * for replies when `slot` is NO_BACKEND): XDP_TX when the route leaves by
 * the interface it came in on, a redirect otherwise, and the kernel when the
 * FIB cannot give a resolved next hop. */
static __always_inline int forward(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *ip, __u32 next, __u32 slot)
{
	struct nexthop *nh = slot == NO_BACKEND ? 0 : bpf_map_lookup_elem(&nexthops, &slot);
	__u64 now = 0;
	if (nh) {
		now = bpf_jiffies64();
		if (nh->ip == next && nh->in_ifindex == ctx->ingress_ifindex && now < nh->expires)
			return send(ctx, eth, nh->dmac, nh->smac, nh->ifindex);
	}
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = next;
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return count(T_KERNEL, XDP_PASS);
	if (nh) {
		__builtin_memcpy(nh->dmac, fib.dmac, ETH_ALEN);
		__builtin_memcpy(nh->smac, fib.smac, ETH_ALEN);
		nh->ip = next;
		__builtin_memset(nh->ip6, 0, 16);
		nh->in_ifindex = ctx->ingress_ifindex;
		nh->ifindex = fib.ifindex;
		nh->expires = now + NEXTHOP_TTL_JIFFIES;
	}
	return send(ctx, eth, fib.dmac, fib.smac, fib.ifindex);
}

/* The state of a new entry for a packet with TCP flags `flags`. */
static __always_inline __u8 ct_first_state(int is_udp, __u8 flags)
{
	if (is_udp)
		return CT_UDP;
	if (flags & (TCP_FIN | TCP_RST))
		return CT_CLOSING;
	if (flags & TCP_SYN)
		return CT_SYN;
	return CT_ESTABLISHED;
}

/* The state of an entry in `state` after a packet with TCP flags `flags`
 * (0 for UDP). */
static __always_inline __u8 ct_next_state(__u8 state, __u8 flags)
{
	if (flags & (TCP_FIN | TCP_RST))
		return CT_CLOSING;
	if (state == CT_SYN && !(flags & TCP_SYN))
		return CT_ESTABLISHED;
	return state;
}

/* The entry has been idle for longer than its state allows. Signed: another
 * CPU may have stamped the entry after `now` was read. */
static __always_inline int ct_too_old(__u8 state, __u64 seen, __u64 now)
{
	__u32 zero = 0;
	struct ct_config *cfg = bpf_map_lookup_elem(&ct_config, &zero);
	return cfg && (__s64)(now - seen) > (__s64)cfg->timeout_ns[state & (CT_STATES - 1)];
}

static __always_inline int ct_expired(const struct flow *f, __u64 now)
{
	return ct_too_old(f->state, f->seen, now);
}

/* A FIN or RST in one direction of a NAT flow closes the other direction's
 * entry (a struct flow or flow6 in `map`) too. */
#define CT_CLOSE(map, entry_type, other, now)                                                                          \
	do {                                                                                                           \
		entry_type *f_ = bpf_map_lookup_elem(map, other);                                                      \
		if (f_) {                                                                                              \
			f_->state = CT_CLOSING;                                                                        \
			f_->seen = (now);                                                                              \
		}                                                                                                      \
	} while (0)

/* A cached flow due for a refresh whose conntrack entry (an entry_type in
 * `map`) the LRU evicted: the entry goes back. */
#define CT_RESTORE(map, entry_type, key, slot, generation, is_udp, now)                                             \
	do {                                                                                                           \
		entry_type again_ = {                                                                                  \
			.backend = (slot),                                                                             \
			.gen = (generation),                                                                           \
			.state = (is_udp) ? CT_UDP : CT_ESTABLISHED,                                                   \
			.seen = (now),                                                                                 \
		};                                                                                                     \
		bpf_map_update_elem(map, key, &again_, BPF_ANY);                                                       \
	} while (0)

/* Keep a forward flow (key `lanes`, `n` lanes) in this CPU's flow cache
 * entry `c` if its state may be served from there; otherwise make sure the
 * entry does not hold it (the key's last lane holds the protocol, and no
 * packet has protocol 0). */
static __always_inline void ct_cache(const struct cache_ref *c, const __u64 *lanes, int n, __u32 slot, __u32 gen,
				     __u8 state, __u64 jiffies)
{
	if (!c->key)
		return;
	if (state == CT_ESTABLISHED || state == CT_UDP) {
		for (int i = 0; i < n; i++)
			c->key[i] = lanes[i];
		struct cache_meta *m = CACHE_META(c, n);
		m->backend = slot;
		m->gen = gen;
		m->refreshed = jiffies;
	} else if (c->same) {
		c->key[n - 1] = 0;
	}
}

/* Count the packet and forward it to backend `b` (in `slot`): in DSR mode as
 * it is, in NAT mode with its destination rewritten, after remembering the
 * reply direction of a new flow (in `state`, stamped `t`). */
static __always_inline int balance(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *ip, __u16 *l4sum,
				   __u16 *ports, int is_udp, const struct flow_key *key, const struct backend *b,
				   __u32 slot, __u64 bytes, __u32 is_new, __u8 state, __u64 t)
{
	add(&svc_stats, b->svc_id, bytes, is_new);
	add(&backend_stats, slot, bytes, is_new);
	if (b->flags & BACKEND_DSR)
		return forward(ctx, eth, ip, b->ip, slot);
	if (is_new) {
		struct flow_key reply = {
			.saddr = b->ip,
			.daddr = key->saddr,
			.sport = b->port,
			.dport = key->sport,
			.proto = key->proto,
		};
		struct flow origin = {
			.backend = FLOW_REPLY,
			.vip = key->daddr,
			.port = key->dport,
			.state = state,
			.seen = t,
		};
		bpf_map_update_elem(&conntrack, &reply, &origin, BPF_ANY);
	}
	rewrite(ip, l4sum, &ip->daddr, &ports[1], b->ip, b->port, is_udp);
	return forward(ctx, eth, ip, b->ip, slot);
}


/* xxHash64 (seed 0) of the 40-byte v6 flow key: one 32-byte stripe, then
 * one 8-byte lane, as the reference algorithm does for 40 bytes. */
static __always_inline __u64 xxh64_round(__u64 acc, __u64 lane)
{
	return rotl64(acc + lane * 0xC2B2AE3D27D4EB4FULL, 31) * 0x9E3779B185EBCA87ULL;
}

static __always_inline __u64 xxh64_merge(__u64 h, __u64 v)
{
	h ^= xxh64_round(0, v);
	return h * 0x9E3779B185EBCA87ULL + 0x85EBCA77C2B2AE63ULL;
}

static __always_inline __u64 xxh64_40(const __u64 *l)
{
	const __u64 p1 = 0x9E3779B185EBCA87ULL, p2 = 0xC2B2AE3D27D4EB4FULL;
	const __u64 p3 = 0x165667B19E3779F9ULL, p4 = 0x85EBCA77C2B2AE63ULL;
	__u64 v1 = xxh64_round(p1 + p2, l[0]);
	__u64 v2 = xxh64_round(p2, l[1]);
	__u64 v3 = xxh64_round(0, l[2]);
	__u64 v4 = xxh64_round(-p1, l[3]);
	__u64 h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
	h = xxh64_merge(h, v1);
	h = xxh64_merge(h, v2);
	h = xxh64_merge(h, v3);
	h = xxh64_merge(h, v4);
	h += 40;
	h ^= xxh64_round(0, l[4]);
	h = rotl64(h, 27) * p1 + p4;
	h ^= h >> 33;
	h *= p2;
	h ^= h >> 29;
	h *= p3;
	h ^= h >> 32;
	return h;
}

/* MurmurHash3 x64_128 (seed 0) of the 40-byte v6 flow key, low 64 bits:
 * two blocks and an 8-byte tail. */
static __always_inline __u64 murmur3_40(const __u64 *l)
{
	const __u64 c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
	__u64 h1 = 0, h2 = 0;
	for (int i = 0; i < 4; i += 2) {
		__u64 k1 = rotl64(l[i] * c1, 31) * c2;
		h1 ^= k1;
		h1 = (rotl64(h1, 27) + h2) * 5 + 0x52dce729;
		__u64 k2 = rotl64(l[i + 1] * c2, 33) * c1;
		h2 ^= k2;
		h2 = (rotl64(h2, 31) + h1) * 5 + 0x38495ab5;
	}
	h1 ^= rotl64(l[4] * c1, 31) * c2;
	h1 ^= 40;
	h2 ^= 40;
	h1 += h2;
	h2 += h1;
	h1 = fmix64(h1);
	h2 = fmix64(h2);
	return h1 + h2;
}

/* Rewrite a v6 address and a port: IPv6 has no header checksum, so only the
 * TCP/UDP checksum changes (its pseudo-header holds the address). */
static __always_inline void rewrite6(__u16 *l4sum, struct in6 *addr, __u16 *port, const struct in6 *new_addr,
				     __u16 new_port, int is_udp)
{
	if (!is_udp || *l4sum) {
		for (int i = 0; i < 4; i++)
			csum_replace(l4sum, addr->a[i], new_addr->a[i]);
		csum_replace(l4sum, *port, new_port);
		if (is_udp && *l4sum == 0)
			*l4sum = 0xffff;
	}
	*addr = *new_addr;
	*port = new_port;
}

/* As forward() for IPv6. */
static __always_inline int forward6(struct xdp_md *ctx, struct ethhdr *eth, struct ipv6hdr *ip6,
				    const struct in6 *next, __u32 slot)
{
	/* A backend's next hop is cached as for IPv4, in the same slot. */
	struct nexthop *nh = slot == NO_BACKEND ? 0 : bpf_map_lookup_elem(&nexthops, &slot);
	__u64 now = 0;
	if (nh) {
		now = bpf_jiffies64();
		if (nh->ip6[0] == next->a[0] && nh->ip6[1] == next->a[1] && nh->ip6[2] == next->a[2] &&
		    nh->ip6[3] == next->a[3] && nh->in_ifindex == ctx->ingress_ifindex && now < nh->expires)
			return send(ctx, eth, nh->dmac, nh->smac, nh->ifindex);
	}
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6;
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, next, 16);
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return count(T_KERNEL, XDP_PASS);
	if (nh) {
		__builtin_memcpy(nh->dmac, fib.dmac, ETH_ALEN);
		__builtin_memcpy(nh->smac, fib.smac, ETH_ALEN);
		__builtin_memcpy(nh->ip6, next, 16);
		nh->ip = 0;
		nh->in_ifindex = ctx->ingress_ifindex;
		nh->ifindex = fib.ifindex;
		nh->expires = now + NEXTHOP_TTL_JIFFIES;
	}
	return send(ctx, eth, fib.dmac, fib.smac, fib.ifindex);
}

/* The 5-tuple of an IPv6 packet whose TCP or UDP ports are at `ports`. */
static __always_inline struct flow_key6 flow_key6_of(const struct ipv6hdr *ip6, const __u16 *ports)
{
	struct flow_key6 key = { .sport = ports[0], .dport = ports[1], .proto = ip6->nexthdr };
	__builtin_memcpy(&key.saddr, &ip6->saddr, 16);
	__builtin_memcpy(&key.daddr, &ip6->daddr, 16);
	return key;
}

/* Is IPv6 next header `nh` an extension header (hop-by-hop, routing,
 * fragment, ESP, AH, destination options, mobility, HIP, shim6,
 * experimental)? */
static __always_inline int ipv6_ext(__u8 nh)
{
	return nh == 0 || nh == 43 || nh == 44 || nh == 50 || nh == 51 || nh == 60 || nh == 135 || nh == 139 ||
	       nh == 140 || nh == 253 || nh == 254;
}

/* Count and forward a v6 packet to backend `b` in `slot` (as balance()). */
static __always_inline int balance6(struct xdp_md *ctx, struct ethhdr *eth, struct ipv6hdr *ip6, __u16 *l4sum,
				    __u16 *ports, int is_udp, const struct flow_key6 *key, const struct backend *b,
				    __u32 slot, __u64 bytes, __u32 is_new, __u8 state, __u64 t)
{
	struct in6 *baddr = bpf_map_lookup_elem(&backends6, &slot);
	if (!baddr || !(b->flags & BACKEND_V6))
		return count(T_NO_BACKEND, XDP_DROP);
	add(&svc_stats, b->svc_id, bytes, is_new);
	add(&backend_stats, slot, bytes, is_new);
	if (b->flags & BACKEND_DSR)
		return forward6(ctx, eth, ip6, baddr, slot);
	if (is_new) {
		struct flow_key6 reply = {
			.saddr = *baddr,
			.daddr = key->saddr,
			.sport = b->port,
			.dport = key->sport,
			.proto = key->proto,
		};
		struct flow6 origin = {
			.backend = FLOW_REPLY,
			.vip = key->daddr,
			.port = key->dport,
			.state = state,
			.seen = t,
		};
		bpf_map_update_elem(&conntrack6, &reply, &origin, BPF_ANY);
	}
	struct in6 to = *baddr;
	rewrite6(l4sum, (struct in6 *)&ip6->daddr, &ports[1], &to, b->port, is_udp);
	return forward6(ctx, eth, ip6, &to, slot);
}

/* The IPv6 path: as the IPv4 one below. A packet
 * whose next header is not TCP or UDP goes to the kernel: counted as
 * `unsupported` if it is an extension header, as `passed` otherwise. */
static __always_inline int fulcrum_lb6(struct xdp_md *ctx, struct ethhdr *eth, void *data_end, __u64 bytes)
{
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return count(T_MALFORMED, XDP_DROP);
	if (ip6->version != 6 || (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len) > data_end)
		return count(T_MALFORMED, XDP_DROP);
	if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
		return count(ipv6_ext(ip6->nexthdr) ? T_UNSUPPORTED : T_PASS, XDP_PASS);
	int is_udp = ip6->nexthdr == IPPROTO_UDP;
	__u16 *ports = (void *)(ip6 + 1);
	__u16 *l4sum;
	__u8 tcp_flags = 0;
	if (is_udp) {
		struct udphdr *udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > data_end)
			return count(T_MALFORMED, XDP_DROP);
		l4sum = &udp->check;
	} else {
		struct tcphdr *tcp = (void *)(ip6 + 1);
		if ((void *)(tcp + 1) > data_end)
			return count(T_MALFORMED, XDP_DROP);
		l4sum = &tcp->check;
		tcp_flags = ((__u8 *)tcp)[13];
	}
	struct flow_key6 key = flow_key6_of(ip6, ports);

	const __u64 *lanes = (const __u64 *)&key;
	struct cache_ref cached = cache_ref(&flow_cache6, lanes, 5);
	__u64 now = bpf_jiffies64();
	__u32 cslot = 0;
	struct backend *cb = cache_backend(&cached, 5, tcp_flags, &cslot);
	if (cb && now - CACHE_META(&cached, 5)->refreshed < FLOW_CACHE_REFRESH_JIFFIES)
		return balance6(ctx, eth, ip6, l4sum, ports, is_udp, &key, cb, cslot, bytes, 0, 0, 0);

	__u64 t = bpf_ktime_get_coarse_ns();
	struct flow6 *known = bpf_map_lookup_elem(&conntrack6, &key);
	if (!known && cb) {
		CT_RESTORE(&conntrack6, struct flow6, &key, cslot, cb->gen, is_udp, t);
		CACHE_META(&cached, 5)->refreshed = now;
		return balance6(ctx, eth, ip6, l4sum, ports, is_udp, &key, cb, cslot, bytes, 0, 0, 0);
	}
	if (known) {
		__u8 st = ct_next_state(known->state, tcp_flags);
		if (known->backend == FLOW_REPLY) {
			if (st == CT_CLOSING && known->state != CT_CLOSING) {
				struct flow_key6 origin = {
					.saddr = key.daddr,
					.daddr = known->vip,
					.sport = key.dport,
					.dport = known->port,
					.proto = key.proto,
				};
				CT_CLOSE(&conntrack6, struct flow6, &origin, t);
			}
			known->state = st;
			known->seen = t;
			struct in6 vip = known->vip;
			rewrite6(l4sum, (struct in6 *)&ip6->saddr, &ports[0], &vip, known->port, is_udp);
			count(T_REPLY, 0);
			struct in6 client = key.daddr;
			return forward6(ctx, eth, ip6, &client, NO_BACKEND);
		}
		__u32 slot = known->backend;
		struct backend *b = bpf_map_lookup_elem(&backends, &slot);
		int reopened = known->state == CT_CLOSING && (tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
		if (b && b->gen == known->gen && (b->flags & BACKEND_ACTIVE) && !reopened &&
		    !ct_too_old(known->state, known->seen, t)) {
			if (st == CT_CLOSING && known->state != CT_CLOSING && !(b->flags & BACKEND_DSR)) {
				struct in6 *baddr = bpf_map_lookup_elem(&backends6, &slot);
				if (baddr) {
					struct flow_key6 reply = {
						.saddr = *baddr,
						.daddr = key.saddr,
						.sport = b->port,
						.dport = key.sport,
						.proto = key.proto,
					};
					CT_CLOSE(&conntrack6, struct flow6, &reply, t);
				}
			}
			known->state = st;
			known->seen = t;
			ct_cache(&cached, lanes, 5, slot, known->gen, st, now);
			return balance6(ctx, eth, ip6, l4sum, ports, is_udp, &key, b, slot, bytes, 0, 0, 0);
		}
	}

	struct svc_key6 sk = { .vip = key.daddr, .port = ports[1], .proto = key.proto };
	struct svc_value *svc = bpf_map_lookup_elem(&services6, &sk);
	if (!svc)
		return count(T_PASS, XDP_PASS);
	__u64 h = (svc->flags & SVC_MURMUR3) ? murmur3_40(lanes) : xxh64_40(lanes);
	__u32 entry = svc->id * RING_SIZE + (__u32)(h % RING_SIZE);
	__u32 *idx = bpf_map_lookup_elem(&ring, &entry);
	if (!idx || *idx == NO_BACKEND)
		return count(T_NO_BACKEND, XDP_DROP);
	__u32 slot = *idx;
	struct backend *b = bpf_map_lookup_elem(&backends, &slot);
	if (!b || !(b->flags & BACKEND_ACTIVE))
		return count(T_NO_BACKEND, XDP_DROP);
	__u8 st = ct_first_state(is_udp, tcp_flags);
	struct flow6 remember = { .backend = slot, .gen = b->gen, .state = st, .seen = t };
	bpf_map_update_elem(&conntrack6, &key, &remember, BPF_ANY);
	ct_cache(&cached, lanes, 5, slot, b->gen, st, now);
	return balance6(ctx, eth, ip6, l4sum, ports, is_udp, &key, b, slot, bytes, 1, st, t);
}

#ifdef FULCRUM_BENCH
#include "bench.h"
#endif

SEC("xdp")
int fulcrum_lb(struct xdp_md *ctx)
{
#ifdef FULCRUM_BENCH
	bench_prologue(ctx);
#endif
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 bytes = data_end - data;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count(T_PASS, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return fulcrum_lb6(ctx, eth, data_end, bytes);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return count(T_PASS, XDP_PASS);

	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return count(T_MALFORMED, XDP_DROP);
	if (ip->version != 4 || ip->ihl < 5 || bpf_ntohs(ip->tot_len) < ip->ihl * 4 ||
	    (void *)ip + bpf_ntohs(ip->tot_len) > data_end)
		return count(T_MALFORMED, XDP_DROP);
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return count(T_PASS, XDP_PASS);
	/* Options and fragments are legal but rare: leave them to the kernel
	 * rather than hash a fragment without ports. */
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
		return count(T_UNSUPPORTED, XDP_PASS);

	int is_udp = ip->protocol == IPPROTO_UDP;
	__u16 *ports = (void *)(ip + 1);
	__u16 *l4sum;
	__u8 tcp_flags = 0;
	if (is_udp) {
		struct udphdr *udp = (void *)(ip + 1);
		if ((void *)(udp + 1) > data_end)
			return count(T_MALFORMED, XDP_DROP);
		l4sum = &udp->check;
	} else {
		struct tcphdr *tcp = (void *)(ip + 1);
		if ((void *)(tcp + 1) > data_end)
			return count(T_MALFORMED, XDP_DROP);
		l4sum = &tcp->check;
		tcp_flags = ((__u8 *)tcp)[13];
	}

	struct flow_key key = flow_key_of(ip, ports);
	/* A flow this CPU has seen recently: no hash lookup. */
	const __u64 *lanes = (const __u64 *)&key;
	struct cache_ref cached = cache_ref(&flow_cache, lanes, 2);
	__u64 now = bpf_jiffies64();
	__u32 cslot = 0;
	struct backend *cb = cache_backend(&cached, 2, tcp_flags, &cslot);
	if (cb && now - CACHE_META(&cached, 2)->refreshed < FLOW_CACHE_REFRESH_JIFFIES)
		return balance(ctx, eth, ip, l4sum, ports, is_udp, &key, cb, cslot, bytes, 0, 0, 0);

	/* Otherwise the conntrack map: one hash lookup. */
	struct flow *known = bpf_map_lookup_elem(&conntrack, &key);
	if (!known && cb) {
		CT_RESTORE(&conntrack, struct flow, &key, cslot, cb->gen, is_udp, bpf_ktime_get_coarse_ns());
		CACHE_META(&cached, 2)->refreshed = now;
		return balance(ctx, eth, ip, l4sum, ports, is_udp, &key, cb, cslot, bytes, 0, 0, 0);
	}
	/* The entries' clock, read only where an entry is stamped. */
	__u64 t = 0;
	if (known) {
		t = bpf_ktime_get_coarse_ns();
		__u8 st = ct_next_state(known->state, tcp_flags);
		if (known->backend == FLOW_REPLY) {
			if (st == CT_CLOSING && known->state != CT_CLOSING) {
				struct flow_key origin = {
					.saddr = key.daddr,
					.daddr = known->vip,
					.sport = key.dport,
					.dport = known->port,
					.proto = key.proto,
				};
				CT_CLOSE(&conntrack, struct flow, &origin, t);
			}
			known->state = st;
			known->seen = t;
			rewrite(ip, l4sum, &ip->saddr, &ports[0], known->vip, known->port, is_udp);
			count(T_REPLY, 0);
			return forward(ctx, eth, ip, ip->daddr, NO_BACKEND);
		}
		__u32 slot = known->backend;
		struct backend *b = bpf_map_lookup_elem(&backends, &slot);
		int reopened = known->state == CT_CLOSING && (tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
		if (b && b->gen == known->gen && (b->flags & BACKEND_ACTIVE) && !reopened && !ct_expired(known, t)) {
			if (st == CT_CLOSING && known->state != CT_CLOSING && !(b->flags & BACKEND_DSR)) {
				struct flow_key reply = {
					.saddr = b->ip,
					.daddr = key.saddr,
					.sport = b->port,
					.dport = key.sport,
					.proto = key.proto,
				};
				CT_CLOSE(&conntrack, struct flow, &reply, t);
			}
			known->state = st;
			known->seen = t;
			ct_cache(&cached, lanes, 2, slot, known->gen, st, now);
			return balance(ctx, eth, ip, l4sum, ports, is_udp, &key, b, slot, bytes, 0, 0, 0);
		}
		/* Its backend has left, it expired, or a SYN reopens a closed
		 * flow: a new flow. */
	}

	struct svc_key sk = { .vip = ip->daddr, .port = ports[1], .proto = ip->protocol };
	struct svc_value *svc = bpf_map_lookup_elem(&services, &sk);
	if (!svc)
		return count(T_PASS, XDP_PASS);
	__u32 entry = svc->id * RING_SIZE + (__u32)(flow_hash(&key, svc->flags) % RING_SIZE);
	__u32 *idx = bpf_map_lookup_elem(&ring, &entry);
	if (!idx || *idx == NO_BACKEND)
		return count(T_NO_BACKEND, XDP_DROP);
	__u32 slot = *idx;
	struct backend *b = bpf_map_lookup_elem(&backends, &slot);
	if (!b || !(b->flags & BACKEND_ACTIVE))
		return count(T_NO_BACKEND, XDP_DROP);
	if (!known)
		t = bpf_ktime_get_coarse_ns();
	__u8 st = ct_first_state(is_udp, tcp_flags);
	struct flow remember = { .backend = slot, .gen = b->gen, .state = st, .seen = t };
	bpf_map_update_elem(&conntrack, &key, &remember, BPF_ANY);
	ct_cache(&cached, lanes, 2, slot, b->gen, st, now);
	return balance(ctx, eth, ip, l4sum, ports, is_udp, &key, b, slot, bytes, 1, st, t);
}

/* bpf_fib_lookup is GPL-only: the kernel reads this string to allow it. */
char LICENSE[] SEC("license") = "GPL";
