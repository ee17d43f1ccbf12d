#pragma once

// `fjord bench`: programs that report figures, never tests with time limits. `disk` and `net` measure
// the physical limits of this machine (raw O_DIRECT I/O through io_uring, loopback TCP); `s3` measures
// Fjord itself through the native client, so that every result can be given as a ratio to a limit
// measured in the same run (design principle 7); `checkpoint` runs the MLPerf Storage v3.0 llama3-8b
// checkpoint workload (scaled) against any S3 endpoint.

#include <cstdio>
#include <optional>
#include <string_view>
#include <utility>

#include "base/result.h"

namespace fjord::bench {

int bench_main(int argc, char** argv);
int bench_disk_main(int argc, char** argv);
int bench_net_main(int argc, char** argv);
int bench_s3_main(int argc, char** argv);
int bench_checkpoint_main(int argc, char** argv);
int bench_kv_main(int argc, char** argv);
int bench_ec_main(int argc, char** argv);

// A subcommand's parsed options, or nullopt once it has said on stderr why they are not valid
// ("fjord bench NAME: why"; the subcommand then exits 2).
template <class Options>
std::optional<Options> options_or_usage(std::string_view name, base::result<Options> parsed) {
    if (parsed) return std::move(*parsed);
    std::fprintf(stderr, "fjord bench %.*s: %s\n", static_cast<int>(name.size()), name.data(),
                 parsed.err().message.c_str());
    return std::nullopt;
}

}  // namespace fjord::bench
