#pragma once

// Process-wide counters for operators, exposed as Prometheus text (`GET /metrics`).
//
// One `metrics` object is made at start-up and shared by every core. It holds one shard per core (plus one
// for any other thread), each on its own cache lines, so a core only ever writes its own lines: an
// increment is a relaxed atomic add with no sharing between cores. `collect()` may run on any thread; it
// sums the shards with relaxed loads, so a snapshot is not one instant across counters, but each counter
// is exact and never goes backwards. The set of metrics is fixed here, like the error table in error.h.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fjord::base {

// What a request asked for, coarsely (the `operation` label of fjord_requests_total).
enum class operation_class : std::uint8_t {
    read,       // GetObject, HeadObject, GetObjectTagging, GetObjectAttributes
    write,      // PutObject, UploadPart, CopyObject, UploadPartCopy, PutObjectTagging
    remove,     // DeleteObject, DeleteObjects, DeleteObjectTagging
    list,       // ListBuckets, ListObjects(V2), ListParts, ListMultipartUploads
    multipart,  // CreateMultipartUpload, CompleteMultipartUpload, AbortMultipartUpload
    bucket,     // CreateBucket, DeleteBucket, HeadBucket, GetBucketLocation
    admin,      // /health/*, /metrics
    other,      // anything not routed to an operation (malformed, unsupported)
    count,
};
std::string_view operation_class_name(operation_class op);

// Plain counters: each only grows.
enum class counter : std::uint8_t {
    bytes_received,  // bytes read from client sockets (heads and bodies, with framing)
    bytes_sent,      // bytes written to client sockets
    connections_accepted,
    connections_refused,  // over --max-connections: answered 503 and closed
    slowdowns,            // requests answered 503 SlowDown by the per-connection request rate
    receive_timeouts,  // request bodies cut: too slow (--min-body-rate-*) or stalled (--io-timeout-ms)
    send_timeouts,     // responses cut: the client read too slowly or stopped reading
    data_corrupted,  // reads that found stored data damaged (checksum mismatch, missing file)
    tls_handshake_failures,  // connections closed because their TLS handshake failed or stalled
    count,
};

// Values that go up and down.
enum class gauge : std::uint8_t {
    connections_open,
    count,
};

inline constexpr std::size_t status_class_count = 4;  // 2xx, 3xx, 4xx, 5xx

// Everything at one moment (per counter; see the class comment), summed over the shards.
struct metrics_snapshot {
    std::array<std::uint64_t, static_cast<std::size_t>(counter::count)> counters{};
    std::array<std::int64_t, static_cast<std::size_t>(gauge::count)> gauges{};
    // requests[operation][status class], status class 0 = 2xx ... 3 = 5xx.
    std::array<std::array<std::uint64_t, status_class_count>,
               static_cast<std::size_t>(operation_class::count)>
        requests{};

    std::uint64_t get(counter c) const { return counters[static_cast<std::size_t>(c)]; }
    std::int64_t get(gauge g) const { return gauges[static_cast<std::size_t>(g)]; }
};

class metrics {
public:
    // The counters of one core. Written by that core only (any thread may use the extra shard).
    class shard {
    public:
        void add(counter c, std::uint64_t n = 1) {
            bump(_counters[static_cast<std::size_t>(c)], n);
        }
        void add(gauge g, std::int64_t delta) {
            _gauges[static_cast<std::size_t>(g)].fetch_add(delta, std::memory_order_relaxed);
        }
        // Counts one answered request. Statuses outside 200..599 (interim answers) are not counted.
        void count_request(operation_class op, int http_status);

    private:
        friend class metrics;
        static void bump(std::atomic<std::uint64_t>& v, std::uint64_t n) {
            v.fetch_add(n, std::memory_order_relaxed);
        }
        std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(counter::count)>
            _counters{};
        std::array<std::atomic<std::int64_t>, static_cast<std::size_t>(gauge::count)> _gauges{};
        std::array<std::array<std::atomic<std::uint64_t>, status_class_count>,
                   static_cast<std::size_t>(operation_class::count)>
            _requests{};
    };

    // `cores` shards for the reactors, plus one for every other thread.
    explicit metrics(unsigned cores);
    metrics(const metrics&) = delete;
    metrics& operator=(const metrics&) = delete;

    // The shard of reactor core `core` (< cores), or the shared one for a thread that is no reactor.
    shard& for_core(unsigned core);
    shard& shared() { return _shards[_cores]; }
    unsigned cores() const { return _cores; }
    metrics_snapshot collect() const;

private:
    // Padding keeps two shards from sharing a cache line at their boundary.
    struct alignas(64) padded_shard : shard {};
    unsigned _cores;
    std::unique_ptr<padded_shard[]> _shards;
};

// Figures the storage engine keeps itself (not per-core counters), filled in by the caller of
// render_prometheus: spare data files (store/spare_files.h).
struct storage_figures {
    std::uint64_t spare_files_kept = 0;
    std::uint64_t spare_files_reused = 0;
    std::uint64_t spare_files_removed = 0;
    std::uint64_t spare_bytes = 0;
    std::uint64_t reserved_ahead_bytes =
        0;  // preallocated for uploads ahead of their received bytes
    std::uint64_t key_lock_waits = 0;
    std::uint64_t key_lock_waiters_peak = 0;
    std::uint64_t cross_core_overflowed = 0;  // io::cross_core_overflow()
    std::uint64_t cross_core_overflow_peak = 0;
};

// Prometheus text exposition format 0.0.4: HELP and TYPE for every metric, names prefixed `fjord_`.
std::string render_prometheus(const metrics_snapshot& snapshot,
                              const storage_figures& storage = {});
inline constexpr std::string_view prometheus_content_type =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace fjord::base
