#pragma once
// Version stamps: the order of the writes to one key across a cluster (docs/cluster.md, "Versions").
//
// A stamp is a hybrid logical clock reading and the writer's node tag: `time` is the Unix time in
// milliseconds shifted left by 16 bits, plus a counter that keeps readings of one node strictly
// increasing within a millisecond and past every stamp the node has seen from others. Two writes to one
// key are ordered by their stamps; the node tag breaks the tie between nodes that read the same clock.
// As text a stamp is 24 lower-case hex digits, so that the order of texts is the order of stamps (the
// nodes' engines compare the texts, store::write_order::etag_below).
//
// Thread-safety: stamps are values; a stamp_clock may be used from any thread.
#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace fjord::cluster {

struct stamp {
    std::uint64_t time = 0;  // (unix ms << 16) | counter
    std::uint32_t node = 0;  // the writer's node tag
    auto operator<=>(const stamp&) const = default;
    bool operator==(const stamp&) const = default;
    bool is_zero() const { return time == 0 && node == 0; }
    static constexpr std::size_t text_bytes = 24;
    std::string text() const;
    static std::optional<stamp> parse(std::string_view text);
    // The Unix time in milliseconds the stamp was taken at.
    std::int64_t unix_ms() const { return static_cast<std::int64_t>(time >> 16); }
};

// A node's tag in its stamps: a 32-bit hash of its id.
std::uint32_t node_tag(std::string_view node_id);

class stamp_clock {
public:
    explicit stamp_clock(std::uint32_t node, std::function<std::int64_t()> now_ms = {});
    // A stamp later than every one this clock issued or observed.
    stamp next();
    // next(), and later than `floor` too (a conditional write's successor of the version it read).
    stamp next_after(const stamp& floor);
    // Moves the clock past a stamp seen from another node, unless that stamp is more than
    // max_skew_ms ahead of this node's wall clock.
    void observe(const stamp& seen);
    static constexpr std::int64_t max_skew_ms = 10 * 60 * 1000;
    std::uint32_t node() const { return _node; }

private:
    std::uint32_t _node;
    std::function<std::int64_t()> _now_ms;
    std::atomic<std::uint64_t> _last{0};
};

}  // namespace fjord::cluster
