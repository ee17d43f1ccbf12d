#include "base/metrics.h"

#include "base/assert.h"

namespace fjord::base {

namespace {
constexpr std::string_view status_class_names[status_class_count] = {"2xx", "3xx", "4xx", "5xx"};

void append_help(std::string& out, std::string_view name, std::string_view type,
                 std::string_view help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

void append_sample(std::string& out, std::string_view name, std::string_view labels,
                   std::string_view value) {
    out += name;
    if (!labels.empty()) {
        out += '{';
        out += labels;
        out += '}';
    }
    out += ' ';
    out += value;
    out += '\n';
}

void append_counter(std::string& out, std::string_view name, std::string_view help,
                    std::uint64_t value) {
    append_help(out, name, "counter", help);
    append_sample(out, name, {}, std::to_string(value));
}
}  // namespace

std::string_view operation_class_name(operation_class op) {
    switch (op) {
        case operation_class::read: return "read";
        case operation_class::write: return "write";
        case operation_class::remove: return "delete";
        case operation_class::list: return "list";
        case operation_class::multipart: return "multipart";
        case operation_class::bucket: return "bucket";
        case operation_class::admin: return "admin";
        case operation_class::other: return "other";
        case operation_class::count: break;
    }
    FJORD_UNREACHABLE("operation class out of range");
}

void metrics::shard::count_request(operation_class op, int http_status) {
    if (http_status < 200 || http_status > 599) return;
    FJORD_ASSERT(op < operation_class::count);
    bump(_requests[static_cast<std::size_t>(op)][static_cast<std::size_t>(http_status / 100 - 2)],
         1);
}

metrics::metrics(unsigned cores)
    : _cores(cores), _shards(std::make_unique<padded_shard[]>(cores + 1)) {}

metrics::shard& metrics::for_core(unsigned core) {
    FJORD_ASSERT(core < _cores, "no metrics shard for this core");
    return _shards[core];
}

metrics_snapshot metrics::collect() const {
    metrics_snapshot s;
    for (unsigned i = 0; i <= _cores; ++i) {
        const shard& sh = _shards[i];
        for (std::size_t c = 0; c < s.counters.size(); ++c)
            s.counters[c] += sh._counters[c].load(std::memory_order_relaxed);
        for (std::size_t g = 0; g < s.gauges.size(); ++g)
            s.gauges[g] += sh._gauges[g].load(std::memory_order_relaxed);
        for (std::size_t op = 0; op < s.requests.size(); ++op)
            for (std::size_t st = 0; st < status_class_count; ++st)
                s.requests[op][st] += sh._requests[op][st].load(std::memory_order_relaxed);
    }
    return s;
}

namespace {
// The queues whose length no option sets: key-lock waiters and the cross-core overflow lists.
void append_queue_figures(std::string& out, const storage_figures& s) {
    append_help(out, "fjord_key_lock_waits_total", "counter",
                "Commits that waited for another commit of the same key.");
    append_sample(out, "fjord_key_lock_waits_total", {}, std::to_string(s.key_lock_waits));
    append_help(out, "fjord_key_lock_waiters_peak", "gauge",
                "The longest line of commits behind one key lock since start.");
    append_sample(out, "fjord_key_lock_waiters_peak", {}, std::to_string(s.key_lock_waiters_peak));
    append_help(out, "fjord_cross_core_overflow_total", "counter",
                "Cross-core messages that found their queue full and waited in the sender's list.");
    append_sample(out, "fjord_cross_core_overflow_total", {},
                  std::to_string(s.cross_core_overflowed));
    append_help(out, "fjord_cross_core_overflow_peak", "gauge",
                "The longest a core's cross-core overflow list has been since start.");
    append_sample(out, "fjord_cross_core_overflow_peak", {},
                  std::to_string(s.cross_core_overflow_peak));
}
}  // namespace

std::string render_prometheus(const metrics_snapshot& s, const storage_figures& storage) {
    std::string out;
    out.reserve(4096);
    append_help(out, "fjord_requests_total", "counter",
                "Requests answered, by S3 operation class and HTTP status class.");
    for (std::size_t op = 0; op < s.requests.size(); ++op) {
        for (std::size_t st = 0; st < status_class_count; ++st) {
            std::string labels = "operation=\"";
            labels += operation_class_name(static_cast<operation_class>(op));
            labels += "\",status=\"";
            labels += status_class_names[st];
            labels += '"';
            append_sample(out, "fjord_requests_total", labels, std::to_string(s.requests[op][st]));
        }
    }
    append_counter(out, "fjord_bytes_received_total",
                   "Bytes read from client connections (heads and bodies).",
                   s.get(counter::bytes_received));
    append_counter(out, "fjord_bytes_sent_total", "Bytes written to client connections.",
                   s.get(counter::bytes_sent));
    append_help(out, "fjord_connections_open", "gauge", "Client connections open now.");
    append_sample(out, "fjord_connections_open", {},
                  std::to_string(s.get(gauge::connections_open)));
    append_counter(out, "fjord_connections_accepted_total", "Client connections accepted.",
                   s.get(counter::connections_accepted));
    append_counter(out, "fjord_connections_refused_total",
                   "Connections refused with 503 because the core had --max-connections open.",
                   s.get(counter::connections_refused));
    append_counter(
        out, "fjord_slowdown_total",
        "Requests answered 503 SlowDown because their connection exceeded its request rate.",
        s.get(counter::slowdowns));
    append_help(
        out, "fjord_request_timeouts_total", "counter",
        "Transfers cut for being too slow or stalled: request bodies (receive, answered RequestTimeout) "
        "and responses (send, connection closed).");
    append_sample(out, "fjord_request_timeouts_total", "direction=\"receive\"",
                  std::to_string(s.get(counter::receive_timeouts)));
    append_sample(out, "fjord_request_timeouts_total", "direction=\"send\"",
                  std::to_string(s.get(counter::send_timeouts)));
    append_counter(
        out, "fjord_data_corrupted_total",
        "Reads of stored data that failed verification (checksum mismatch or missing data file).",
        s.get(counter::data_corrupted));
    append_counter(
        out, "fjord_tls_handshake_failures_total",
        "Connections closed because their TLS handshake failed or did not finish in time.",
        s.get(counter::tls_handshake_failures));
    append_help(
        out, "fjord_spare_data_files_total", "counter",
        "Data files of replaced or deleted objects: kept as spares for reuse, reused by a write, or "
        "removed (too small, shared, being read, over --spare-data-mib, or freed for space).");
    append_sample(out, "fjord_spare_data_files_total", "event=\"kept\"",
                  std::to_string(storage.spare_files_kept));
    append_sample(out, "fjord_spare_data_files_total", "event=\"reused\"",
                  std::to_string(storage.spare_files_reused));
    append_sample(out, "fjord_spare_data_files_total", "event=\"removed\"",
                  std::to_string(storage.spare_files_removed));
    append_help(out, "fjord_spare_data_bytes", "gauge",
                "Bytes held by spare data files now, all drives.");
    append_sample(out, "fjord_spare_data_bytes", {}, std::to_string(storage.spare_bytes));
    append_help(out, "fjord_space_reserved_ahead_bytes", "gauge",
                "Bytes preallocated for uploads ahead of the body bytes received, all drives.");
    append_sample(out, "fjord_space_reserved_ahead_bytes", {},
                  std::to_string(storage.reserved_ahead_bytes));
    append_queue_figures(out, storage);
    return out;
}

}  // namespace fjord::base
