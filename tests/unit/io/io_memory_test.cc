#include "io/io_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>

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

// The bracketed word of a transparent huge page setting ("always", "madvise", "never", "inherit"), or "".
std::string bracketed(const char* path) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    auto open = line.find('['), close = line.find(']');
    return open == std::string::npos || close == std::string::npos
               ? ""
               : line.substr(open + 1, close - open - 1);
}

// The mode that applies to 2 MiB pages: the per-size setting unless it inherits the global one; "never"
// also when this process has THP disabled (prctl PR_SET_THP_DISABLE shows as "THP_enabled: 0").
std::string thp_mode() {
    std::string mode = bracketed("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled");
    if (mode.empty() || mode == "inherit")
        mode = bracketed("/sys/kernel/mm/transparent_hugepage/enabled");
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("THP_enabled:", 0) == 0 && line.find('0') != std::string::npos)
            return "never";
    return mode;
}

TEST(io_memory, is_aligned_to_a_huge_page_and_rounded_to_4_kib) {
    io_memory m(5 * MiB + 1, true);
    ASSERT_NE(m.data(), nullptr);
    EXPECT_TRUE(aligned_to_huge_page(m.data()));
    EXPECT_EQ(m.size(), 5 * MiB + 4096);
    std::memset(m.data(), 0xab, m.size());  // all of it is mapped and writable
    EXPECT_EQ(static_cast<unsigned char>(m.data()[m.size() - 1]), 0xab);
    // The alignment slack is given back: the page after the end is not mapped (msync: ENOMEM).
    EXPECT_NE(msync(m.data() + m.size(), 4096, MS_ASYNC), 0);
    EXPECT_EQ(errno, ENOMEM);
}

TEST(io_memory, gets_huge_pages_when_the_kernel_gives_them) {
    std::string mode = thp_mode();
    if (mode.empty()) GTEST_SKIP() << "no transparent huge page settings in /sys";
    io_memory m(8 * MiB,
                true);  // allocated at once (MADV_POPULATE_WRITE) or when first touched here
    std::memset(m.data(), 1, m.size());
    std::size_t huge = m.huge_page_bytes();
    EXPECT_LE(huge, m.size());
    if (mode == "never")
        EXPECT_EQ(huge, 0u);
    else
        EXPECT_GT(huge, 0u) << "transparent huge pages are '" << mode
                            << "' but none backs the advised memory";
}

TEST(io_memory, stays_on_small_pages_when_told) {
    io_memory m(8 * MiB,
                false);  // MADV_NOHUGEPAGE: even the kernel's "always" mode leaves it alone
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
