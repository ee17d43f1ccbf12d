#pragma once

// `fjord bench`: programs that report figures, never tests with time limits. `disk` and `net` measure
// the physical limits of this machine (raw O_DIRECT I/O through io_uring, loopback TCP); `s3` measures
// Fjord itself through the native client, so that every result can be given as a ratio to a limit
// measured in the same run (design principle 7); `checkpoint` runs the MLPerf Storage v3.0 llama3-8b
// checkpoint workload (scaled) against any S3 endpoint.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "io/socket.h"

namespace fjord::cli {

int bench_main(int argc, char** argv);
int bench_disk_main(int argc, char** argv);
int bench_net_main(int argc, char** argv);
int bench_s3_main(int argc, char** argv);
int bench_checkpoint_main(int argc, char** argv);
// `fjord client`: one request or transfer through the native client (client_command.cc).
int client_main(int argc, char** argv);
// `fjord cp|ls|rm|mb|rb` (object_commands.cc); `name` is the subcommand.
int object_command_main(const std::string& name, int argc, char** argv);

// "http://host:port" (or "host:port") -> endpoint; https is refused.
base::result<io::endpoint> parse_http_endpoint(std::string text);

// "--name value" options and "--flag" switches, checked against the names a subcommand knows.
class bench_options {
public:
    static base::result<bench_options> parse(int argc, char** argv, std::span<const std::string_view> with_value,
                                             std::span<const std::string_view> flags);
    bool has(std::string_view name) const { return _values.count(std::string(name)) > 0; }
    std::string text(std::string_view name, std::string fallback = {}) const;
    // A decimal count.
    base::result<std::uint64_t> number(std::string_view name, std::uint64_t fallback) const;
    // A decimal number of seconds (fractions allowed).
    base::result<double> seconds(std::string_view name, double fallback) const;
    // Bytes with an optional unit: 4096, 64KiB, 64MiB, 1GiB (also K, M, G, KB, MB, GB as powers of 2).
    base::result<std::uint64_t> size(std::string_view name, std::uint64_t fallback) const;

private:
    std::map<std::string, std::string> _values;  // name without "--" -> value ("" for a flag)
};

std::optional<std::uint64_t> parse_size_bytes(std::string_view text);

// Throughput in GiB/s (2^30 bytes per second).
double gib_per_s(std::uint64_t bytes, double seconds);

// Writes `json` to `path` (with a final newline); false and a message on stderr on failure.
bool write_json_file(const std::string& path, const std::string& json);

// Minimal JSON string escaping for the result files.
std::string json_string(std::string_view text);

}  // namespace fjord::cli
