#pragma once

// Memory for O_DIRECT I/O buffers: anonymous, aligned to 2 MiB and, unless told not to, advised for
// transparent huge pages (MADV_HUGEPAGE), so that a buffer is physically contiguous.
//
// Why: the block layer describes a request as one segment per physically contiguous run of memory. On
// 4 KiB pages a 1 MiB write is 256 segments; on a 2 MiB page it is one. The virtual disk of the benchmark
// machine (virtio-blk with a 256-entry ring and no indirect descriptors, max_segments 254) takes one ring
// entry per segment, so on 4 KiB pages the device holds about 1 MiB of writes at a time (a 1 MiB write is
// even split in two), and every completion must be refilled by the guest before the device has more work.
// On huge pages the ring holds dozens of 1 MiB writes. Measured in docs/benchmarks.md ("Huge-page
// buffers"): PUT of 64 MiB objects x8 about 1.3-1.4x faster. Real NVMe drives gain fewer, cheaper
// segments (PRP/SGL entries) too.
//
// Huge pages are best effort: the kernel may have transparent huge pages off ("never") or no free 2 MiB
// page, and then the memory is ordinary 4 KiB pages and everything still works; huge_page_bytes() tells
// which it got. The pages are allocated when first touched (io_uring buffer registration pins them).
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
    std::byte* _mapping = nullptr;  // what mmap returned (the aligned data may start later)
    std::size_t _mapping_bytes = 0;
    std::byte* _data = nullptr;
    std::size_t _size = 0;
};

}  // namespace fjord::io
