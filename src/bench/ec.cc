// `fjord bench ec`: Reed-Solomon encode and rebuild through ISA-L on one core, beside memcpy and CRC32C
// over the same bytes, so the cost of erasure coding reads as a ratio to the memory bandwidth of this run.

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/units.h"
#include "bench/bench.h"
#include "cli/options.h"
#include "cluster/erasure.h"

namespace fjord::bench {

namespace {

struct ec_config {
    std::vector<std::pair<unsigned, unsigned>> geometries;
    std::size_t shard_bytes = base::MiB;
    double seconds = 1;
    std::string json_path;
};

base::result<ec_config> parse_ec_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {"geometry", "shard-kib", "seconds", "json"};
    auto opts = cli::command_options::parse(argc, argv, with_value, {});
    if (!opts) return opts.as_failure();
    ec_config cfg;
    std::string list = opts->text("geometry", "2+2,4+2,5+3,12+4");
    for (std::size_t at = 0; at <= list.size();) {
        std::size_t comma = std::min(list.find(',', at), list.size());
        unsigned k = 0, m = 0;
        std::string one = list.substr(at, comma - at);
        if (std::sscanf(one.c_str(), "%u+%u", &k, &m) != 2 || !cluster::erasure_code::make(k, m))
            return base::fail(
                base::errc::invalid_argument,
                "--geometry takes K+M[,K+M...] with K, M >= 1 and K + M <= 32, not " + one);
        cfg.geometries.emplace_back(k, m);
        at = comma + 1;
    }
    auto shard_kib = opts->number("shard-kib", 1024);
    auto seconds = opts->seconds("seconds", 1);
    if (!seconds) return seconds.as_failure();
    if (!shard_kib || *shard_kib < 4 || *shard_kib > 16384)
        return base::fail(base::errc::invalid_argument, "--shard-kib takes 4..16384");
    cfg.shard_bytes = *shard_kib * base::KiB;
    cfg.seconds = *seconds;
    cfg.json_path = opts->text("json");
    return cfg;
}

// Runs `step` (which handles `bytes` bytes of data) for about `seconds`; the data GiB/s.
template <typename Step>
double rate(double seconds, std::size_t bytes, Step step) {
    step();  // warm: page faults, tables
    std::int64_t start = base::monotonic_now_ns(),
                 end = start + static_cast<std::int64_t>(seconds * 1e9);
    std::uint64_t done = 0, now = start;
    while (static_cast<std::int64_t>(now) < end) {
        step();
        done += bytes;
        now = static_cast<std::uint64_t>(base::monotonic_now_ns());
    }
    return static_cast<double>(done) / static_cast<double>(base::GiB) /
           (static_cast<double>(static_cast<std::int64_t>(now) - start) / 1e9);
}

struct ec_result {
    unsigned k = 0, m = 0;
    double encode = 0, rebuild_one = 0, rebuild_m = 0, memcpy = 0, crc32c = 0;
};

ec_result measure(const ec_config& cfg, unsigned k, unsigned m) {
    auto code = *cluster::erasure_code::make(k, m);
    const std::size_t len = cfg.shard_bytes, data_bytes = len * k;
    std::vector<std::vector<std::uint8_t>> shards(k + m, std::vector<std::uint8_t>(len));
    std::vector<std::uint8_t*> pointers;
    for (auto& s : shards) pointers.push_back(s.data());
    for (unsigned i = 0; i < k; ++i)
        for (std::size_t b = 0; b < len; ++b) shards[i][b] = static_cast<std::uint8_t>(b * 31 + i);
    std::vector<const std::uint8_t*> data(pointers.begin(), pointers.begin() + k);
    std::vector<std::uint8_t> copy(data_bytes);
    ec_result r{k, m};
    r.encode = rate(cfg.seconds, data_bytes,
                    [&] { code.encode(data, std::span(pointers).subspan(k), len); });
    auto rebuild = [&](unsigned lost) {
        std::unique_ptr<bool[]> present(new bool[k + m]);
        std::vector<unsigned> wanted;
        for (unsigned i = 0; i < k + m; ++i) {
            present[i] = i >= lost;  // the data shards first: every rebuilt byte needs parity
            if (!present[i]) wanted.push_back(i);
        }
        return rate(cfg.seconds, data_bytes, [&] {
            (void)code.reconstruct(pointers, std::span<const bool>(present.get(), k + m), wanted,
                                   len);
        });
    };
    r.rebuild_one = rebuild(1);
    r.rebuild_m = rebuild(m);
    r.memcpy = rate(cfg.seconds, data_bytes, [&] {
        for (unsigned i = 0; i < k; ++i) std::memcpy(copy.data() + i * len, shards[i].data(), len);
    });
    std::uint32_t sink = 0;
    r.crc32c = rate(cfg.seconds, data_bytes, [&] {
        for (unsigned i = 0; i < k; ++i) sink ^= base::crc32c(std::as_bytes(std::span(shards[i])));
    });
    if (sink == 0x12345678) std::fputs("", stdout);  // keeps the CRC loop from being optimized away
    return r;
}

}  // namespace

int bench_ec_main(int argc, char** argv) {
    auto cfg = options_or_usage("ec", parse_ec_args(argc, argv));
    if (!cfg) return 2;
    std::printf(
        "erasure coding on one core, %zu KiB shards, GiB/s of data (ratio to memcpy of the same "
        "bytes)\n%-6s %16s %16s %16s %9s %9s\n",
        cfg->shard_bytes / base::KiB, "k+m", "encode", "rebuild 1", "rebuild m", "memcpy",
        "crc32c");
    std::string json = "{\"bench\": \"ec\", \"shard_bytes\": " + std::to_string(cfg->shard_bytes) +
                       ", \"results\": [";
    for (std::size_t i = 0; i < cfg->geometries.size(); ++i) {
        auto [k, m] = cfg->geometries[i];
        ec_result r = measure(*cfg, k, m);
        std::printf("%-6s %8.2f (%4.2fx) %8.2f (%4.2fx) %8.2f (%4.2fx) %9.2f %9.2f\n",
                    (std::to_string(k) + "+" + std::to_string(m)).c_str(), r.encode,
                    r.encode / r.memcpy, r.rebuild_one, r.rebuild_one / r.memcpy, r.rebuild_m,
                    r.rebuild_m / r.memcpy, r.memcpy, r.crc32c);
        char row[320];
        std::snprintf(
            row, sizeof row,
            "%s{\"k\": %u, \"m\": %u, \"encode_gib_s\": %.3f, \"rebuild_one_gib_s\": %.3f, "
            "\"rebuild_m_gib_s\": %.3f, \"memcpy_gib_s\": %.3f, \"crc32c_gib_s\": %.3f}",
            i ? ", " : "", k, m, r.encode, r.rebuild_one, r.rebuild_m, r.memcpy, r.crc32c);
        json += row;
    }
    json += "]}";
    if (cfg->json_path.empty()) return 0;
    return cli::write_json_file(cfg->json_path, json) ? 0 : 1;
}

}  // namespace fjord::bench
