#pragma once
// A body already in memory, as a store::byte_source: what the coordinator writes when it has the bytes
// whole (a body of undeclared length read first, an upload's or part's small record).
//
// Threading: one reader, on one core.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "store/object_store.h"

namespace fjord::cluster {

class memory_source final : public store::byte_source {
public:
    explicit memory_source(std::string bytes) : _bytes(std::move(bytes)) {}
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        const std::size_t n = std::min(max, _bytes.size() - _at);
        std::memcpy(dst, _bytes.data() + _at, n);
        _at += n;
        co_return n;
    }
    std::uint64_t size() const { return _bytes.size(); }

private:
    std::string _bytes;
    std::size_t _at = 0;
};

}  // namespace fjord::cluster
