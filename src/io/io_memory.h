#pragma once

// Memory for O_DIRECT I/O buffers: anonymous, aligned to 2 MiB and, unless told not to, advised for
// transparent huge pages (MADV_HUGEPAGE), so that a buffer is physically contiguous.
//
// Why: the block layer describes a request as one segment per physically contiguous run of memory. On
// 4 KiB pages a 1 MiB write is 256 segments; on a 2 MiB page it is one. The virtual disk of the benchmark
// machine (virtio-blk with a 256-entry ring and no indirect descriptors, max_segments 254) takes one ring
// entry per segment, so on 4 KiB pages the device holds about 1 MiB of writes at a time (a 1 MiB write is
// even split in two), and every completion must be refilled by the guest before the device has more work.
// On huge pages the ring holds dozens of 1 MiB writes. Measured in docs/benchmarks.md ("Huge-page I/O
// buffers"): raw O_DIRECT writes about 1.7-1.8x and PUT of 64 MiB objects x8 about 1.3x faster. Elsewhere
// fewer segments mean fewer scatter-gather (and IOMMU) entries per request.
//
// Huge pages are best effort: the kernel may have transparent huge pages off ("never") or no free 2 MiB
// page, and then the memory is ordinary 4 KiB pages and everything still works; huge_page_bytes() tells
// which it got. The pages are allocated at construction (MADV_POPULATE_WRITE). With huge_pages false the
// range is advised MADV_NOHUGEPAGE, so it stays on 4 KiB pages even in the kernel's "always" mode.
//
// Lifecycle: owns the mapping; move-only; unmapped when destroyed. Not tied to any thread.

#include <cstddef>

namespace fjord::io {

class io_memory {
public:
    static constexpr std::size_t huge_page_bytes_per_page = 2 * 1024 * 1024;

    io_memory() = default;
    // Maps `bytes` (rounded up to 4 KiB), aligned to 2 MiB; fails the process (FJORD_ASSERT) when the
    // address space is exhausted, as an allocation does.
    io_memory(std::size_t bytes, bool huge_pages);
    io_memory(io_memory&& other) noexcept { *this = static_cast<io_memory&&>(other); }
    io_memory& operator=(io_memory&& other) noexcept;
    io_memory(const io_memory&) = delete;
    io_memory& operator=(const io_memory&) = delete;
    ~io_memory();

    std::byte* data() const { return _data; }
    std::size_t size() const { return _size; }
    // How many of the mapped bytes are backed by huge pages now (from /proc/self/smaps; 0 when it cannot
    // be read). Pages not touched yet count as not huge. A diagnostic: it reads a /proc file.
    std::size_t huge_page_bytes() const;

private:
    void unmap();
    std::byte* _data = nullptr;  // the whole mapping: the alignment slack is unmapped at once
    std::size_t _size = 0;
};

// The mapping io_memory makes, for owners that keep raw pointers (store::block_buffer's memory): `bytes`
// rounded up to 4 KiB, at a 2 MiB boundary, advised and populated as above. nullptr when the address
// space is exhausted. unmap_io_pages takes the same `bytes`.
std::byte* map_io_pages(std::size_t bytes, bool huge_pages);
void unmap_io_pages(std::byte* data, std::size_t bytes);

}  // namespace fjord::io
