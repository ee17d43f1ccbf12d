#pragma once

#include <cstddef>
#include <cstdint>

namespace fjord::base {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t GiB = 1024 * MiB;
constexpr std::uint64_t TiB = 1024 * GiB;

// The alignment O_DIRECT needs on every drive Fjord supports (logical block size up to 4 KiB).
constexpr std::size_t direct_io_alignment_bytes = 4096;

constexpr std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
    return (value + alignment - 1) / alignment * alignment;
}
constexpr std::uint64_t align_down(std::uint64_t value, std::uint64_t alignment) {
    return value / alignment * alignment;
}

}  // namespace fjord::base
