// `fjord bench s3`: PUT / GET / mixed throughput and latency of an S3 server through the native client,
// and the latency of the small requests: HEAD, DELETE (each after an untimed PUT of its key) and
// ListObjectsV2 pages of 1000 keys over the prepared object set.
//
// Workers are coroutines, `concurrency` of them, worker w on reactor w % cores; each owns one
// keep-alive connection and does one request at a time. PUT bodies come from one pre-filled random pool
// (no per-operation generation cost); GETs land in a per-worker buffer that is touched before the clock
// starts. The run has up to three phases, each on a fresh reactor group: create the bucket, prepare the
// objects a GET needs (HEAD each; PUT what is missing), then measure. Each worker records into its own
// statistics (no sharing between cores); they are merged at the end.
//
// Keys: the object set is `objects` keys bench/<i % concurrency>/<i / concurrency>; worker w PUTs
// bench/<w>/<n mod objects/concurrency> and GETs the keys bench/<w>/..., so disk use stays bounded in
// a long PUT run, and a GET run after a PUT run with the same bucket, size and concurrency reuses its
// objects.

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/units.h"
#include "bench/bench.h"
#include "bench/cpu.h"
#include "cli/options.h"
#include "bench/histogram.h"
#include "bench/report.h"
#include "cli/progress.h"
#include "client/runtime.h"
#include "client/s3_client.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::bench {

namespace {

enum class op_kind { put, get, mixed, head, del, list };

constexpr unsigned max_consecutive_errors =
    10;  // a worker gives up after this many failures in a row
constexpr std::uint64_t default_set_bytes =
    1 * base::GiB;  // GET object set, unless --objects says otherwise
constexpr std::uint64_t default_small_size_bytes = 4 * base::KiB;  // head, delete, list
constexpr std::uint64_t default_small_objects = 1000;              // head, delete
constexpr std::uint64_t default_list_objects = 2000;               // list: two full pages
constexpr unsigned list_page_keys = 1000;

struct s3_config {
    client::client_options target;  // endpoint and TLS only
    std::string endpoint_text;
    std::string bucket;
    op_kind op = op_kind::put;
    std::uint64_t size_bytes = 64 * base::MiB;
    unsigned concurrency = 8;
    double duration_s = 10;
    std::uint64_t count = 0;  // 0: run for duration_s
    unsigned cores = 2;
    std::uint64_t objects = 0;  // a multiple of concurrency
    bool verify = false;
    bool unique_bodies =
        false;  // every PUT body differs (a different window of a larger random pool)
    // --trailer crc32c|crc64nvme: aws-chunked bodies with a checksum trailer
    client::put_options put;
    long server_pid = 0;
    std::string json_path;
    std::string report_dir;
    auth::credentials credentials;
};

// The ops that need the object set to exist before the clock starts.
bool needs_objects(op_kind op) { return op != op_kind::put && op != op_kind::del; }

struct op_stats {
    std::uint64_t operations = 0;
    std::uint64_t bytes = 0;
    latency_histogram latency;
};

// One worker's figures; written only by that worker's core until the phase's reactors have stopped.
struct worker_stats {
    op_stats put;
    op_stats get;
    op_stats small;  // head, delete or list
    std::uint64_t listed_keys = 0;
    std::uint64_t errors = 0;
    std::uint64_t verify_failures = 0;
    std::uint64_t prepared = 0;
    std::uint64_t reused = 0;
    std::string first_error;
    std::int64_t first_start_ns = INT64_MAX;
    std::int64_t last_end_ns = 0;
};

struct shared_run {
    const s3_config* config = nullptr;
    client::client_options client;
    std::span<const std::byte> data;        // the PUT pool, read-only (size_bytes, or more)
    std::uint64_t unique_window_bytes = 0;  // with unique_bodies: the spread of body offsets
    std::vector<std::span<std::byte>> destinations;  // one GET buffer per worker
    std::vector<worker_stats> stats;                 // one per worker
    io::reactor_group* group = nullptr;
    cli::progress_line* progress = nullptr;  // during the measured phase
    std::atomic<unsigned> workers_left{0};
    std::atomic<std::uint64_t> next_operation{0};
    std::atomic<std::uint64_t> next_body{0};
    std::int64_t deadline_ns = 0;

    bool claim_operation() {
        if (config->count > 0)
            return next_operation.fetch_add(1, std::memory_order_relaxed) < config->count;
        return base::monotonic_now_ns() < deadline_ns;
    }
};

using worker_function = io::task<void> (*)(shared_run* run, unsigned worker);

std::string object_key(const s3_config& cfg, std::uint64_t index) {
    return "bench/" + std::to_string(index % cfg.concurrency) + "/" +
           std::to_string(index / cfg.concurrency);
}

std::uint64_t next_random(std::uint64_t& state) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
}

void note_error(worker_stats& st, const std::string& what, const base::error& err) {
    ++st.errors;
    if (st.first_error.empty()) st.first_error = what + ": " + err.message;
}

// ---- phases (coroutines: plain functions taking their arguments by value) ----

io::task<void> create_bucket_worker(shared_run* run, unsigned worker) {
    client::s3_client client(run->client);
    auto r = co_await client.create_bucket(run->config->bucket);
    if (!r) note_error(run->stats[worker], "create bucket " + run->config->bucket, r.err());
}

io::task<void> prepare_worker(shared_run* run, unsigned worker) {
    const s3_config& cfg = *run->config;
    worker_stats& st = run->stats[worker];
    client::s3_client client(run->client);
    for (std::uint64_t i = worker; i < cfg.objects && st.errors == 0; i += cfg.concurrency) {
        std::string key = object_key(cfg, i);
        auto head = co_await client.head_object(cfg.bucket, key);
        if (!head) {
            note_error(st, "HEAD " + key, head.err());
            break;
        }
        if (*head && (*head)->size_bytes == cfg.size_bytes) {
            ++st.reused;
            continue;
        }
        auto put =
            co_await client.put_object(cfg.bucket, key, run->data.first(cfg.size_bytes), cfg.put);
        if (!put)
            note_error(st, "PUT " + key, put.err());
        else
            ++st.prepared;
    }
}

// What one measured operation did: its timed interval, and which statistics it counts in.
struct op_outcome {
    bool ok = false;
    std::int64_t start_ns = 0, end_ns = 0;
    std::uint64_t bytes = 0;
    op_stats worker_stats::* into = &worker_stats::put;
};

io::task<op_outcome> transfer_op(shared_run* run, unsigned worker, client::s3_client* client,
                                 std::string key, bool is_put) {
    const s3_config& cfg = *run->config;
    worker_stats& st = run->stats[worker];
    op_outcome out{false, base::monotonic_now_ns(), 0, cfg.size_bytes,
                   is_put ? &worker_stats::put : &worker_stats::get};
    if (is_put) {
        std::span<const std::byte> body = run->data.first(cfg.size_bytes);
        if (cfg.unique_bodies) {
            // 8-byte-aligned windows whose offsets differ modulo 4 KiB for 512 bodies in a row, so no 4 KiB
            // block of one object repeats a block of another among them (a storage layer cannot dedup them).
            std::uint64_t n = run->next_body.fetch_add(1, std::memory_order_relaxed);
            body = run->data.subspan((n * 8 * 1021) % run->unique_window_bytes, cfg.size_bytes);
        }
        auto r = co_await client->put_object(cfg.bucket, key, body, cfg.put);
        if (!r) note_error(st, "PUT " + key, r.err());
        out.ok = r.has_value();
    } else {
        auto r = co_await client->get_object(cfg.bucket, key, run->destinations[worker]);
        if (!r)
            note_error(st, "GET " + key, r.err());
        else if (r->size_bytes != cfg.size_bytes)
            note_error(st, "GET " + key,
                       {base::errc::internal, "size " + std::to_string(r->size_bytes)});
        else if (cfg.verify && std::memcmp(run->destinations[worker].data(), run->data.data(),
                                           cfg.size_bytes) != 0) {
            ++st.verify_failures;
            note_error(st, "GET " + key,
                       {base::errc::data_corrupted, "content differs from what was PUT"});
        } else
            out.ok = true;
    }
    out.end_ns = base::monotonic_now_ns();
    co_return out;
}

// HEAD of an existing key, or DELETE of a key PUT just before (the PUT is not timed).
io::task<op_outcome> head_or_delete_op(shared_run* run, unsigned worker, client::s3_client* client,
                                       std::string key) {
    const s3_config& cfg = *run->config;
    worker_stats& st = run->stats[worker];
    op_outcome out{false, 0, 0, 0, &worker_stats::small};
    if (cfg.op == op_kind::head) {
        out.start_ns = base::monotonic_now_ns();
        auto r = co_await client->head_object(cfg.bucket, key);
        out.end_ns = base::monotonic_now_ns();
        if (!r)
            note_error(st, "HEAD " + key, r.err());
        else if (!*r)
            note_error(st, "HEAD " + key, {base::errc::no_such_key, "missing"});
        else
            out.ok = true;
        co_return out;
    }
    auto put =
        co_await client->put_object(cfg.bucket, key, run->data.first(cfg.size_bytes), cfg.put);
    if (!put) {
        note_error(st, "PUT " + key, put.err());
        co_return out;
    }
    out.start_ns = base::monotonic_now_ns();
    auto r = co_await client->delete_object(cfg.bucket, key);
    out.end_ns = base::monotonic_now_ns();
    if (!r) note_error(st, "DELETE " + key, r.err());
    out.ok = r.has_value();
    co_return out;
}

// One ListObjectsV2 page of the object set; `token` carries the worker's place between pages.
io::task<op_outcome> list_op(shared_run* run, unsigned worker, client::s3_client* client,
                             std::string* token) {
    const s3_config& cfg = *run->config;
    worker_stats& st = run->stats[worker];
    op_outcome out{false, base::monotonic_now_ns(), 0, 0, &worker_stats::small};
    auto page = co_await client->list_objects(cfg.bucket, {"bench/", "", *token, list_page_keys});
    out.end_ns = base::monotonic_now_ns();
    if (!page) {
        note_error(st, "LIST", page.err());
        co_return out;
    }
    st.listed_keys += page->objects.size();
    *token = page->truncated ? page->next_continuation_token : std::string();
    out.ok = true;
    co_return out;
}

io::task<void> measure_worker(shared_run* run, unsigned worker) {
    const s3_config& cfg = *run->config;
    worker_stats& st = run->stats[worker];
    client::s3_client client(run->client);
    std::uint64_t keys_per_worker = cfg.objects / cfg.concurrency;
    std::uint64_t rng = 0x9E3779B97F4A7C15ULL * (worker + 1);
    std::string list_token;
    unsigned consecutive_errors = 0;
    for (std::uint64_t n = 0; consecutive_errors < max_consecutive_errors && run->claim_operation();
         ++n) {
        std::uint64_t index =
            worker + (n % keys_per_worker) * cfg.concurrency;  // one of this worker's keys
        std::string key = object_key(cfg, index);
        op_outcome r;
        if (cfg.op == op_kind::list)
            r = co_await list_op(run, worker, &client, &list_token);
        else if (cfg.op == op_kind::head || cfg.op == op_kind::del)
            r = co_await head_or_delete_op(run, worker, &client, key);
        else {
            bool is_put =
                cfg.op == op_kind::put || (cfg.op == op_kind::mixed && (next_random(rng) & 1) != 0);
            r = co_await transfer_op(run, worker, &client, key, is_put);
        }
        consecutive_errors = r.ok ? 0 : consecutive_errors + 1;
        if (!r.ok) continue;
        op_stats& s = st.*r.into;
        ++s.operations;
        s.bytes += r.bytes;
        s.latency.record(static_cast<std::uint64_t>((r.end_ns - r.start_ns) / 1000));
        st.first_start_ns = std::min(st.first_start_ns, r.start_ns);
        st.last_end_ns = std::max(st.last_end_ns, r.end_ns);
        if (run->progress) run->progress->add(1, r.bytes);
    }
}

io::task<void> run_worker(shared_run* run, unsigned worker, worker_function fn) {
    co_await fn(run, worker);
    if (run->workers_left.fetch_sub(1) == 1) run->group->stop();
}

// Runs fn for `workers` workers spread over the configured cores; returns when all have finished.
void run_phase(shared_run& run, unsigned workers, worker_function fn) {
    unsigned cores = std::min(run.config->cores, workers);
    io::reactor_group group(cores);
    run.group = &group;
    run.workers_left.store(workers);
    group.run([&run, workers, cores, fn](unsigned core) {
        for (unsigned w = core; w < workers; w += cores) io::spawn(run_worker(&run, w, fn));
    });
    run.group = nullptr;
}

// ---- configuration ----

base::result<op_kind> parse_op(std::string_view op) {
    if (op == "put") return op_kind::put;
    if (op == "get") return op_kind::get;
    if (op == "mixed") return op_kind::mixed;
    if (op == "head") return op_kind::head;
    if (op == "delete") return op_kind::del;
    if (op == "list") return op_kind::list;
    return base::fail(base::errc::invalid_argument,
                      "--op must be put, get, mixed, head, delete or list");
}

base::result<void> parse_trailer(std::string_view trailer, client::put_options& put) {
    if (trailer == "crc32c")
        put.crc32c_trailer = true;
    else if (trailer == "crc64nvme")
        put.crc64nvme_trailer = true;
    else if (!trailer.empty())
        return base::fail(base::errc::invalid_argument, "--trailer must be crc32c or crc64nvme");
    return {};
}

// The object set, unless --objects gives it: about 1 GiB (at least one object per worker, at most 1024
// per worker), rounded up to a multiple of the concurrency so that every worker owns the same number
// of keys.
std::uint64_t object_set_size(const s3_config& cfg, std::uint64_t objects) {
    bool small_op = cfg.op == op_kind::head || cfg.op == op_kind::del || cfg.op == op_kind::list;
    std::uint64_t set = objects ? objects
                                : std::clamp<std::uint64_t>(default_set_bytes / cfg.size_bytes, 1,
                                                            1024ULL * cfg.concurrency);
    if (small_op && !objects)
        set = cfg.op == op_kind::list ? default_list_objects : default_small_objects;
    return base::align_up(std::max<std::uint64_t>(set, cfg.concurrency), cfg.concurrency);
}

base::result<s3_config> parse_s3_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {
        "endpoint", "bucket",  "op",         "size", "concurrency", "duration", "count",
        "cores",    "objects", "server-pid", "json", "trailer",     "report",   "ca-cert"};
    static constexpr std::string_view flags[] = {"verify", "unique-bodies"};
    auto opts = cli::command_options::parse(argc, argv, with_value, flags);
    if (!opts) return opts.as_failure();
    s3_config cfg;
    cfg.endpoint_text = opts->text("endpoint", "http://127.0.0.1:9000");
    // An https server is verified against --ca-cert, or the system's CAs without it.
    FJORD_TRY(client::configure_endpoint(cfg.target, cfg.endpoint_text, opts->text("ca-cert")));
    cfg.bucket = opts->text("bucket");
    if (cfg.bucket.empty()) return base::fail(base::errc::invalid_argument, "--bucket is required");
    auto op = parse_op(opts->text("op"));
    if (!op) return op.as_failure();
    cfg.op = *op;
    const bool small_op =
        cfg.op == op_kind::head || cfg.op == op_kind::del || cfg.op == op_kind::list;
    if (opts->has("duration") && opts->has("count"))
        return base::fail(base::errc::invalid_argument, "give --duration or --count, not both");
    auto size = opts->size("size", small_op ? default_small_size_bytes : 64 * base::MiB);
    auto concurrency = opts->number("concurrency", 8), count = opts->number("count", 0),
         cores = opts->number("cores", 2), objects = opts->number("objects", 0),
         pid = opts->number("server-pid", 0);
    auto duration = opts->seconds("duration", 10);
    if (!size) return size.as_failure();
    if (!duration) return duration.as_failure();
    if (!concurrency || !count || !cores || !objects || !pid)
        return base::fail(base::errc::invalid_argument, "bad number");
    if (*size < 1 || *size > 5 * base::GiB)
        return base::fail(base::errc::invalid_argument, "--size must be 1 B..5 GiB");
    if (*concurrency < 1 || *concurrency > 4096 || *cores < 1 || *cores > 256)
        return base::fail(base::errc::invalid_argument,
                          "need --concurrency 1..4096 and --cores 1..256");
    if (opts->has("count") && *count < 1)
        return base::fail(base::errc::invalid_argument, "--count must be >= 1");
    cfg.size_bytes = *size;
    cfg.concurrency = static_cast<unsigned>(*concurrency);
    cfg.count = *count;
    cfg.duration_s = *duration;
    cfg.cores = static_cast<unsigned>(*cores);
    cfg.verify = opts->has("verify");
    cfg.unique_bodies = opts->has("unique-bodies");
    if (cfg.verify && cfg.unique_bodies)
        return base::fail(base::errc::invalid_argument,
                          "--verify compares with one body: not with --unique-bodies");
    FJORD_TRY(parse_trailer(opts->text("trailer"), cfg.put));
    cfg.server_pid = static_cast<long>(*pid);
    cfg.json_path = opts->text("json");
    cfg.report_dir = opts->text("report");
    cfg.objects = object_set_size(cfg, *objects);
    cfg.credentials = client::credentials_from_environment();
    return cfg;
}

// ---- results ----

struct totals {
    op_stats put, get, small, all;
    std::uint64_t listed_keys = 0;
    std::uint64_t errors = 0, verify_failures = 0, prepared = 0, reused = 0;
    std::string first_error;
    double seconds = 0;
    double client_cpu_s = 0;
    double server_cpu_s = -1;
};

void add(op_stats& into, const op_stats& from) {
    into.operations += from.operations;
    into.bytes += from.bytes;
    into.latency.merge(from.latency);
}

totals merge(const shared_run& run) {
    totals t;
    std::int64_t first = INT64_MAX, last = 0;
    for (const worker_stats& st : run.stats) {
        add(t.put, st.put), add(t.get, st.get), add(t.small, st.small);
        add(t.all, st.put), add(t.all, st.get), add(t.all, st.small);
        t.listed_keys += st.listed_keys;
        t.errors += st.errors, t.verify_failures += st.verify_failures;
        t.prepared += st.prepared, t.reused += st.reused;
        if (t.first_error.empty()) t.first_error = st.first_error;
        first = std::min(first, st.first_start_ns), last = std::max(last, st.last_end_ns);
    }
    t.seconds = last > first ? static_cast<double>(last - first) / 1e9 : 0.0;
    return t;
}

void append_format(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));
void append_format(std::string& out, const char* format, ...) {
    char buffer[1024];
    va_list args;
    va_start(args, format);
    int n = std::vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    if (n > 0)
        out.append(buffer, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buffer - 1));
}

std::string op_json(const op_stats& s, double seconds) {
    std::string out;
    const latency_histogram& h = s.latency;
    append_format(
        out,
        "{\"operations\": %llu, \"bytes\": %llu, \"throughput_gib_s\": %.4f, \"ops_per_s\": %.3f, "
        "\"latency_ms\": {\"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, "
        "\"max\": %.3f}}",
        static_cast<unsigned long long>(s.operations), static_cast<unsigned long long>(s.bytes),
        cli::gib_per_s(s.bytes, seconds),
        seconds > 0 ? static_cast<double>(s.operations) / seconds : 0.0, h.mean_us() / 1e3,
        h.percentile_us(0.50) / 1e3, h.percentile_us(0.90) / 1e3, h.percentile_us(0.99) / 1e3,
        h.percentile_us(0.999) / 1e3, static_cast<double>(h.max_us()) / 1e3);
    return out;
}

const char* op_name(op_kind op) {
    switch (op) {
        case op_kind::put: return "put";
        case op_kind::get: return "get";
        case op_kind::mixed: return "mixed";
        case op_kind::head: return "head";
        case op_kind::del: return "delete";
        case op_kind::list: return "list";
    }
    return "?";
}

std::string results_json(const s3_config& cfg, const totals& t) {
    std::string out = "{\"bench\": \"s3\", ";
    append_format(out, "\"op\": \"%s\", \"endpoint\": %s, \"bucket\": %s, ", op_name(cfg.op),
                  cli::json_string(cfg.endpoint_text).c_str(),
                  cli::json_string(cfg.bucket).c_str());
    append_format(
        out,
        "\"size_bytes\": %llu, \"concurrency\": %u, \"cores\": %u, \"objects\": %llu, \"verify\": %s, "
        "\"seconds\": %.4f, \"errors\": %llu, \"verify_failures\": %llu, \"prepared_objects\": %llu, "
        "\"reused_objects\": %llu, \"client_cpu_s\": %.3f, \"server_cpu_s\": %.3f, ",
        static_cast<unsigned long long>(cfg.size_bytes), cfg.concurrency, cfg.cores,
        static_cast<unsigned long long>(cfg.objects), cfg.verify ? "true" : "false", t.seconds,
        static_cast<unsigned long long>(t.errors),
        static_cast<unsigned long long>(t.verify_failures),
        static_cast<unsigned long long>(t.prepared), static_cast<unsigned long long>(t.reused),
        t.client_cpu_s, t.server_cpu_s);
    std::string all = op_json(t.all, t.seconds);
    out += all.substr(1, all.size() - 2);  // the totals at the top level
    out += ", \"by_op\": {\"put\": " + op_json(t.put, t.seconds) +
           ", \"get\": " + op_json(t.get, t.seconds);
    if (t.small.operations > 0)
        out += std::string(", \"") + op_name(cfg.op) + "\": " + op_json(t.small, t.seconds);
    out += "}";
    if (cfg.op == op_kind::list) out += ", \"listed_keys\": " + std::to_string(t.listed_keys);
    out += ", \"first_error\": " + cli::json_string(t.first_error) + "}";
    return out;
}

void print_op_line(const char* label, const op_stats& s, double seconds) {
    const latency_histogram& h = s.latency;
    std::printf(
        "  %-5s %.3f GiB/s, %.1f ops/s, %llu ops; latency ms: mean %.1f p50 %.1f p90 %.1f p99 %.1f "
        "p99.9 %.1f max %.1f\n",
        label, cli::gib_per_s(s.bytes, seconds),
        seconds > 0 ? static_cast<double>(s.operations) / seconds : 0.0,
        static_cast<unsigned long long>(s.operations), h.mean_us() / 1e3,
        h.percentile_us(0.50) / 1e3, h.percentile_us(0.90) / 1e3, h.percentile_us(0.99) / 1e3,
        h.percentile_us(0.999) / 1e3, static_cast<double>(h.max_us()) / 1e3);
}

void print_results(const s3_config& cfg, const totals& t) {
    std::printf("s3 %s %s bucket %s: %.2f MiB objects, %u workers on %u cores, %.2f s\n",
                op_name(cfg.op), cfg.endpoint_text.c_str(), cfg.bucket.c_str(),
                static_cast<double>(cfg.size_bytes) / base::MiB, cfg.concurrency, cfg.cores,
                t.seconds);
    if (t.prepared + t.reused > 0)
        std::printf("  objects: %llu prepared, %llu reused\n",
                    static_cast<unsigned long long>(t.prepared),
                    static_cast<unsigned long long>(t.reused));
    print_op_line("total", t.all, t.seconds);
    if (cfg.op == op_kind::mixed)
        print_op_line("put", t.put, t.seconds), print_op_line("get", t.get, t.seconds);
    if (cfg.op == op_kind::list)
        std::printf("  listed %llu keys (%.0f keys/s)\n",
                    static_cast<unsigned long long>(t.listed_keys),
                    t.seconds > 0 ? static_cast<double>(t.listed_keys) / t.seconds : 0.0);
    double gib = static_cast<double>(t.all.bytes) / base::GiB;
    std::printf("  cpu: client %.2f s (%.2f cores, %.2f s/GiB)", t.client_cpu_s,
                t.seconds > 0 ? t.client_cpu_s / t.seconds : 0.0,
                gib > 0 ? t.client_cpu_s / gib : 0.0);
    if (t.server_cpu_s >= 0)
        std::printf(", server %.2f s (%.2f cores, %.2f s/GiB)", t.server_cpu_s,
                    t.seconds > 0 ? t.server_cpu_s / t.seconds : 0.0,
                    gib > 0 ? t.server_cpu_s / gib : 0.0);
    std::printf("\n");
    if (t.errors > 0)
        std::printf("  errors: %llu (first: %s)\n", static_cast<unsigned long long>(t.errors),
                    t.first_error.c_str());
}

// The latency percentiles of each op that ran, as a table and a chart.
bool write_s3_report(const s3_config& cfg, const totals& t) {
    std::vector<std::pair<std::string, const op_stats*>> ops;
    if (t.put.operations > 0) ops.emplace_back("put", &t.put);
    if (t.get.operations > 0) ops.emplace_back("get", &t.get);
    if (t.small.operations > 0) ops.emplace_back(op_name(cfg.op), &t.small);
    std::vector<std::vector<std::string>> rows;
    bar_chart chart{
        format_text("fjord bench s3 --op %s: latency (%.0f KiB objects, %u workers)",
                    op_name(cfg.op), static_cast<double>(cfg.size_bytes) / 1024, cfg.concurrency),
        "latency ms",
        {},
        {}};
    constexpr double fractions[] = {0.50, 0.90, 0.99, 0.999};
    constexpr const char* labels[] = {"p50", "p90", "p99", "p99.9"};
    for (const char* l : labels) chart.groups.push_back({l, {}});
    for (const auto& [name, s] : ops) {
        const latency_histogram& h = s->latency;
        rows.push_back(
            {name, std::to_string(s->operations),
             format_text("%.1f", static_cast<double>(s->operations) / std::max(t.seconds, 1e-9)),
             format_text("%.3f", cli::gib_per_s(s->bytes, t.seconds)),
             format_text("%.3f", h.mean_us() / 1e3),
             format_text("%.3f", h.percentile_us(0.50) / 1e3),
             format_text("%.3f", h.percentile_us(0.90) / 1e3),
             format_text("%.3f", h.percentile_us(0.99) / 1e3),
             format_text("%.3f", h.percentile_us(0.999) / 1e3),
             format_text("%.3f", static_cast<double>(h.max_us()) / 1e3)});
        chart.series.push_back(name);
        for (std::size_t i = 0; i < std::size(fractions); ++i)
            chart.groups[i].values.push_back(h.percentile_us(fractions[i]) / 1e3);
    }
    std::string md = "# fjord bench s3 --op " + std::string(op_name(cfg.op)) + "\n\n";
    md += format_text(
        "Endpoint %s, bucket %s, %llu-byte objects, %u workers on %u cores, %.2f s, %llu errors.\n\n",
        cfg.endpoint_text.c_str(), cfg.bucket.c_str(),
        static_cast<unsigned long long>(cfg.size_bytes), cfg.concurrency, cfg.cores, t.seconds,
        static_cast<unsigned long long>(t.errors));
    md += markdown_table({"op", "operations", "ops/s", "GiB/s", "mean ms", "p50 ms", "p90 ms",
                          "p99 ms", "p99.9 ms", "max ms"},
                         rows);
    md += "\n![latency percentiles](chart.svg)\n";
    return write_report(cfg.report_dir, results_json(cfg, t), md, chart);
}

// ---- memory ----

std::span<std::byte> map_bytes(std::uint64_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FJORD_ASSERT(p != MAP_FAILED, "cannot map bench buffers");
    return {static_cast<std::byte*>(p), size};
}

void fill_random(std::span<std::byte> bytes, std::uint64_t seed) {
    std::uint64_t state = seed | 1;
    std::size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
        std::uint64_t v = next_random(state);
        std::memcpy(bytes.data() + i, &v, 8);
    }
    for (; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(next_random(state));
}

}  // namespace

int bench_s3_main(int argc, char** argv) {
    auto cfg = options_or_usage("s3", parse_s3_args(argc, argv));
    if (!cfg) return 2;
    shared_run run;
    run.config = &*cfg;
    run.client.endpoint = cfg->target.endpoint;
    run.client.tls = cfg->target.tls;
    run.client.credentials = cfg->credentials;
    constexpr std::uint64_t unique_window_bytes = 4 * base::MiB;
    std::span<std::byte> data =
        map_bytes(cfg->size_bytes + (cfg->unique_bodies ? unique_window_bytes : 0));
    fill_random(data, 0x5EED0F0F1A2B3C4DULL);
    run.data = data;
    run.unique_window_bytes = unique_window_bytes;
    if (cfg->op == op_kind::get || cfg->op == op_kind::mixed) {
        for (unsigned w = 0; w < cfg->concurrency; ++w) {
            run.destinations.push_back(map_bytes(cfg->size_bytes));
            std::memset(run.destinations.back().data(), 0,
                        cfg->size_bytes);  // fault the pages in now
        }
    }
    run.stats.resize(cfg->concurrency);

    run_phase(run, 1, create_bucket_worker);
    if (needs_objects(cfg->op) && run.stats[0].errors == 0)
        run_phase(run, cfg->concurrency, prepare_worker);
    totals setup = merge(run);
    if (setup.errors > 0) {
        std::fprintf(stderr, "fjord bench s3: setup failed: %s\n", setup.first_error.c_str());
        return 1;
    }
    std::vector<worker_stats> setup_stats = std::move(run.stats);
    run.stats.assign(cfg->concurrency, worker_stats{});

    double client_cpu_before = own_cpu_s(), server_cpu_before = process_cpu_s(cfg->server_pid);
    run.deadline_ns = base::monotonic_now_ns() + static_cast<std::int64_t>(cfg->duration_s * 1e9);
    {
        cli::progress_line progress(
            {.label = op_name(cfg->op), .total_items = cfg->count, .interval_ms = 1000});
        run.progress = &progress;
        run_phase(run, cfg->concurrency, measure_worker);
        run.progress = nullptr;
    }
    double client_cpu_after = own_cpu_s(), server_cpu_after = process_cpu_s(cfg->server_pid);

    totals t = merge(run);
    for (const worker_stats& st : setup_stats) t.prepared += st.prepared, t.reused += st.reused;
    t.client_cpu_s = client_cpu_after - client_cpu_before;
    if (server_cpu_before >= 0 && server_cpu_after >= 0)
        t.server_cpu_s = server_cpu_after - server_cpu_before;
    print_results(*cfg, t);
    if (!cfg->json_path.empty() && !cli::write_json_file(cfg->json_path, results_json(*cfg, t)))
        return 1;
    if (!cfg->report_dir.empty() && !write_s3_report(*cfg, t)) return 1;
    return t.errors == 0 && t.all.operations > 0 ? 0 : 1;
}

}  // namespace fjord::bench
