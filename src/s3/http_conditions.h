#pragma once

// The request headers of a GET that depend only on their own text: the Range header and the ETag
// lists of If-Match / If-None-Match. Pure functions, separate from object_ops.cc so that they can
// be unit-tested and fuzzed without a service.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace fjord::s3 {

// A satisfiable range: [first, first + length) lies inside the object and length >= 1.
struct byte_range {
    std::uint64_t first = 0;
    std::uint64_t length = 0;
};

// Parses a single "bytes=" range against an object of `size` bytes. nullopt: serve the whole object
// (absent or unparseable, as S3 does); invalid_range: syntactically fine but unsatisfiable.
base::result<std::optional<byte_range>> parse_range(std::string_view header, std::uint64_t size);

// True if the comma-separated ETag list in a header contains the object's ETag (or "*").
bool etag_list_matches(std::string_view list, const std::string& etag);

}  // namespace fjord::s3
