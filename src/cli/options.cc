// Option parsing and output helpers shared by the `fjord` subcommands (the CLI's and `fjord bench`'s).

#include "cli/options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/encoding.h"

namespace fjord::cli {

base::result<command_options> command_options::parse(int argc, char** argv,
                                                     std::span<const std::string_view> with_value,
                                                     std::span<const std::string_view> flags) {
    command_options out;
    for (int i = 0; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg.substr(0, 2) != "--")
            return base::fail(base::errc::invalid_argument,
                              "unexpected argument " + std::string(arg));
        std::string_view name = arg.substr(2);
        bool takes_value = false, is_flag = false;
        for (auto n : with_value) takes_value = takes_value || n == name;
        for (auto n : flags) is_flag = is_flag || n == name;
        if (!takes_value && !is_flag)
            return base::fail(base::errc::invalid_argument, "unknown option " + std::string(arg));
        if (!takes_value) {
            out._values[std::string(name)] = "";
            continue;
        }
        if (i + 1 >= argc)
            return base::fail(base::errc::invalid_argument, std::string(arg) + " needs a value");
        out._values[std::string(name)] = argv[++i];
    }
    return out;
}

std::string command_options::text(std::string_view name, std::string fallback) const {
    auto it = _values.find(std::string(name));
    return it == _values.end() ? fallback : it->second;
}

base::result<std::uint64_t> command_options::number(std::string_view name,
                                                    std::uint64_t fallback) const {
    if (!has(name)) return fallback;
    auto v = base::parse_u64(text(name));
    if (!v)
        return base::fail(base::errc::invalid_argument,
                          "--" + std::string(name) + " needs a whole number");
    return *v;
}

base::result<double> command_options::seconds(std::string_view name, double fallback) const {
    if (!has(name)) return fallback;
    std::string value = text(name);
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || errno != 0 || *end != '\0' || !std::isfinite(v) || v <= 0)
        return base::fail(base::errc::invalid_argument,
                          "--" + std::string(name) + " needs a positive number of seconds");
    return v;
}

base::result<std::uint64_t> command_options::size(std::string_view name,
                                                  std::uint64_t fallback) const {
    if (!has(name)) return fallback;
    auto v = parse_size_bytes(text(name));
    if (!v)
        return base::fail(base::errc::invalid_argument,
                          "--" + std::string(name) + " needs a size such as 4096, 64KiB or 1GiB");
    return *v;
}

std::optional<std::uint64_t> parse_size_bytes(std::string_view text) {
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    auto n = base::parse_u64(text.substr(0, digits));
    if (!n) return std::nullopt;
    std::string unit = base::to_lower(text.substr(digits));
    std::uint64_t scale = 0;
    if (unit.empty() || unit == "b")
        scale = 1;
    else if (unit == "k" || unit == "kb" || unit == "kib")
        scale = 1ULL << 10;
    else if (unit == "m" || unit == "mb" || unit == "mib")
        scale = 1ULL << 20;
    else if (unit == "g" || unit == "gb" || unit == "gib")
        scale = 1ULL << 30;
    else
        return std::nullopt;
    if (*n > UINT64_MAX / scale) return std::nullopt;
    return *n * scale;
}

double gib_per_s(std::uint64_t bytes, double seconds) {
    return seconds > 0 ? static_cast<double>(bytes) / static_cast<double>(1ULL << 30) / seconds
                       : 0.0;
}

bool write_json_file(const std::string& path, const std::string& json) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "fjord: cannot write %s: %s\n", path.c_str(), strerror(errno));
        return false;
    }
    bool ok = std::fputs(json.c_str(), f) >= 0 && std::fputc('\n', f) != EOF;
    ok = std::fclose(f) == 0 && ok;
    if (!ok) std::fprintf(stderr, "fjord: cannot write %s\n", path.c_str());
    return ok;
}

std::string json_string(std::string_view text) {
    std::string out = "\"";
    for (char c : text) {
        if (c == '"' || c == '\\')
            out += '\\', out += c;
        else if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
            out += escaped;
        } else
            out += c;
    }
    return out + "\"";
}

bool asks_for_help(int argc, char** argv) {
    for (int i = 0; i < argc; ++i)
        if (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help") return true;
    return false;
}

}  // namespace fjord::cli
