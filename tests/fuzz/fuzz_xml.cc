// Fuzzes the way every XML request body is read (s3::load_request_xml) and the CompleteMultipartUpload
// body parser on top of it (s3::parse_complete_body): the one XML document a client sends that drives a
// commit.
//
// Input: the request body. Invariants checked: parsing never crashes; an error is malformed_xml;
// every text and attribute value of a loaded document is valid UTF-8 made only of XML characters (no
// NUL from &#0;, no surrogate from &#xD800;); a CompleteMultipartUpload that parses has 1..10000
// parts, each numbered 1..10000, no ETag or checksum longer than the body, and only XML text in them;
// and a second parse gives the same parts (parsing is a pure function of the body).

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "s3/service_internal.h"
#include "s3/xml.h"

namespace {

constexpr std::uint32_t max_part_number = 10000;  // as S3 (and multipart_ops.cc) define it

// Every value in the tree is XML text, to a bounded depth (pugixml itself recurses no deeper).
void check_tree(const pugi::xml_node& node, int depth) {
    if (depth > 10000) return;
    FUZZ_CHECK(fjord::s3::xml_representable(node.name()));
    FUZZ_CHECK(fjord::s3::xml_representable(node.value()));
    for (const pugi::xml_attribute& a : node.attributes()) {
        FUZZ_CHECK(fjord::s3::xml_representable(a.name()));
        FUZZ_CHECK(fjord::s3::xml_representable(a.value()));
    }
    for (const pugi::xml_node& child : node.children()) check_tree(child, depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string body(reinterpret_cast<const char*>(data), size);
    pugi::xml_document doc;
    auto loaded = fjord::s3::load_request_xml(doc, body);
    if (loaded) check_tree(doc, 0);
    else FUZZ_CHECK(loaded.code() == fjord::base::errc::malformed_xml);
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
        FUZZ_CHECK(fjord::s3::xml_representable(part.etag) && fjord::s3::xml_representable(part.checksum));
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
