#include "cluster/stamp.h"

#include <cstdio>

#include "base/clock.h"
#include "base/encoding.h"

namespace fjord::cluster {

std::string stamp::text() const {
    char out[text_bytes + 1];
    std::snprintf(out, sizeof out, "%016llx%08x", static_cast<unsigned long long>(time),
                  static_cast<unsigned>(node));
    return std::string(out, text_bytes);
}

std::optional<stamp> stamp::parse(std::string_view text) {
    if (text.size() != text_bytes) return std::nullopt;
    for (char c : text)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
    auto time = base::parse_hex_u64(text.substr(0, 16));
    auto node = base::parse_hex_u64(text.substr(16));
    if (!time || !node) return std::nullopt;
    return stamp{*time, static_cast<std::uint32_t>(*node)};
}

std::uint32_t node_tag(std::string_view node_id) {
    std::uint32_t h = 2166136261u;  // FNV-1a
    for (char c : node_id) {
        h ^= static_cast<unsigned char>(c);
        h *= 16777619u;
    }
    return h;
}

stamp_clock::stamp_clock(std::uint32_t node, std::function<std::int64_t()> now_ms)
    : _node(node), _now_ms(now_ms ? std::move(now_ms) : [] { return base::unix_now_ms(); }) {}

stamp stamp_clock::next() { return next_after(stamp{}); }

stamp stamp_clock::next_after(const stamp& floor) {
    const std::uint64_t physical = static_cast<std::uint64_t>(std::max<std::int64_t>(0, _now_ms()))
                                   << 16;
    std::uint64_t last = _last.load(std::memory_order_relaxed);
    for (;;) {
        std::uint64_t t = std::max({physical, last + 1, floor.time + 1});
        if (_last.compare_exchange_weak(last, t, std::memory_order_relaxed)) return stamp{t, _node};
    }
}

void stamp_clock::observe(const stamp& seen) {
    // A stamp from a clock far ahead would carry this one along for good: past the skew a cluster
    // tolerates, it is not followed (the write it names is ordered by its stamp all the same).
    if (seen.unix_ms() - _now_ms() > max_skew_ms) return;
    std::uint64_t last = _last.load(std::memory_order_relaxed);
    while (seen.time > last &&
           !_last.compare_exchange_weak(last, seen.time, std::memory_order_relaxed)) {}
}

}  // namespace fjord::cluster
