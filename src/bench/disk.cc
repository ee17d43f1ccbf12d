// `fjord bench disk`: the physical disk limit. Sequential O_DIRECT writes (then fdatasync) and reads of a
// temporary file through io_uring with registered buffers, `depth` blocks in flight, like
// `fio --direct=1 --ioengine=io_uring --fixedbufs --rw=write/read --iodepth=32`. The file is
// preallocated (as fio does) and removed at the end. With --files N the blocks go round-robin to N files
// written at once (the pattern of N concurrent PUTs), `depth` blocks in flight over all of them. Every pass
// is printed: the first writes into freshly preallocated space, as a PUT does; later passes overwrite it.
// Every 4 KiB block written is distinct (--repeat-blocks: the same few buffers over and over, as before).
// The buffers are on transparent huge pages, as the server's are (io/io_memory.h; --no-huge-pages: 4 KiB
// pages), so that the limit is measured with the memory the server writes from.
// With --random each pass takes the blocks in a shuffled order (a fixed seed): the limit for reads of
// blocks picked at random, as a KV workload's are, where the device or its host cannot read ahead.
// This runs on a plain thread with its own ring, not on a reactor: it measures the device, not Fjord's
// runtime.

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/units.h"
#include "bench/bench.h"
#include "cli/options.h"
#include "io/io_memory.h"

namespace fjord::bench {

namespace {

struct disk_config {
    std::string dir;
    std::uint64_t size_bytes = 1024 * base::MiB;
    std::uint64_t block_bytes = 1024 * base::KiB;
    unsigned depth = 32;
    unsigned files = 1;
    unsigned passes = 1;  // each direction reports its best pass (the device is shared and noisy)
    bool repeat_blocks = false;  // write the same `depth` buffers over and over (the old behaviour)
    bool huge_pages = true;  // buffers on transparent huge pages, as the server's (io/io_memory.h)
    bool random = false;     // blocks in a shuffled order instead of one after another
    std::string json_path;
};

struct phase_result {
    double seconds = 0;
    std::uint64_t bytes = 0;
};

// One pass over the file: `depth` blocks in flight, each completion refilled with the next block (the
// next offset, or the next of a shuffled order with --random). Returns the elapsed time, or a message.
base::result<phase_result> run_phase(io_uring& ring, const std::vector<int>& fds,
                                     const disk_config& cfg, std::byte* memory, bool registered,
                                     bool write, std::uint64_t pass_stamp) {
    std::uint64_t blocks = cfg.size_bytes / cfg.block_bytes, next = 0, done = 0;
    std::vector<std::uint64_t> order(blocks);
    std::iota(order.begin(), order.end(), 0);
    if (cfg.random) std::shuffle(order.begin(), order.end(), std::mt19937_64(pass_stamp));
    std::int64_t start_ns = base::monotonic_now_ns();
    auto submit_block = [&](unsigned slot) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        FJORD_ASSERT(sqe != nullptr, "ring sized for depth");
        std::byte* buf = memory + slot * cfg.block_bytes;
        auto len = static_cast<unsigned>(cfg.block_bytes);
        // Every 4 KiB block written is distinct (its pass and its index in the pass stamped on the random
        // fill), as a workload's data is: a storage layer that dedups or caches repeated blocks must not
        // flatter the limit (fio scrambles its buffers for the same reason). --repeat-blocks turns it off.
        if (write && !cfg.repeat_blocks)
            for (std::size_t o = 0; o < cfg.block_bytes; o += 4096) {
                std::uint64_t stamp =
                    (pass_stamp << 48) | (next * (cfg.block_bytes / 4096) + o / 4096);
                std::memcpy(buf + o, &stamp, sizeof stamp);
            }
        int fd = fds[order[next] % fds.size()];
        std::uint64_t offset = order[next] / fds.size() * cfg.block_bytes;
        if (write && registered)
            io_uring_prep_write_fixed(sqe, fd, buf, len, offset, static_cast<int>(slot));
        else if (write)
            io_uring_prep_write(sqe, fd, buf, len, offset);
        else if (registered)
            io_uring_prep_read_fixed(sqe, fd, buf, len, offset, static_cast<int>(slot));
        else
            io_uring_prep_read(sqe, fd, buf, len, offset);
        io_uring_sqe_set_data64(sqe, slot);
        ++next;
    };
    for (unsigned slot = 0; slot < cfg.depth && next < blocks; ++slot) submit_block(slot);
    while (done < blocks) {
        io_uring_cqe* cqe = nullptr;
        int rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0 && rc != -EINTR)
            return base::fail(base::errc::io_error,
                              std::string("io_uring_submit: ") + strerror(-rc));
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            if (cqe->res != static_cast<int>(cfg.block_bytes))
                return base::fail(
                    base::errc::io_error,
                    std::string(write ? "write" : "read") + " returned " +
                        (cqe->res < 0 ? strerror(-cqe->res) : std::to_string(cqe->res)));
            ++done;
            if (next < blocks) submit_block(static_cast<unsigned>(cqe->user_data));
        }
        io_uring_cq_advance(&ring, seen);
    }
    for (int fd : fds)
        if (write && fdatasync(fd) != 0)
            return base::fail(base::errc::io_error, std::string("fdatasync: ") + strerror(errno));
    return phase_result{static_cast<double>(base::monotonic_now_ns() - start_ns) / 1e9,
                        blocks * cfg.block_bytes};
}

base::result<disk_config> parse_disk_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {"dir",    "size-mib", "block-kib", "depth",
                                                      "passes", "files",    "json"};
    static constexpr std::string_view flags[] = {"repeat-blocks", "no-huge-pages", "random"};
    auto opts = cli::command_options::parse(argc, argv, with_value, flags);
    if (!opts) return opts.as_failure();
    disk_config cfg;
    cfg.dir = opts->text("dir");
    cfg.json_path = opts->text("json");
    cfg.repeat_blocks = opts->has("repeat-blocks");
    cfg.huge_pages = !opts->has("no-huge-pages");
    cfg.random = opts->has("random");
    if (cfg.dir.empty()) return base::fail(base::errc::invalid_argument, "--dir is required");
    auto size_mib = opts->number("size-mib", 1024), block_kib = opts->number("block-kib", 1024),
         depth = opts->number("depth", 32), passes = opts->number("passes", 1),
         files = opts->number("files", 1);
    if (!size_mib || !block_kib || !depth || !passes || !files)
        return base::fail(base::errc::invalid_argument, "bad number");
    if (*files < 1 || *files > 256)
        return base::fail(base::errc::invalid_argument, "--files must be 1..256");
    cfg.files = static_cast<unsigned>(*files);
    if (*passes < 1 || *passes > 100)
        return base::fail(base::errc::invalid_argument, "--passes must be 1..100");
    cfg.passes = static_cast<unsigned>(*passes);
    if (*size_mib < 1 || *block_kib < 4 || *block_kib % 4 != 0 || *block_kib > 64 * 1024 ||
        *depth < 1 || *depth > 1024)
        return base::fail(
            base::errc::invalid_argument,
            "need --size-mib >= 1, --block-kib a multiple of 4 up to 65536, --depth 1..1024");
    cfg.block_bytes = *block_kib * base::KiB;
    cfg.size_bytes = base::align_up(*size_mib * base::MiB, cfg.block_bytes * cfg.files);
    cfg.depth = static_cast<unsigned>(*depth);
    return cfg;
}

int report(const disk_config& cfg, const phase_result& w, const phase_result& r,
           const phase_result& first_write, bool registered, std::size_t huge_page_bytes) {
    double write_gib_s = cli::gib_per_s(w.bytes, w.seconds),
           read_gib_s = cli::gib_per_s(r.bytes, r.seconds);
    double first_write_gib_s = cli::gib_per_s(first_write.bytes, first_write.seconds);
    std::printf(
        "disk %s: %llu MiB in %u file(s), %llu KiB blocks, depth %u, O_DIRECT, %s buffers (%zu KiB on huge "
        "pages), %s data, %s order, best of %u pass(es)\n",
        cfg.dir.c_str(), static_cast<unsigned long long>(cfg.size_bytes / base::MiB), cfg.files,
        static_cast<unsigned long long>(cfg.block_bytes / base::KiB), cfg.depth,
        registered ? "registered" : "unregistered", huge_page_bytes / base::KiB,
        cfg.repeat_blocks ? "repeated" : "distinct", cfg.random ? "random" : "sequential",
        cfg.passes);
    std::printf("  write: %.3f GiB/s (%.2f s, fdatasync included)\n", write_gib_s, w.seconds);
    std::printf("  read:  %.3f GiB/s (%.2f s)\n", read_gib_s, r.seconds);
    if (cfg.json_path.empty()) return 0;
    char json[1024];
    std::snprintf(
        json, sizeof json,
        "{\"bench\": \"disk\", \"dir\": %s, \"size_bytes\": %llu, \"block_bytes\": %llu, \"depth\": %u, \"files\": %u, \"passes\": %u, "
        "\"distinct_blocks\": %s, \"random_order\": %s, \"huge_page_bytes\": %zu, "
        "\"registered_buffers\": %s, \"write_gib_s\": %.4f, \"write_s\": %.4f, \"read_gib_s\": %.4f, "
        "\"read_s\": %.4f, \"first_pass_write_gib_s\": %.4f}",
        cli::json_string(cfg.dir).c_str(), static_cast<unsigned long long>(cfg.size_bytes),
        static_cast<unsigned long long>(cfg.block_bytes), cfg.depth, cfg.files, cfg.passes,
        cfg.repeat_blocks ? "false" : "true", cfg.random ? "true" : "false", huge_page_bytes,
        registered ? "true" : "false", write_gib_s, w.seconds, read_gib_s, r.seconds,
        first_write_gib_s);
    return cli::write_json_file(cfg.json_path, json) ? 0 : 1;
}

}  // namespace

int bench_disk_main(int argc, char** argv) {
    auto cfg = options_or_usage("disk", parse_disk_args(argc, argv));
    if (!cfg) return 2;
    std::vector<int> fds;
    auto close_all = [&] {
        for (int fd : fds) ::close(fd);
    };
    for (unsigned i = 0; i < cfg->files; ++i) {
        std::string path =
            cfg->dir + "/.fjord-bench-disk." + std::to_string(getpid()) + "." + std::to_string(i);
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
        if (fd < 0) {
            std::fprintf(stderr, "fjord bench disk: cannot create %s with O_DIRECT: %s\n",
                         path.c_str(), strerror(errno));
            close_all();
            return 1;
        }
        // The open descriptor keeps the file until the end; nothing is left behind.
        ::unlink(path.c_str());
        fds.push_back(fd);
        if (fallocate(fd, 0, 0, static_cast<off_t>(cfg->size_bytes / cfg->files)) != 0 &&
            errno != EOPNOTSUPP) {
            std::fprintf(stderr, "fjord bench disk: fallocate: %s\n", strerror(errno));
            close_all();
            return 1;
        }
    }
    std::size_t memory_bytes = cfg->block_bytes * cfg->depth;
    io::io_memory mapped(memory_bytes, cfg->huge_pages);
    auto* memory = mapped.data();
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;  // incompressible content, fixed seed
    for (std::size_t i = 0; i + 8 <= memory_bytes; i += 8) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        std::memcpy(memory + i, &state, 8);
    }
    io_uring ring;
    int rc = io_uring_queue_init(cfg->depth, &ring, 0);
    FJORD_ASSERT(rc == 0, "io_uring_queue_init failed");
    std::vector<iovec> iovecs(cfg->depth);
    for (unsigned i = 0; i < cfg->depth; ++i)
        iovecs[i] = iovec{memory + i * cfg->block_bytes, cfg->block_bytes};
    bool registered = io_uring_register_buffers(&ring, iovecs.data(), cfg->depth) == 0;
    // Write then read, `passes` times; each direction keeps its fastest pass.
    base::result<phase_result> written = phase_result{}, read = phase_result{};
    phase_result first_write;  // into freshly preallocated space, as every PUT writes
    for (unsigned pass = 0; pass < cfg->passes; ++pass) {
        auto w = run_phase(ring, fds, *cfg, memory, registered, true, pass + 1);
        auto r = w ? run_phase(ring, fds, *cfg, memory, registered, false, pass + 1) : w;
        if (!r) {
            read = r;
            break;
        }
        std::printf("  pass %u: write %.3f GiB/s, read %.3f GiB/s\n", pass + 1,
                    cli::gib_per_s(w->bytes, w->seconds), cli::gib_per_s(r->bytes, r->seconds));
        if (pass == 0) first_write = *w;
        if (pass == 0 || w->seconds < written->seconds) written = *w;
        if (pass == 0 || r->seconds < read->seconds) read = *r;
    }
    io_uring_queue_exit(&ring);
    std::size_t huge_page_bytes = mapped.huge_page_bytes();
    close_all();
    if (!read) {
        std::fprintf(stderr, "fjord bench disk: %s\n", read.err().message.c_str());
        return 1;
    }
    return report(*cfg, *written, *read, first_write, registered, huge_page_bytes);
}

}  // namespace fjord::bench
