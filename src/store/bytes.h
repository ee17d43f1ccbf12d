#pragma once

// The two ends of a transfer between a front end and the store: where the bytes of a write come from, and
// where the bytes of a read go. Both belong to the coroutine that uses them.

#include <cstddef>
#include <span>

#include "base/result.h"
#include "io/task.h"

namespace fjord::store {

// A stream of bytes to store: read() fills up to max bytes at dst and returns how many; 0 means the end.
class byte_source {
public:
    virtual ~byte_source() = default;
    virtual io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) = 0;
};

// Where an object's bytes go on a read; write() returns once the bytes may be reused.
class byte_sink {
public:
    virtual ~byte_sink() = default;
    virtual io::task<base::result<void>> write(std::span<const std::byte> data) = 0;
};

}  // namespace fjord::store
