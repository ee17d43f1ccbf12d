// `fjord bench kv`: the KV tier through its two front doors, side by side: the batch API (one request
// per batch of blocks, client/kv_client.h) and plain S3 (one HEAD / GET / PUT per block, as LMCache's
// S3 connector and NIXL OBJ do; up to `window` of them in flight per worker).
//
// --op put|get|exists: each worker repeats one batch of `batch` blocks of `block` bytes (put: new
// keys; get: keys of a prepared set; exists: half of them in the set) and records the batch's latency.
// --op workload: the MLPerf Storage v3.0 KV-cache workload, scaled: `users` concurrent users, each
// running conversations of a few turns (chat 512-4096 context tokens, coding 4096-25,000, document
// 4096-16,384, times --token-scale); every turn looks up its context's chunks (`chunk-tokens` tokens,
// bytes_per_token each: llama3.1-8b 131,072, 70b 327,680), reads the leading hits and writes the rest.
// Reported: hit rate, read/write GiB/s, p50/p95/p99 per operation, tokens/s, and the v3.0 pass
// criteria (storage write P95 < 500 ms, read P95 < 200 ms, hit rate > 30 %). With --server-pid, server
// CPU per block.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/units.h"
#include "bench/bench.h"
#include "bench/cpu.h"
#include "bench/histogram.h"
#include "bench/report.h"
#include "cli/options.h"
#include "client/kv_client.h"
#include "client/runtime.h"
#include "client/object_client.h"
#include "io/reactor.h"
#include "io/task.h"
#include "io/wait_group.h"

namespace fjord::bench {

namespace {

enum class kv_mode { batch, s3 };
enum class kv_op { put, get, exists, workload };

struct kv_config {
    client::client_options target;  // endpoint and TLS only
    std::string endpoint_text;
    std::string bucket = "bench-kv";
    std::vector<kv_mode> modes{kv_mode::batch, kv_mode::s3};
    kv_op op = kv_op::get;
    std::uint64_t block_bytes = 2 * base::MiB;
    unsigned batch = 16;
    unsigned concurrency = 16;
    unsigned window = 16;  // s3 mode: per-block requests in flight per worker
    double duration_s = 10;
    unsigned cores = 2;
    std::uint64_t objects = 0;  // get/exists: the prepared set
    std::uint64_t capacity_bytes = 0;
    std::string model = "llama3.1-8b";
    std::uint64_t bytes_per_token = 131'072;
    unsigned chunk_tokens = 16;
    double token_scale = 1.0 / 16;
    unsigned turns = 3;
    long server_pid = 0;
    std::string json_path, report_dir;
    auth::credentials credentials;
};

struct op_figures {
    std::uint64_t requests = 0;  // batches (or turns)
    std::uint64_t blocks = 0;
    std::uint64_t bytes = 0;
    latency_histogram latency;
    void add(const op_figures& o) {
        requests += o.requests, blocks += o.blocks, bytes += o.bytes;
        latency.merge(o.latency);
    }
};

struct worker_figures {
    op_figures put, get, exists;
    std::uint64_t context_tokens = 0, hit_tokens = 0, errors = 0, misses = 0;
    std::string first_error;
};

struct kv_run {
    const kv_config* cfg = nullptr;
    kv_mode mode = kv_mode::batch;
    std::span<const std::byte> pool;  // random bytes, block_bytes + 64 KiB
    std::vector<std::unique_ptr<client::object_client>> clients;  // one per core
    std::vector<worker_figures> figures;
    std::vector<std::vector<std::span<std::byte>>> destinations;  // per worker, per block
    std::int64_t deadline_ns = 0;
    io::reactor_group* group = nullptr;
    std::atomic<unsigned> workers_left{0};
    std::atomic<std::uint64_t> next_conversation{0};
};

std::uint64_t next_random(std::uint64_t& s) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
}

void fail(worker_figures& f, const base::error& e) {
    if (f.errors++ == 0) f.first_error = e.message;
}

// A block's bytes: a window of the pool that depends on the key, so blocks differ.
std::span<const std::byte> value_of(const kv_run& run, std::uint64_t n) {
    return run.pool.subspan((n * 4096) % (64 * 1024), run.cfg->block_bytes);
}

// ---- one batch, in either mode ----

io::task<base::result<void>> s3_put_one(client::object_client* c, std::string bucket,
                                        std::string key, std::span<const std::byte> v) {
    auto r = co_await c->put_object(bucket, key, v);
    if (!r) co_return r.as_failure();
    co_return base::result<void>{};
}

io::task<void> s3_step(kv_run* run, kv_op op, client::object_client* c, std::string key,
                       std::span<const std::byte> value, std::span<std::byte> dst,
                       std::uint8_t* present, base::result<void>* status) {
    const std::string& bucket = run->cfg->bucket;
    if (op == kv_op::put) {
        auto r = co_await s3_put_one(c, bucket, key, value);
        if (!r) *status = r;
    } else if (op == kv_op::get) {
        auto r = co_await c->get_object(bucket, key, dst);
        if (!r && r.err().code != base::errc::no_such_key) *status = r.as_failure();
        *present = r.has_value();
    } else {
        auto r = co_await c->head_object(bucket, key);
        if (!r) *status = r.as_failure();
        *present = r && r->has_value();
    }
}

// The batch's blocks: keys[i] with values[i] (put) or destinations[i] (get). present[i] says which
// were found (get, exists).
io::task<base::result<void>> run_batch(kv_run* run, kv_op op, client::object_client* c,
                                       const std::vector<std::string>& keys,
                                       const std::vector<std::span<const std::byte>>& values,
                                       const std::vector<std::span<std::byte>>& dsts,
                                       std::vector<bool>& present) {
    present.assign(keys.size(), false);
    const std::string& bucket = run->cfg->bucket;
    if (run->mode == kv_mode::batch) {
        if (op == kv_op::put) {
            auto r = co_await client::kv_put_from(*c, bucket, keys, values);
            if (!r) co_return r.as_failure();
            for (const auto& o : *r)
                if (o.status == client::kv_status::failed)
                    co_return base::fail(
                        base::errc::internal,
                        "the server refused a block (error " + std::to_string(o.error_code) + ")");
            co_return base::result<void>{};
        }
        if (op == kv_op::get) {
            auto r = co_await client::kv_get_into(*c, bucket, keys, dsts);
            if (!r) co_return r.as_failure();
            for (std::size_t i = 0; i < keys.size(); ++i)
                present[i] = (*r)[i].status == client::kv_status::ok;
            co_return base::result<void>{};
        }
        auto r = co_await client::kv_exists(*c, bucket, keys);
        if (!r) co_return r.as_failure();
        for (std::size_t i = 0; i < keys.size(); ++i) present[i] = r->sizes[i].has_value();
        co_return base::result<void>{};
    }
    base::result<void> status;
    std::vector<std::uint8_t> found(keys.size(), 0);
    io::wait_group window(run->cfg->window);
    for (std::size_t i = 0; i < keys.size(); ++i)
        co_await window.spawn(s3_step(
            run, op, c, keys[i], op == kv_op::put ? values[i] : std::span<const std::byte>{},
            op == kv_op::get ? dsts[i] : std::span<std::byte>{}, &found[i], &status));
    co_await window.wait();
    for (std::size_t i = 0; i < keys.size(); ++i) present[i] = found[i] != 0;
    co_return status;
}

// ---- workers ----

using worker_function = io::task<void> (*)(kv_run* run, unsigned worker);

io::task<void> run_worker(kv_run* run, unsigned worker, worker_function fn) {
    co_await fn(run, worker);
    if (run->workers_left.fetch_sub(1) == 1) run->group->stop();
}

void run_phase(kv_run& run, unsigned workers, worker_function fn) {
    unsigned cores = std::min(run.cfg->cores, workers);
    io::reactor_group group(cores);
    run.group = &group;
    run.workers_left.store(workers);
    run.clients.clear();
    run.clients.resize(cores);
    group.run([&run, workers, cores, fn](unsigned core) {
        client::object_client_options o;
        o.client.endpoint = run.cfg->target.endpoint;
        o.client.tls = run.cfg->target.tls;
        o.client.credentials = run.cfg->credentials;
        o.pool.max_connections = 512;
        run.clients[core] = std::make_unique<client::object_client>(o);
        for (unsigned w = core; w < workers; w += cores) io::spawn(run_worker(&run, w, fn));
    });
    run.group = nullptr;
    run.clients.clear();
}

client::object_client* client_of(kv_run* run) {
    return run->clients[io::reactor::current().core()].get();
}

io::task<void> create_bucket_worker(kv_run* run, unsigned) {
    client::kv_bucket_request req;
    req.capacity_bytes = run->cfg->capacity_bytes;
    auto r = co_await client_of(run)->create_kv_bucket(run->cfg->bucket, req);
    if (!r && r.err().code != base::errc::bucket_already_owned_by_you)
        fail(run->figures[0], r.err());
}

std::string set_key(std::uint64_t i) { return "set/" + std::to_string(i); }

// Stores the prepared set (get, exists): worker w writes every concurrency-th batch of it.
io::task<void> prepare_worker(kv_run* run, unsigned w) {
    const kv_config& cfg = *run->cfg;
    auto* c = client_of(run);
    for (std::uint64_t start = std::uint64_t{w} * cfg.batch; start < cfg.objects;
         start += std::uint64_t{cfg.batch} * cfg.concurrency) {
        std::vector<std::string> keys;
        std::vector<std::span<const std::byte>> values;
        for (std::uint64_t i = start; i < std::min(cfg.objects, start + cfg.batch); ++i)
            keys.push_back(set_key(i)), values.push_back(value_of(*run, i));
        auto r = co_await client::kv_put_from(*c, cfg.bucket, keys, values);
        if (!r) co_return fail(run->figures[w], r.err());
        for (const auto& o : *r)
            if (o.status == client::kv_status::failed)
                co_return fail(run->figures[w], {base::errc::internal,
                                                 "the server refused a block of the set (error " +
                                                     std::to_string(o.error_code) + ")"});
    }
}

io::task<void> micro_worker(kv_run* run, unsigned w) {
    const kv_config& cfg = *run->cfg;
    worker_figures& f = run->figures[w];
    op_figures& into = cfg.op == kv_op::put ? f.put : cfg.op == kv_op::get ? f.get : f.exists;
    std::uint64_t rng = 0x9E3779B97F4A7C15ULL * (w + 1);
    std::vector<bool> present;
    for (std::uint64_t n = 0; base::monotonic_now_ns() < run->deadline_ns; ++n) {
        std::vector<std::string> keys;
        std::vector<std::span<const std::byte>> values;
        for (unsigned i = 0; i < cfg.batch; ++i) {
            std::uint64_t r = next_random(rng);
            if (cfg.op == kv_op::put)
                keys.push_back("put/" + std::to_string(w) + "/" + std::to_string(n) + "/" +
                               std::to_string(i)),
                    values.push_back(value_of(*run, r));
            else
                keys.push_back(
                    set_key(r % (cfg.op == kv_op::exists ? 2 * cfg.objects : cfg.objects)));
        }
        std::int64_t start = base::monotonic_now_ns();
        auto done = co_await run_batch(run, cfg.op, client_of(run), keys, values,
                                       run->destinations[w], present);
        if (!done) {
            fail(f, done.err());
            if (f.errors > 10) co_return;
            continue;
        }
        into.latency.record(static_cast<std::uint64_t>(base::monotonic_now_ns() - start) / 1000);
        ++into.requests;
        std::uint64_t found = 0;
        for (bool p : present) found += cfg.op == kv_op::put || p;
        into.blocks += cfg.op == kv_op::exists ? cfg.batch : found;
        if (cfg.op != kv_op::exists) into.bytes += found * cfg.block_bytes;
        if (cfg.op == kv_op::get)
            f.misses +=
                static_cast<std::uint64_t>(std::count(present.begin(), present.end(), false));
    }
}

// ---- the MLPerf-style workload ----

struct user_kind {
    const char* name;
    unsigned min_tokens, max_tokens;
};
constexpr user_kind user_kinds[] = {
    {"chat", 512, 4096}, {"coding", 4096, 25'000}, {"document", 4096, 16'384}};

// Reads (get) or writes (put) keys[from, to) in pieces of `batch` blocks; the op's latency is the
// whole range's.
io::task<base::result<void>> move_range(kv_run* run, unsigned w, kv_op op,
                                        const std::vector<std::string>& keys, std::size_t from,
                                        std::size_t to, std::uint64_t conversation) {
    const kv_config& cfg = *run->cfg;
    std::vector<bool> present;
    for (std::size_t at = from; at < to; at += cfg.batch) {
        std::size_t end = std::min<std::size_t>(to, at + cfg.batch);
        std::vector<std::string> piece(keys.begin() + static_cast<std::ptrdiff_t>(at),
                                       keys.begin() + static_cast<std::ptrdiff_t>(end));
        std::vector<std::span<const std::byte>> values;
        if (op == kv_op::put)
            for (std::size_t i = at; i < end; ++i)
                values.push_back(value_of(*run, conversation + i));
        std::vector<std::span<std::byte>> dsts(
            run->destinations[w].begin(),
            run->destinations[w].begin() + static_cast<std::ptrdiff_t>(end - at));
        FJORD_CO_TRY(co_await run_batch(run, op, client_of(run), piece, values, dsts, present));
        if (op == kv_op::get && std::count(present.begin(), present.end(), false) > 0)
            run->figures[w].misses += 1;  // evicted between the lookup and the read
    }
    co_return base::result<void>{};
}

// One turn: look the context's chunks up, read the leading hits, write the rest.
io::task<base::result<void>> run_turn(kv_run* run, unsigned w, std::uint64_t conversation,
                                      std::uint64_t tokens) {
    const kv_config& cfg = *run->cfg;
    worker_figures& f = run->figures[w];
    std::vector<std::string> keys;
    for (std::uint64_t i = 0; i < tokens / cfg.chunk_tokens; ++i)
        keys.push_back("conv/" + std::to_string(conversation) + "/" + std::to_string(i));
    if (keys.empty()) co_return base::result<void>{};
    std::vector<bool> present;
    std::int64_t t0 = base::monotonic_now_ns();
    FJORD_CO_TRY(co_await run_batch(run, kv_op::exists, client_of(run), keys, {}, {}, present));
    std::int64_t t1 = base::monotonic_now_ns();
    std::size_t hits = 0;
    while (hits < keys.size() && present[hits]) ++hits;
    f.exists.latency.record(static_cast<std::uint64_t>(t1 - t0) / 1000);
    ++f.exists.requests, f.exists.blocks += keys.size();
    if (hits > 0) {
        FJORD_CO_TRY(co_await move_range(run, w, kv_op::get, keys, 0, hits, conversation));
        f.get.latency.record(static_cast<std::uint64_t>(base::monotonic_now_ns() - t1) / 1000);
        ++f.get.requests, f.get.blocks += hits, f.get.bytes += hits * cfg.block_bytes;
    }
    std::int64_t t2 = base::monotonic_now_ns();
    if (hits < keys.size()) {
        FJORD_CO_TRY(
            co_await move_range(run, w, kv_op::put, keys, hits, keys.size(), conversation));
        f.put.latency.record(static_cast<std::uint64_t>(base::monotonic_now_ns() - t2) / 1000);
        std::uint64_t written = keys.size() - hits;
        ++f.put.requests, f.put.blocks += written, f.put.bytes += written * cfg.block_bytes;
    }
    f.context_tokens += keys.size() * cfg.chunk_tokens;
    f.hit_tokens += hits * cfg.chunk_tokens;
    co_return base::result<void>{};
}

io::task<void> workload_worker(kv_run* run, unsigned w) {
    const kv_config& cfg = *run->cfg;
    std::uint64_t rng = 0xC0FFEE123456789ULL * (w + 1);
    while (base::monotonic_now_ns() < run->deadline_ns && run->figures[w].errors < 10) {
        std::uint64_t conversation = run->next_conversation.fetch_add(1) * 100'000;
        const user_kind& kind = user_kinds[next_random(rng) % std::size(user_kinds)];
        auto span = static_cast<std::uint64_t>(kind.max_tokens - kind.min_tokens + 1);
        std::uint64_t tokens = kind.min_tokens + next_random(rng) % span;
        for (unsigned turn = 0; turn < cfg.turns && base::monotonic_now_ns() < run->deadline_ns;
             ++turn) {
            if (turn > 0) tokens += 128 + next_random(rng) % 896;  // the next message and answer
            auto scaled = static_cast<std::uint64_t>(static_cast<double>(tokens) * cfg.token_scale);
            auto done = co_await run_turn(run, w, conversation, scaled);
            if (!done) {
                fail(run->figures[w], done.err());
                break;
            }
        }
    }
}

// ---- configuration ----

base::result<void> parse_choices(const cli::command_options& opts, kv_config& cfg) {
    std::string op = opts.text("op", "get");
    if (op == "put")
        cfg.op = kv_op::put;
    else if (op == "get")
        cfg.op = kv_op::get;
    else if (op == "exists")
        cfg.op = kv_op::exists;
    else if (op == "workload")
        cfg.op = kv_op::workload;
    else
        return base::fail(base::errc::invalid_argument, "--op is put, get, exists or workload");
    std::string mode = opts.text("mode", "both");
    if (mode == "batch")
        cfg.modes = {kv_mode::batch};
    else if (mode == "s3")
        cfg.modes = {kv_mode::s3};
    else if (mode != "both")
        return base::fail(base::errc::invalid_argument, "--mode is batch, s3 or both");
    cfg.model = opts.text("model", "llama3.1-8b");
    if (cfg.model == "llama3.1-8b")
        cfg.bytes_per_token = 131'072;
    else if (cfg.model == "llama3.1-70b")
        cfg.bytes_per_token = 327'680;
    else
        return base::fail(base::errc::invalid_argument, "--model is llama3.1-8b or llama3.1-70b");
    return {};
}

base::result<kv_config> parse_kv_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {
        "endpoint",    "bucket",   "op",    "mode",       "block",    "batch",  "concurrency",
        "window",      "duration", "cores", "objects",    "capacity", "model",  "chunk-tokens",
        "token-scale", "turns",    "users", "server-pid", "json",     "report", "ca-cert"};
    auto opts = cli::command_options::parse(argc, argv, with_value, {});
    if (!opts) return opts.as_failure();
    kv_config cfg;
    FJORD_TRY(parse_choices(*opts, cfg));
    cfg.endpoint_text = opts->text("endpoint", "http://127.0.0.1:9000");
    FJORD_TRY(client::configure_endpoint(cfg.target, cfg.endpoint_text, opts->text("ca-cert")));
    cfg.bucket = opts->text("bucket", cfg.bucket);
    auto block = opts->size("block", 2 * base::MiB), capacity = opts->size("capacity", 0);
    auto batch = opts->number("batch", cfg.op == kv_op::exists ? 1000 : 16);
    auto users = opts->number("users", 4);
    auto concurrency = opts->number("concurrency", cfg.op == kv_op::workload ? *users : 16);
    auto window = opts->number("window", 16), cores = opts->number("cores", 2);
    auto objects = opts->number("objects", 0), chunk = opts->number("chunk-tokens", 16);
    auto turns = opts->number("turns", 3), pid = opts->number("server-pid", 0);
    auto duration = opts->seconds("duration", 10);
    for (auto* r : {&block, &capacity, &batch, &users, &concurrency, &window, &cores, &objects,
                    &chunk, &turns, &pid})
        if (!*r) return r->as_failure();
    if (!duration) return duration.as_failure();
    if (*batch < 1 || *batch > 10'000 || *concurrency < 1 || *concurrency > 1024 || *window < 1 ||
        *cores < 1 || *block < 1 || *block > 32 * base::MiB || *chunk < 1 || *turns < 1)
        return base::fail(base::errc::invalid_argument,
                          "need --batch 1..10000, --concurrency 1..1024, --block up to 32MiB");
    std::string scale = opts->text("token-scale", "1/16");
    auto slash = scale.find('/');
    double num = std::strtod(scale.substr(0, slash).c_str(), nullptr);
    double den =
        slash == std::string::npos ? 1 : std::strtod(scale.substr(slash + 1).c_str(), nullptr);
    if (!(num > 0) || !(den > 0))
        return base::fail(base::errc::invalid_argument, "bad --token-scale");
    cfg.token_scale = num / den;
    cfg.block_bytes = *block, cfg.capacity_bytes = *capacity,
    cfg.batch = static_cast<unsigned>(*batch);
    cfg.concurrency = static_cast<unsigned>(*concurrency),
    cfg.window = static_cast<unsigned>(*window);
    cfg.cores = static_cast<unsigned>(*cores), cfg.chunk_tokens = static_cast<unsigned>(*chunk);
    cfg.turns = static_cast<unsigned>(*turns), cfg.duration_s = *duration;
    cfg.server_pid = static_cast<long>(*pid);
    if (cfg.op == kv_op::workload)
        cfg.block_bytes = std::uint64_t{cfg.chunk_tokens} * cfg.bytes_per_token;
    cfg.objects = *objects > 0
                      ? *objects
                      : std::max<std::uint64_t>(std::uint64_t{cfg.batch} * cfg.concurrency, 256);
    cfg.json_path = opts->text("json");
    cfg.report_dir = opts->text("report");
    cfg.credentials = client::credentials_from_environment();
    return cfg;
}

// ---- results ----

struct mode_result {
    kv_mode mode;
    worker_figures total;
    double seconds = 0;
    double client_cpu_s = 0, server_cpu_s = -1;
};

const char* mode_name(kv_mode m) { return m == kv_mode::batch ? "batch" : "s3"; }

std::vector<std::pair<const char*, const op_figures*>> ops_of(const mode_result& r) {
    std::vector<std::pair<const char*, const op_figures*>> out;
    if (r.total.exists.requests) out.emplace_back("exists", &r.total.exists);
    if (r.total.get.requests) out.emplace_back("get", &r.total.get);
    if (r.total.put.requests) out.emplace_back("put", &r.total.put);
    return out;
}

std::uint64_t blocks_of(const mode_result& r) {
    return r.total.exists.blocks + r.total.get.blocks + r.total.put.blocks;
}

std::vector<std::string> row_of(const mode_result& r, const char* op, const op_figures& f) {
    double s = std::max(r.seconds, 1e-9);
    std::uint64_t blocks = blocks_of(r);
    return {mode_name(r.mode),
            op,
            std::to_string(f.requests),
            format_text("%.1f", static_cast<double>(f.requests) / s),
            format_text("%.1f", static_cast<double>(f.blocks) / s),
            format_text("%.3f", cli::gib_per_s(f.bytes, r.seconds)),
            format_text("%.3f", f.latency.percentile_us(0.50) / 1e3),
            format_text("%.3f", f.latency.percentile_us(0.95) / 1e3),
            format_text("%.3f", f.latency.percentile_us(0.99) / 1e3),
            r.server_cpu_s >= 0 && blocks > 0
                ? format_text("%.1f", r.server_cpu_s * 1e6 / static_cast<double>(blocks))
                : std::string("-")};
}

std::string workload_summary(const mode_result& r) {
    const worker_figures& t = r.total;
    double hit = t.context_tokens
                     ? static_cast<double>(t.hit_tokens) / static_cast<double>(t.context_tokens)
                     : 0;
    double write_p95 = t.put.latency.percentile_us(0.95) / 1e3,
           read_p95 = t.get.latency.percentile_us(0.95) / 1e3;
    bool pass = write_p95 < 500 && read_p95 < 200 && hit > 0.30;
    return format_text(
        "%s: hit rate %.1f %%, %.0f context tokens/s, storage read %.3f GiB/s (P95 %.1f ms), write %.3f "
        "GiB/s (P95 %.1f ms): MLPerf v3.0 criteria (write P95 < 500 ms, read P95 < 200 ms, hit rate > "
        "30 %%) %s\n",
        mode_name(r.mode), hit * 100,
        static_cast<double>(t.context_tokens) / std::max(r.seconds, 1e-9),
        cli::gib_per_s(t.get.bytes, r.seconds), read_p95, cli::gib_per_s(t.put.bytes, r.seconds),
        write_p95, pass ? "PASS" : "FAIL");
}

const std::vector<std::string> table_header = {
    "mode",  "op",     "requests", "requests/s", "blocks/s",
    "GiB/s", "p50 ms", "p95 ms",   "p99 ms",     "server CPU us/block"};

std::string describe(const kv_config& cfg) {
    if (cfg.op == kv_op::workload)
        return format_text(
            "MLPerf v3.0 KV-cache workload, %s (%llu B/token), %u users, %u-token "
            "chunks (%llu-byte blocks), token scale %.4f, %u turns, %.1f s",
            cfg.model.c_str(), static_cast<unsigned long long>(cfg.bytes_per_token),
            cfg.concurrency, cfg.chunk_tokens, static_cast<unsigned long long>(cfg.block_bytes),
            cfg.token_scale, cfg.turns, cfg.duration_s);
    return format_text(
        "batches of %u blocks of %llu bytes, %u workers on %u cores, %.1f s (s3 mode: "
        "%u requests in flight per worker)",
        cfg.batch, static_cast<unsigned long long>(cfg.block_bytes), cfg.concurrency, cfg.cores,
        cfg.duration_s, cfg.window);
}

std::string results_json(const kv_config& cfg, const std::vector<mode_result>& results) {
    std::string j = "{\"bench\": \"kv\", \"endpoint\": " + cli::json_string(cfg.endpoint_text) +
                    ", \"setup\": " + cli::json_string(describe(cfg)) + ", \"modes\": [";
    for (std::size_t m = 0; m < results.size(); ++m) {
        const mode_result& r = results[m];
        j += format_text(
            "%s{\"mode\": \"%s\", \"seconds\": %.3f, \"errors\": %llu, "
            "\"server_cpu_s\": %.3f, \"client_cpu_s\": %.3f, \"context_tokens\": %llu, "
            "\"hit_tokens\": %llu, \"ops\": [",
            m ? ", " : "", mode_name(r.mode), r.seconds,
            static_cast<unsigned long long>(r.total.errors), r.server_cpu_s, r.client_cpu_s,
            static_cast<unsigned long long>(r.total.context_tokens),
            static_cast<unsigned long long>(r.total.hit_tokens));
        auto ops = ops_of(r);
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const op_figures& f = *ops[i].second;
            j += format_text(
                "%s{\"op\": \"%s\", \"requests\": %llu, \"blocks\": %llu, \"bytes\": "
                "%llu, \"p50_ms\": %.3f, \"p95_ms\": %.3f, \"p99_ms\": %.3f}",
                i ? ", " : "", ops[i].first, static_cast<unsigned long long>(f.requests),
                static_cast<unsigned long long>(f.blocks), static_cast<unsigned long long>(f.bytes),
                f.latency.percentile_us(0.5) / 1e3, f.latency.percentile_us(0.95) / 1e3,
                f.latency.percentile_us(0.99) / 1e3);
        }
        j += "]}";
    }
    return j + "]}";
}

void print_and_report(const kv_config& cfg, const std::vector<mode_result>& results) {
    std::vector<std::vector<std::string>> rows;
    bar_chart chart{"KV " + std::string(cfg.op == kv_op::workload ? "workload" : "batches") +
                        ": p99 latency by mode",
                    "ms",
                    {},
                    {}};
    std::string summary;
    for (const mode_result& r : results) {
        chart.series.push_back(mode_name(r.mode));
        for (auto [op, f] : ops_of(r)) rows.push_back(row_of(r, op, *f));
        if (cfg.op == kv_op::workload) summary += workload_summary(r);
        if (r.total.misses)
            summary += format_text(
                "%s: %llu %s\n", mode_name(r.mode), static_cast<unsigned long long>(r.total.misses),
                cfg.op == kv_op::workload ? "reads found a block gone since its lookup (evicted)"
                                          : "blocks of the prepared set were not found");
        if (r.total.errors)
            summary += format_text("%s: %llu errors, the first: %s\n", mode_name(r.mode),
                                   static_cast<unsigned long long>(r.total.errors),
                                   r.total.first_error.c_str());
    }
    for (const char* op : {"exists", "get", "put"}) {
        bar_chart::group g{op, {}};
        for (const mode_result& r : results) {
            double v = 0;
            for (auto [name, f] : ops_of(r))
                if (std::string_view(name) == op) v = f->latency.percentile_us(0.99) / 1e3;
            g.values.push_back(v);
        }
        chart.groups.push_back(g);
    }
    std::string table = markdown_table(table_header, rows);
    std::printf("fjord bench kv: %s\n%s%s", describe(cfg).c_str(), table.c_str(), summary.c_str());
    if (!cfg.json_path.empty()) cli::write_json_file(cfg.json_path, results_json(cfg, results));
    if (!cfg.report_dir.empty())
        write_report(cfg.report_dir, results_json(cfg, results),
                     "# fjord bench kv\n\n" + describe(cfg) + ", endpoint " + cfg.endpoint_text +
                         ".\n\n" + table + "\n" + summary + "\n![p99 latency](chart.svg)\n",
                     chart);
}

mode_result measure(kv_run& run, kv_mode mode) {
    const kv_config& cfg = *run.cfg;
    run.mode = mode;
    run.figures.assign(cfg.concurrency, worker_figures{});
    double client_before = own_cpu_s(), server_before = process_cpu_s(cfg.server_pid);
    std::int64_t start = base::monotonic_now_ns();
    run.deadline_ns = start + static_cast<std::int64_t>(cfg.duration_s * 1e9);
    run_phase(run, cfg.concurrency, cfg.op == kv_op::workload ? workload_worker : micro_worker);
    mode_result r{mode, {}, static_cast<double>(base::monotonic_now_ns() - start) / 1e9};
    double server_after = process_cpu_s(cfg.server_pid);
    r.client_cpu_s = own_cpu_s() - client_before;
    if (server_before >= 0 && server_after >= 0) r.server_cpu_s = server_after - server_before;
    for (const worker_figures& f : run.figures) {
        r.total.put.add(f.put), r.total.get.add(f.get), r.total.exists.add(f.exists);
        r.total.context_tokens += f.context_tokens, r.total.hit_tokens += f.hit_tokens;
        r.total.misses += f.misses;
        if (f.errors && !r.total.errors) r.total.first_error = f.first_error;
        r.total.errors += f.errors;
    }
    return r;
}

}  // namespace

int bench_kv_main(int argc, char** argv) {
    auto cfg = options_or_usage("kv", parse_kv_args(argc, argv));
    if (!cfg) return 2;
    kv_run run;
    run.cfg = &*cfg;
    const std::uint64_t pool_bytes = cfg->block_bytes + 64 * base::KiB;
    auto* pool = static_cast<std::byte*>(
        mmap(nullptr, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    FJORD_ASSERT(pool != MAP_FAILED);
    std::uint64_t rng = 0x5EED;
    for (std::uint64_t i = 0; i + 8 <= pool_bytes; i += 8) {
        std::uint64_t v = next_random(rng);
        std::memcpy(pool + i, &v, 8);
    }
    run.pool = {pool, pool_bytes};
    std::vector<std::vector<std::byte>> buffers;
    buffers.reserve(std::size_t{cfg->concurrency} * cfg->batch);
    run.destinations.resize(cfg->concurrency);
    if (cfg->op == kv_op::get || cfg->op == kv_op::workload)
        for (unsigned w = 0; w < cfg->concurrency; ++w)
            for (unsigned b = 0; b < cfg->batch; ++b) {
                buffers.emplace_back(cfg->block_bytes);
                run.destinations[w].push_back(buffers.back());
            }
    run.figures.assign(std::max(1u, cfg->concurrency), worker_figures{});
    run_phase(run, 1, create_bucket_worker);
    if (cfg->op == kv_op::get || cfg->op == kv_op::exists)
        run_phase(run, cfg->concurrency, prepare_worker);
    for (const worker_figures& f : run.figures)
        if (f.errors) {
            std::fprintf(stderr, "fjord bench kv: setup failed: %s\n", f.first_error.c_str());
            return 1;
        }
    std::vector<mode_result> results;
    for (kv_mode mode : cfg->modes) results.push_back(measure(run, mode));
    print_and_report(*cfg, results);
    for (const auto& r : results)
        if (r.total.errors) return 1;
    return 0;
}

}  // namespace fjord::bench
