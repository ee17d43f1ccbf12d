#pragma once

// The request payload of a PUT as the object store sees it: a byte_source that pulls the HTTP body,
// strips aws-chunked framing in place, verifies chunk and trailer signatures as it goes, and feeds every
// payload byte once to the hashes the request needs (SHA-256 for a signed payload, MD5 for Content-MD5 or
// an MD5 ETag, the x-amz-checksum-* algorithm). verify() is called after the last byte and before the
// object is committed: a mismatch stores nothing.

#include <cstdint>
#include <optional>
#include <string>

#include "base/digest.h"
#include "http/chunked.h"
#include "http/connection.h"
#include "s3/checksum.h"
#include "auth/sigv4.h"
#include "store/bytes.h"

namespace fjord::s3 {

struct payload_options {
    bool aws_chunked = false;                     // a STREAMING-* payload
    std::optional<std::uint64_t> decoded_length;  // x-amz-decoded-content-length
    std::optional<std::string> content_md5;       // raw 16 bytes from Content-MD5
    bool compute_md5 = false;                     // for an MD5 ETag
    checksum_algorithm checksum = checksum_algorithm::none;
    std::optional<std::string> checksum_expected;  // base64 from a header; else from the trailer
    bool checksum_from_trailer = false;            // x-amz-trailer names the checksum
};

class payload_source final : public store::byte_source {
public:
    payload_source(http::body_reader& body, const auth::auth_result& auth, payload_options options);

    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override;
    // After the source returned 0: checks length, SHA-256, MD5, checksum and trailer signature.
    base::result<void> verify();

    const std::string& md5_raw() const { return _md5_raw; }
    checksum_algorithm checksum() const { return _options.checksum; }
    const std::string& checksum_base64() const { return _checksum_value; }
    std::uint64_t payload_bytes() const { return _payload_bytes; }

private:
    io::task<base::result<std::size_t>> read_aws_chunked(std::byte* dst, std::size_t max);
    base::result<void> on_chunk_end();
    void consume(std::span<const std::byte> data);

    http::body_reader& _body;
    const auth::auth_result& _auth;
    payload_options _options;
    std::optional<base::digest> _sha256;
    std::optional<base::digest> _md5;
    std::optional<running_checksum> _checksum;
    std::optional<http::chunked_decoder> _decoder;
    std::optional<auth::chunk_signature_verifier> _chunk_verifier;
    std::uint64_t _payload_bytes = 0;
    bool _ended = false;
    std::string _md5_raw;
    std::string _checksum_value;
};

}  // namespace fjord::s3
