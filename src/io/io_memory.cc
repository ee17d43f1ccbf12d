#include "io/io_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/assert.h"
#include "base/log.h"
#include "base/units.h"

namespace fjord::io {

std::byte* map_io_pages(std::size_t bytes, bool huge_pages) {
    const std::size_t size = base::align_up(bytes, base::direct_io_alignment_bytes);
    if (size == 0) return nullptr;
    // Over-map by one huge page so that the data can start on a 2 MiB boundary, then give back the slack
    // on both sides: a huge page can only back a 2 MiB-aligned range.
    const std::size_t mapped = size + io_memory::huge_page_bytes_per_page;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto start = reinterpret_cast<std::uintptr_t>(p);
    auto aligned = (start + io_memory::huge_page_bytes_per_page - 1) &
                   ~static_cast<std::uintptr_t>(io_memory::huge_page_bytes_per_page - 1);
    auto* data = reinterpret_cast<std::byte*>(aligned);
    std::size_t head = aligned - start, tail = mapped - head - size;
    // Trimming splits the mapping, which fails (ENOMEM) at vm.max_map_count: then none of it is kept.
    // Unmapping a whole mapping splits nothing, so the fallback should not fail; if it does, say so.
    auto give_back = [](void* whole, std::size_t whole_bytes) -> std::byte* {
        if (munmap(whole, whole_bytes) != 0)
            LOG_ERROR("cannot unmap %zu bytes of I/O memory: %s", whole_bytes,
                      std::strerror(errno));
        return nullptr;
    };
    if (head != 0 && munmap(p, head) != 0) return give_back(p, mapped);
    if (tail != 0 && munmap(data + size, tail) != 0) return give_back(data, size + tail);
    // Best effort: EINVAL when the kernel has no transparent huge pages; the memory works either way. Told
    // not to, the range opts out, so that a kernel in "always" mode does not give it huge pages anyway.
    if (size >= io_memory::huge_page_bytes_per_page)
        (void)madvise(data, size, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    // Allocate the pages now (what they are is then known at once, and the first I/Os do not fault);
    // kernels before 5.14 lack MADV_POPULATE_WRITE and fault them in on first use instead.
#ifdef MADV_POPULATE_WRITE
    (void)madvise(data, size, MADV_POPULATE_WRITE);
#endif
    return data;
}

void unmap_io_pages(std::byte* data, std::size_t bytes) {
    if (data) munmap(data, base::align_up(bytes, base::direct_io_alignment_bytes));
}

io_memory::io_memory(std::size_t bytes, bool huge_pages) {
    _size = base::align_up(bytes, base::direct_io_alignment_bytes);
    if (_size == 0) return;
    _data = map_io_pages(_size, huge_pages);
    FJORD_ASSERT(_data != nullptr, "cannot map I/O buffer memory");
}

io_memory& io_memory::operator=(io_memory&& other) noexcept {
    if (this != &other) {
        unmap();
        _data = std::exchange(other._data, nullptr);
        _size = std::exchange(other._size, 0);
    }
    return *this;
}

io_memory::~io_memory() { unmap(); }

void io_memory::unmap() {
    unmap_io_pages(_data, _size);
    _data = nullptr;
    _size = 0;
}

std::size_t io_memory::huge_page_bytes() const {
    if (!_data) return 0;
    FILE* f = std::fopen("/proc/self/smaps", "re");
    if (!f) return 0;
    const auto lo = reinterpret_cast<std::uintptr_t>(_data), hi = lo + _size;
    std::size_t total = 0;
    bool inside = false;
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
        std::uintmax_t start = 0, end = 0, kib = 0;
        // A mapping's header is "start-end perms ..."; its fields follow as "Name:   value kB" (no field
        // name parses as two hex numbers joined by '-').
        if (std::sscanf(line, "%" SCNxMAX "-%" SCNxMAX " ", &start, &end) == 2)
            inside = start < hi && end > lo;
        else if (inside && std::sscanf(line, "AnonHugePages: %" SCNuMAX " kB", &kib) == 1)
            total += static_cast<std::size_t>(kib) * 1024;
    }
    std::fclose(f);
    return total < _size ? total : _size;
}

}  // namespace fjord::io
