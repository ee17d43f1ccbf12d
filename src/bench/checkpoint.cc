// `fjord bench checkpoint`: the MLPerf Storage v3.0 llama3-8b checkpoint workload against any S3
// endpoint, through the native client (the workload is described in docs/benchmarks.md).
//
// Ranks are isolated worker groups: rank r is a coroutine on reactor r % cores with its own
// object_client (its own connection pool). Each checkpoint: --compute-seconds of emulated compute,
// then a barrier over all ranks, then every rank writes its two files (model, optimizer) one after
// the other as multipart uploads with --uploads-in-flight parts in flight. After the --checkpoints
// writes come the same number of reads: barrier, then each rank reads its files back as ranged GETs
// of --read-size (default min(128 MiB, file)) with --reads-in-flight in flight, into per-rank slots.
//
// Data: one random pool, filled before the clock starts; file (checkpoint c, rank r, kind k) is the
// pool slice at an offset derived from (c, r, k), so every checkpoint writes fresh incompressible
// bytes at no generation cost. A sample of the files read (--verify-every N: one file in N, rotating
// over ranks and checkpoints) is checked by CRC32C against the pool slice it was written from.
//
// Durations: per checkpoint, rank 0's own time (barrier release to its last byte) and the slowest
// view (first start to last end over all ranks); throughput is checkpoint bytes over the latter.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/units.h"
#include "bench/bench.h"
#include "cli/options.h"
#include "bench/report.h"
#include "client/object_client.h"
#include "client/runtime.h"
#include "io/cross_core.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "io/task.h"
#include "io/wait_group.h"

namespace fjord::bench {

namespace {

constexpr std::uint64_t model_bytes_full = 2'007'565'312;
constexpr std::uint64_t optim_bytes_full = 12'045'637'632;
constexpr std::uint64_t pool_slack_bytes = 64 * base::MiB;  // room for distinct offsets per file
constexpr unsigned max_ranks = 256;
constexpr unsigned files_per_rank = 2;

struct checkpoint_config {
    client::client_options target;  // endpoint and TLS only
    std::string endpoint_text, bucket, prefix;
    unsigned ranks = 8, checkpoints = 10, cores = 2;
    std::uint64_t scale = 32;  // sizes are divided by this
    double compute_s = 5;
    std::uint64_t part_size_bytes = 0, read_size_bytes = 128 * base::MiB;
    unsigned uploads_in_flight = 2, reads_in_flight = 2, verify_every = 4;
    bool trailer = false, keep = false;
    std::string json_path;
    std::string report_dir;
    auth::credentials credentials;
    std::uint64_t file_bytes[files_per_rank] = {};
};

// Waits until `parties` coroutines (on any cores) have arrived, then resumes each on its own core.
class cross_core_barrier {
public:
    explicit cross_core_barrier(unsigned parties) : _parties(parties) {}
    struct awaiter {
        cross_core_barrier* barrier;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            barrier->arrive(io::reactor::current().core(), h);
        }
        void await_resume() const noexcept {}
    };
    awaiter arrive_and_wait() { return awaiter{this}; }

private:
    void arrive(unsigned core, std::coroutine_handle<> h) {
        std::vector<std::pair<unsigned, std::coroutine_handle<>>> release;
        {
            std::lock_guard lock(_mutex);  // held for a push_back: a bench, not the data path
            _waiting.emplace_back(core, h);
            if (_waiting.size() < _parties) return;
            release.swap(_waiting);
        }
        for (auto [c, handle] : release)
            io::reactor::current().post(c, new io::detail::resume_message(handle));
    }
    unsigned _parties;
    std::mutex _mutex;
    std::vector<std::pair<unsigned, std::coroutine_handle<>>> _waiting;
};

struct rank_times {
    std::int64_t start_ns = 0, end_ns = 0;
};

struct checkpoint_run {
    const checkpoint_config* config = nullptr;
    std::span<const std::byte> pool;
    std::vector<std::vector<std::span<std::byte>>> slots;  // per rank, reads_in_flight read slots
    cross_core_barrier* barrier = nullptr;
    io::reactor_group* group = nullptr;
    std::atomic<unsigned> ranks_left{0};
    // [phase 0 write / 1 read][checkpoint][rank]; each rank writes only its own entries.
    std::vector<std::vector<rank_times>> times[2];
    std::atomic<std::uint64_t> errors{0}, verify_failures{0}, verified_files{0}, retries{0};
    std::mutex error_mutex;
    std::string first_error;

    void note_error(const std::string& what) {
        errors.fetch_add(1);
        std::lock_guard lock(error_mutex);
        if (first_error.empty()) first_error = what;
    }
};

const char* kind_name(unsigned kind) { return kind == 0 ? "model" : "optim"; }

std::string file_key(const checkpoint_config& cfg, unsigned checkpoint, unsigned rank,
                     unsigned kind) {
    return cfg.prefix + "global_epoch1_step" + std::to_string(checkpoint + 1) + "/zero_pp_rank_" +
           std::to_string(rank) + "_mp_rank_0_" + kind_name(kind) + "_states.pt";
}

std::span<const std::byte> file_data(const checkpoint_run& run, unsigned checkpoint, unsigned rank,
                                     unsigned kind) {
    std::uint64_t size = run.config->file_bytes[kind];
    std::uint64_t h =
        (checkpoint + 1) * 0x9E3779B97F4A7C15ULL ^ (rank + 1) * 0xC2B2AE3D27D4EB4FULL ^ (kind + 1);
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ULL, h ^= h >> 29;
    std::uint64_t span = run.pool.size() - size;
    std::uint64_t offset = span == 0 ? 0 : base::align_down(h % span, 4096);
    return run.pool.subspan(offset, size);
}

bool verify_sampled(const checkpoint_config& cfg, unsigned checkpoint, unsigned rank,
                    unsigned kind) {
    return cfg.verify_every > 0 &&
           (checkpoint * files_per_rank * cfg.ranks + rank * files_per_rank + kind) %
                   cfg.verify_every ==
               0;
}

// One ranged GET into a free slot; its CRC32C goes to crcs[index] when verifying.
struct read_file_state {
    std::vector<std::span<std::byte>> free_slots;
    std::vector<std::uint32_t> crcs;
    bool verify = false;
    bool failed = false;
    std::string error;
};

io::task<void> read_range(client::object_client* c, std::string bucket, std::string key,
                          read_file_state* st, std::size_t index, std::uint64_t offset,
                          std::uint64_t length) {
    std::span<std::byte> slot =
        st->free_slots.back();  // the wait_group bounds use to the slot count
    st->free_slots.pop_back();
    auto r = co_await c->get_range(bucket, key, offset, slot.first(length));
    if (!r || r->size_bytes != length) {
        st->failed = true;
        if (st->error.empty())
            st->error = "GET " + key + ": " + (r ? std::string("short range") : r.err().message);
    } else if (st->verify) {
        st->crcs[index] = base::crc32c(slot.first(length));
    }
    st->free_slots.push_back(slot);
}

io::task<void> read_file(checkpoint_run* run, client::object_client* c, unsigned rank,
                         unsigned checkpoint, unsigned kind) {
    const checkpoint_config& cfg = *run->config;
    std::string key = file_key(cfg, checkpoint, rank, kind);
    std::uint64_t size = cfg.file_bytes[kind], range = std::min(cfg.read_size_bytes, size);
    read_file_state st;
    st.free_slots = run->slots[rank];
    st.verify = verify_sampled(cfg, checkpoint, rank, kind);
    std::size_t ranges = static_cast<std::size_t>((size + range - 1) / range);
    st.crcs.assign(ranges, 0);
    {
        io::wait_group group(cfg.reads_in_flight);
        for (std::size_t i = 0; i < ranges && !st.failed; ++i)
            co_await group.spawn(read_range(c, cfg.bucket, key, &st, i, i * range,
                                            std::min(range, size - i * range)));
        co_await group.wait();
    }
    if (st.failed) co_return run->note_error(st.error);
    if (!st.verify) co_return;
    std::uint32_t crc = 0;
    for (std::size_t i = 0; i < ranges; ++i)
        crc = base::crc32c_combine(crc, st.crcs[i], std::min(range, size - i * range));
    run->verified_files.fetch_add(1);
    if (crc != base::crc32c(file_data(*run, checkpoint, rank, kind))) {
        run->verify_failures.fetch_add(1);
        run->note_error("CRC32C mismatch reading " + key);
    }
}

io::task<void> write_file(checkpoint_run* run, client::object_client* c, unsigned rank,
                          unsigned checkpoint, unsigned kind) {
    const checkpoint_config& cfg = *run->config;
    std::string key = file_key(cfg, checkpoint, rank, kind);
    auto r = co_await c->put_object_multipart(
        cfg.bucket, key, file_data(*run, checkpoint, rank, kind),
        client::multipart_options{cfg.part_size_bytes, cfg.uploads_in_flight});
    if (!r) run->note_error("PUT " + key + ": " + r.err().message);
}

io::task<void> rank_worker(checkpoint_run* run, unsigned rank) {
    const checkpoint_config& cfg = *run->config;
    client::object_client_options options;
    options.client.endpoint = cfg.target.endpoint;
    options.client.tls = cfg.target.tls;
    options.client.credentials = cfg.credentials;
    options.pool.max_connections = std::max(cfg.uploads_in_flight, cfg.reads_in_flight);
    options.put.crc32c_trailer = cfg.trailer;
    {
        client::object_client c(options);
        for (unsigned phase = 0; phase < 2; ++phase) {
            for (unsigned n = 0; n < cfg.checkpoints; ++n) {
                if (cfg.compute_s > 0)
                    co_await io::sleep_for(static_cast<std::int64_t>(cfg.compute_s * 1000));
                co_await run->barrier->arrive_and_wait();
                rank_times& t = run->times[phase][n][rank];
                t.start_ns = base::monotonic_now_ns();
                for (unsigned kind = 0; kind < files_per_rank; ++kind) {
                    if (phase == 0)
                        co_await write_file(run, &c, rank, n, kind);
                    else
                        co_await read_file(run, &c, rank, n, kind);
                }
                t.end_ns = base::monotonic_now_ns();
            }
        }
        if (!cfg.keep) {
            co_await run->barrier->arrive_and_wait();  // nobody deletes while another still reads
            for (unsigned n = 0; n < cfg.checkpoints; ++n)
                for (unsigned kind = 0; kind < files_per_rank; ++kind)
                    if (auto r = co_await c.delete_object(cfg.bucket, file_key(cfg, n, rank, kind));
                        !r)
                        run->note_error("DELETE: " + r.err().message);
        }
        run->retries.fetch_add(c.counters().retries);
    }
    if (run->ranks_left.fetch_sub(1) == 1) run->group->stop();
}

io::task<void> create_bucket_task(checkpoint_run* run) {
    client::object_client_options options;
    options.client.endpoint = run->config->target.endpoint;
    options.client.tls = run->config->target.tls;
    options.client.credentials = run->config->credentials;
    {
        client::object_client c(options);
        if (auto r = co_await c.create_bucket(run->config->bucket); !r)
            run->note_error("create bucket " + run->config->bucket + ": " + r.err().message);
    }
    run->group->stop();
}

// ---- configuration ----

base::result<double> non_negative_seconds(const cli::command_options& opts, std::string_view name,
                                          double fallback) {
    if (!opts.has(name)) return fallback;
    std::string text = opts.text(name);
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
        return base::fail(base::errc::invalid_argument,
                          "--" + std::string(name) + " needs seconds >= 0");
    return v;
}

base::result<checkpoint_config> parse_checkpoint_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {
        "endpoint",        "bucket",          "prefix",       "ranks",     "scale",
        "checkpoints",     "compute-seconds", "part-size",    "read-size", "uploads-in-flight",
        "reads-in-flight", "cores",           "verify-every", "json",      "report",
        "ca-cert"};
    static constexpr std::string_view flags[] = {"trailer", "keep"};
    auto opts = cli::command_options::parse(argc, argv, with_value, flags);
    if (!opts) return opts.as_failure();
    checkpoint_config cfg;
    cfg.endpoint_text = opts->text("endpoint", "http://127.0.0.1:9000");
    FJORD_TRY(client::configure_endpoint(cfg.target, cfg.endpoint_text, opts->text("ca-cert")));
    cfg.bucket = opts->text("bucket", "checkpoint");
    cfg.prefix = opts->text("prefix", "");
    std::string scale = opts->text("scale", "1/32");
    if (scale.rfind("1/", 0) == 0) scale = scale.substr(2);
    auto scale_n = cli::parse_size_bytes(scale);
    if (!scale_n || *scale_n < 1 || *scale_n > 4096)
        return base::fail(base::errc::invalid_argument,
                          "--scale must be 1/N (or N) with N in 1..4096");
    cfg.scale = *scale_n;
    auto ranks = opts->number("ranks", 8), checkpoints = opts->number("checkpoints", 10),
         cores = opts->number("cores", 2), uploads = opts->number("uploads-in-flight", 2),
         reads = opts->number("reads-in-flight", 2), verify = opts->number("verify-every", 4);
    auto part =
        opts->size("part-size", std::max<std::uint64_t>(5 * base::MiB, 32 * base::MiB / cfg.scale));
    auto read = opts->size("read-size", 128 * base::MiB);
    auto compute = non_negative_seconds(*opts, "compute-seconds", 5);
    for (auto* r : {&ranks, &checkpoints, &cores, &uploads, &reads, &verify, &part, &read})
        if (!*r) return r->as_failure();
    if (!compute) return compute.as_failure();
    if (*ranks < 1 || *ranks > max_ranks || *checkpoints < 1 || *checkpoints > 1000 || *cores < 1 ||
        *cores > 256 || *uploads < 1 || *uploads > 64 || *reads < 1 || *reads > 64 || *part < 1 ||
        *read < 1)
        return base::fail(base::errc::invalid_argument, "counts and sizes out of range");
    cfg.ranks = static_cast<unsigned>(*ranks),
    cfg.checkpoints = static_cast<unsigned>(*checkpoints);
    cfg.cores = static_cast<unsigned>(std::min<std::uint64_t>(*cores, *ranks));
    cfg.uploads_in_flight = static_cast<unsigned>(*uploads),
    cfg.reads_in_flight = static_cast<unsigned>(*reads);
    cfg.verify_every = static_cast<unsigned>(*verify);
    cfg.part_size_bytes = *part, cfg.read_size_bytes = *read;
    cfg.compute_s = *compute;
    cfg.trailer = opts->has("trailer"), cfg.keep = opts->has("keep");
    cfg.json_path = opts->text("json");
    cfg.report_dir = opts->text("report");
    cfg.file_bytes[0] = model_bytes_full / cfg.scale;
    cfg.file_bytes[1] = optim_bytes_full / cfg.scale;
    cfg.credentials = client::credentials_from_environment();
    return cfg;
}

// ---- results ----

struct checkpoint_figures {
    double rank0_s = 0, slowest_s = 0;
};

struct phase_summary {
    std::vector<checkpoint_figures> checkpoints;
    double mean_gib_s = 0, stdev_gib_s = 0, mean_rank0_gib_s = 0, mean_s = 0, stdev_s = 0;
};

phase_summary summarize(const std::vector<std::vector<rank_times>>& times, double checkpoint_gib) {
    phase_summary out;
    std::vector<double> rates, durations, rank0_rates;
    for (const auto& ranks : times) {
        std::int64_t first = INT64_MAX, last = 0;
        for (const rank_times& t : ranks)
            first = std::min(first, t.start_ns), last = std::max(last, t.end_ns);
        checkpoint_figures f{static_cast<double>(ranks[0].end_ns - ranks[0].start_ns) / 1e9,
                             static_cast<double>(last - first) / 1e9};
        out.checkpoints.push_back(f);
        durations.push_back(f.slowest_s);
        rates.push_back(f.slowest_s > 0 ? checkpoint_gib / f.slowest_s : 0);
        rank0_rates.push_back(f.rank0_s > 0 ? checkpoint_gib / f.rank0_s : 0);
    }
    auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0.0 : s / static_cast<double>(v.size());
    };
    auto stdev = [&mean](const std::vector<double>& v) {  // sample standard deviation
        if (v.size() < 2) return 0.0;
        double m = mean(v), s = 0;
        for (double x : v) s += (x - m) * (x - m);
        return std::sqrt(s / static_cast<double>(v.size() - 1));
    };
    out.mean_gib_s = mean(rates), out.stdev_gib_s = stdev(rates),
    out.mean_rank0_gib_s = mean(rank0_rates);
    out.mean_s = mean(durations), out.stdev_s = stdev(durations);
    return out;
}

std::string phase_json(const phase_summary& p, double checkpoint_gib) {
    std::string out = "{\"checkpoints\": [";
    char buf[256];
    for (std::size_t i = 0; i < p.checkpoints.size(); ++i) {
        const auto& f = p.checkpoints[i];
        std::snprintf(
            buf, sizeof buf,
            "%s{\"rank0_s\": %.4f, \"slowest_s\": %.4f, \"gib_s\": %.4f, \"rank0_gib_s\": %.4f}",
            i ? ", " : "", f.rank0_s, f.slowest_s,
            f.slowest_s > 0 ? checkpoint_gib / f.slowest_s : 0.0,
            f.rank0_s > 0 ? checkpoint_gib / f.rank0_s : 0.0);
        out += buf;
    }
    std::snprintf(
        buf, sizeof buf,
        "], \"mean_gib_s\": %.4f, \"stdev_gib_s\": %.4f, \"mean_rank0_gib_s\": %.4f, \"mean_s\": %.4f, "
        "\"stdev_s\": %.4f}",
        p.mean_gib_s, p.stdev_gib_s, p.mean_rank0_gib_s, p.mean_s, p.stdev_s);
    return out + buf;
}

void print_table(const checkpoint_config& cfg, const phase_summary& w, const phase_summary& r,
                 double gib) {
    std::printf("\n%-10s | %10s %10s %9s | %10s %10s %9s\n", "checkpoint", "write s r0",
                "write s max", "GiB/s", "read s r0", "read s max", "GiB/s");
    for (unsigned i = 0; i < cfg.checkpoints; ++i) {
        const auto &a = w.checkpoints[i], &b = r.checkpoints[i];
        std::printf("%-10u | %10.3f %10.3f %9.3f | %10.3f %10.3f %9.3f\n", i + 1, a.rank0_s,
                    a.slowest_s, a.slowest_s > 0 ? gib / a.slowest_s : 0.0, b.rank0_s, b.slowest_s,
                    b.slowest_s > 0 ? gib / b.slowest_s : 0.0);
    }
    std::printf(
        "\nMLPerf-style summary (llama3-8b, scale 1/%llu, %u ranks, %.3f GiB per checkpoint):\n",
        static_cast<unsigned long long>(cfg.scale), cfg.ranks, gib);
    std::printf(
        "  %-6s mean %.3f GiB/s (stdev %.3f), duration mean %.3f s (stdev %.3f); rank-0 view %.3f GiB/s\n",
        "write", w.mean_gib_s, w.stdev_gib_s, w.mean_s, w.stdev_s, w.mean_rank0_gib_s);
    std::printf(
        "  %-6s mean %.3f GiB/s (stdev %.3f), duration mean %.3f s (stdev %.3f); rank-0 view %.3f GiB/s\n",
        "read", r.mean_gib_s, r.stdev_gib_s, r.mean_s, r.stdev_s, r.mean_rank0_gib_s);
}

std::string results_json(const checkpoint_config& cfg, const checkpoint_run& run,
                         const phase_summary& w, const phase_summary& r,
                         std::uint64_t checkpoint_bytes, std::uint64_t slot_bytes) {
    const double checkpoint_gib = static_cast<double>(checkpoint_bytes) / base::GiB;
    char head[1024];
    std::snprintf(
        head, sizeof head,
        "{\"bench\": \"checkpoint\", \"workload\": \"llama3-8b\", \"endpoint\": %s, \"bucket\": %s, "
        "\"scale\": %llu, \"ranks\": %u, \"checkpoints\": %u, \"cores\": %u, \"model_bytes\": %llu, "
        "\"optim_bytes\": %llu, \"checkpoint_bytes\": %llu, \"part_size_bytes\": %llu, "
        "\"read_size_bytes\": %llu, \"uploads_in_flight\": %u, \"reads_in_flight\": %u, "
        "\"compute_seconds\": %.3f, \"crc32c_trailer\": %s, ",
        cli::json_string(cfg.endpoint_text).c_str(), cli::json_string(cfg.bucket).c_str(),
        static_cast<unsigned long long>(cfg.scale), cfg.ranks, cfg.checkpoints, cfg.cores,
        static_cast<unsigned long long>(cfg.file_bytes[0]),
        static_cast<unsigned long long>(cfg.file_bytes[1]),
        static_cast<unsigned long long>(checkpoint_bytes),
        static_cast<unsigned long long>(cfg.part_size_bytes),
        static_cast<unsigned long long>(slot_bytes), cfg.uploads_in_flight, cfg.reads_in_flight,
        cfg.compute_s, cfg.trailer ? "true" : "false");
    std::string json = head;
    json += "\"write\": " + phase_json(w, checkpoint_gib) +
            ", \"read\": " + phase_json(r, checkpoint_gib);
    json += ", \"verified_files\": " + std::to_string(run.verified_files.load()) +
            ", \"verify_failures\": " + std::to_string(run.verify_failures.load()) +
            ", \"retries\": " + std::to_string(run.retries.load()) +
            ", \"errors\": " + std::to_string(run.errors.load()) +
            ", \"first_error\": " + cli::json_string(run.first_error) + "}";
    return json;
}

// A row per checkpoint (slowest-rank duration and GiB/s of the write and the read) and a bar chart.
bool write_checkpoint_report(const checkpoint_config& cfg, const std::string& json,
                             const phase_summary& w, const phase_summary& r,
                             double checkpoint_gib) {
    bar_chart chart{
        format_text("fjord bench checkpoint: llama3-8b 1/%llu, %u ranks, %.2f GiB per checkpoint",
                    static_cast<unsigned long long>(cfg.scale), cfg.ranks, checkpoint_gib),
        "GiB/s",
        {"write", "read"},
        {}};
    std::vector<std::vector<std::string>> rows;
    auto rate = [checkpoint_gib](double s) { return s > 0 ? checkpoint_gib / s : 0.0; };
    for (unsigned i = 0; i < cfg.checkpoints; ++i) {
        const auto &a = w.checkpoints[i], &b = r.checkpoints[i];
        chart.groups.push_back(
            {"ckpt " + std::to_string(i + 1), {rate(a.slowest_s), rate(b.slowest_s)}});
        rows.push_back({std::to_string(i + 1), format_text("%.3f", a.slowest_s),
                        format_text("%.3f", rate(a.slowest_s)), format_text("%.3f", b.slowest_s),
                        format_text("%.3f", rate(b.slowest_s))});
    }
    rows.push_back({"**mean**", format_text("%.3f", w.mean_s),
                    format_text("**%.3f** (stdev %.3f)", w.mean_gib_s, w.stdev_gib_s),
                    format_text("%.3f", r.mean_s),
                    format_text("**%.3f** (stdev %.3f)", r.mean_gib_s, r.stdev_gib_s)});
    std::string md = "# fjord bench checkpoint\n\n";
    md += format_text(
        "llama3-8b at scale 1/%llu against %s (bucket %s): %u ranks, %.3f GiB per checkpoint, %u checkpoints, "
        "compute %.1f s.\n\n",
        static_cast<unsigned long long>(cfg.scale), cfg.endpoint_text.c_str(), cfg.bucket.c_str(),
        cfg.ranks, checkpoint_gib, cfg.checkpoints, cfg.compute_s);
    md += markdown_table({"checkpoint", "write s", "write GiB/s", "read s", "read GiB/s"}, rows);
    md += "\n![write and read GiB/s per checkpoint](chart.svg)\n";
    return write_report(cfg.report_dir, json, md, chart);
}

std::span<std::byte> map_random_pool(std::uint64_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FJORD_ASSERT(p != MAP_FAILED, "cannot map the checkpoint data pool");
    auto* words = static_cast<std::uint64_t*>(p);
    std::uint64_t state = 0x5EED0C4ECC901A7ULL;
    for (std::uint64_t i = 0; i < size / 8; ++i) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        words[i] = state;
    }
    return {static_cast<std::byte*>(p), size};
}

// Maps the read slots of every rank (reads_in_flight each, `slot_bytes` long), faulted in before the clock
// starts; returns every mapping, for munmap.
std::vector<std::span<std::byte>> map_read_slots(checkpoint_run& run, std::uint64_t slot_bytes) {
    std::vector<std::span<std::byte>> mapped;
    run.slots.resize(run.config->ranks);
    for (unsigned r = 0; r < run.config->ranks; ++r)
        for (unsigned s = 0; s < run.config->reads_in_flight; ++s) {
            void* p = mmap(nullptr, slot_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            FJORD_ASSERT(p != MAP_FAILED, "cannot map read slots");
            std::memset(p, 0, slot_bytes);
            run.slots[r].emplace_back(static_cast<std::byte*>(p), slot_bytes);
            mapped.push_back(run.slots[r].back());
        }
    return mapped;
}

void print_banner(const checkpoint_config& cfg, double checkpoint_gib) {
    std::printf(
        "checkpoint %s bucket %s: %u ranks x (%llu + %llu B), %.3f GiB per checkpoint, %u checkpoints, "
        "%llu-byte parts x%u, %llu-byte reads x%u, compute %.1f s, %u cores%s\n",
        cfg.endpoint_text.c_str(), cfg.bucket.c_str(), cfg.ranks,
        static_cast<unsigned long long>(cfg.file_bytes[0]),
        static_cast<unsigned long long>(cfg.file_bytes[1]), checkpoint_gib, cfg.checkpoints,
        static_cast<unsigned long long>(cfg.part_size_bytes), cfg.uploads_in_flight,
        static_cast<unsigned long long>(std::min(cfg.read_size_bytes, cfg.file_bytes[1])),
        cfg.reads_in_flight, cfg.compute_s, cfg.cores, cfg.trailer ? ", CRC32C trailers" : "");
    std::fflush(stdout);
}

}  // namespace

int bench_checkpoint_main(int argc, char** argv) {
    auto cfg = options_or_usage("checkpoint", parse_checkpoint_args(argc, argv));
    if (!cfg) return 2;
    const std::uint64_t checkpoint_bytes = cfg->ranks * (cfg->file_bytes[0] + cfg->file_bytes[1]);
    const double checkpoint_gib = static_cast<double>(checkpoint_bytes) / base::GiB;
    print_banner(*cfg, checkpoint_gib);

    checkpoint_run run;
    run.config = &*cfg;
    std::span<std::byte> pool =
        map_random_pool(base::align_up(cfg->file_bytes[1] + pool_slack_bytes, 8));
    run.pool = pool;
    std::uint64_t slot_bytes = std::min(cfg->read_size_bytes, cfg->file_bytes[1]);
    std::vector<std::span<std::byte>> slot_memory = map_read_slots(run, slot_bytes);
    for (auto& phase : run.times)
        phase.assign(cfg->checkpoints, std::vector<rank_times>(cfg->ranks));

    {
        io::reactor_group group(1);
        run.group = &group;
        group.run([&run](unsigned) { io::spawn(create_bucket_task(&run)); });
    }
    if (run.errors.load() > 0) {
        std::fprintf(stderr, "fjord bench checkpoint: %s\n", run.first_error.c_str());
        return 1;
    }
    cross_core_barrier barrier(cfg->ranks);
    run.barrier = &barrier;
    run.ranks_left.store(cfg->ranks);
    {
        io::reactor_group group(cfg->cores);
        run.group = &group;
        unsigned ranks = cfg->ranks, cores = cfg->cores;
        group.run([&run, ranks, cores](unsigned core) {
            for (unsigned r = core; r < ranks; r += cores) io::spawn(rank_worker(&run, r));
        });
    }
    phase_summary w = summarize(run.times[0], checkpoint_gib),
                  r = summarize(run.times[1], checkpoint_gib);
    print_table(*cfg, w, r, checkpoint_gib);
    std::printf("  verified %llu files by CRC32C, %llu mismatches; %llu retries; errors %llu%s%s\n",
                static_cast<unsigned long long>(run.verified_files.load()),
                static_cast<unsigned long long>(run.verify_failures.load()),
                static_cast<unsigned long long>(run.retries.load()),
                static_cast<unsigned long long>(run.errors.load()),
                run.first_error.empty() ? "" : " (first: ",
                run.first_error.empty() ? "" : (run.first_error + ")").c_str());
    if (!cfg->json_path.empty() &&
        !cli::write_json_file(cfg->json_path,
                              results_json(*cfg, run, w, r, checkpoint_bytes, slot_bytes)))
        return 1;
    if (!cfg->report_dir.empty() &&
        !write_checkpoint_report(*cfg, results_json(*cfg, run, w, r, checkpoint_bytes, slot_bytes),
                                 w, r, checkpoint_gib))
        return 1;
    munmap(pool.data(), pool.size());
    for (auto s : slot_memory) munmap(s.data(), s.size());
    return run.errors.load() == 0 ? 0 : 1;
}

}  // namespace fjord::bench
