#include "io/io_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "io/buffer_pool.h"

namespace fjord::io {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

bool aligned_to_huge_page(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % io_memory::huge_page_bytes_per_page == 0;
}

// The kernel's transparent huge page mode: "always", "madvise" or "never" (the bracketed word), or "".
std::string thp_mode() {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    std::getline(f, line);
    auto open = line.find('['), close = line.find(']');
    return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

TEST(io_memory, is_aligned_to_a_huge_page_and_rounded_to_4_kib) {
    io_memory m(5 * MiB + 1, true);
    ASSERT_NE(m.data(), nullptr);
    EXPECT_TRUE(aligned_to_huge_page(m.data()));
    EXPECT_EQ(m.size(), 5 * MiB + 4096);
    std::memset(m.data(), 0xab, m.size());  // all of it is mapped and writable
    EXPECT_EQ(static_cast<unsigned char>(m.data()[m.size() - 1]), 0xab);
}

TEST(io_memory, gets_huge_pages_when_the_kernel_gives_them) {
    std::string mode = thp_mode();
    if (mode.empty()) GTEST_SKIP() << "no transparent huge page settings in /sys";
    io_memory m(8 * MiB, true);
    std::memset(m.data(), 1, m.size());  // pages are allocated when first touched
    std::size_t huge = m.huge_page_bytes();
    EXPECT_LE(huge, m.size());
    if (mode == "never") EXPECT_EQ(huge, 0u);
    else EXPECT_GT(huge, 0u) << "transparent huge pages are '" << mode << "' but none backs the advised memory";
}

TEST(io_memory, stays_on_small_pages_when_told) {
    if (thp_mode() == "always") GTEST_SKIP() << "transparent huge pages 'always' back unadvised memory too";
    io_memory m(8 * MiB, false);
    std::memset(m.data(), 1, m.size());
    EXPECT_EQ(m.huge_page_bytes(), 0u);
}

TEST(io_memory, moves_and_empties) {
    io_memory a(2 * MiB, true);
    std::byte* p = a.data();
    io_memory b(std::move(a));
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(a.huge_page_bytes(), 0u);
    io_memory c;
    c = std::move(b);
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(io_memory(0, true).data(), nullptr);
}

TEST(io_memory, buffer_pool_buffers_start_on_a_huge_page) {
    buffer_pool pool(buffer_pool_options{1024 * 1024, 4});
    auto first = pool.try_acquire();
    ASSERT_TRUE(first.has_value());
    // Buffers are handed out from the lowest slot, at the start of the pool's memory.
    EXPECT_TRUE(aligned_to_huge_page(first->data()));
}

}  // namespace
}  // namespace fjord::io
