#pragma once

// What the `fjord` subcommands share (the CLI's object commands and client, and `fjord bench`): "--name
// value" option parsing checked against the names a subcommand knows, sizes with units, the endpoint
// syntax, and the helpers for machine-readable output.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "io/socket.h"

namespace fjord::cli {

// "--name value" options and "--flag" switches, checked against the names a subcommand knows.
class command_options {
public:
    static base::result<command_options> parse(int argc, char** argv,
                                               std::span<const std::string_view> with_value,
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

// Whether any of the arguments is -h or --help: the command then prints its usage to stdout and
// exits 0, whatever else was given.
bool asks_for_help(int argc, char** argv);

// Throughput in GiB/s (2^30 bytes per second).
double gib_per_s(std::uint64_t bytes, double seconds);

// Writes `json` to `path` (with a final newline); false and a message on stderr on failure.
bool write_json_file(const std::string& path, const std::string& json);

// Minimal JSON string escaping for the result files.
std::string json_string(std::string_view text);

}  // namespace fjord::cli
