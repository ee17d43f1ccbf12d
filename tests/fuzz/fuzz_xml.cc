// Fuzzes the CompleteMultipartUpload body parser (s3::parse_complete_body): the one XML document a
// client sends that drives a commit.
//
// Input: the request body. Invariants checked: parsing never crashes; an error is malformed_xml;
// on success there are 1..10000 parts, each numbered 1..10000, no ETag or checksum is longer than
// the body, and a second parse gives the same parts (parsing is a pure function of the body).

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "s3/service_internal.h"

namespace {

constexpr std::uint32_t max_part_number = 10000;  // as S3 (and multipart_ops.cc) define it

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string body(reinterpret_cast<const char*>(data), size);
    auto parts = fjord::s3::parse_complete_body(body);
    if (!parts) {
        FUZZ_CHECK(parts.code() == fjord::base::errc::malformed_xml);
        return 0;
    }
    FUZZ_CHECK(!parts->empty() && parts->size() <= max_part_number);
    for (const auto& part : *parts) {
        FUZZ_CHECK(part.number >= 1 && part.number <= max_part_number);
        FUZZ_CHECK(part.etag.size() <= body.size());
        FUZZ_CHECK(part.checksum.size() <= body.size());
    }
    auto again = fjord::s3::parse_complete_body(body);
    FUZZ_CHECK(again && again->size() == parts->size());
    for (std::size_t i = 0; i < parts->size(); ++i) {
        FUZZ_CHECK((*again)[i].number == (*parts)[i].number);
        FUZZ_CHECK((*again)[i].etag == (*parts)[i].etag);
        FUZZ_CHECK((*again)[i].checksum == (*parts)[i].checksum);
    }
    return 0;
}
