#include "s3/payload.h"

#include <cstring>

#include "base/encoding.h"

namespace fjord::s3 {

namespace {
bool signed_streaming(auth::payload_mode m) {
    return m == auth::payload_mode::streaming_signed ||
           m == auth::payload_mode::streaming_signed_trailer;
}
}  // namespace

payload_source::payload_source(http::body_reader& body, const auth::auth_result& auth,
                               payload_options options)
    : _body(body), _auth(auth), _options(std::move(options)) {
    if (auth.mode == auth::payload_mode::signed_sha256) _sha256.emplace(base::digest_kind::sha256);
    if (_options.content_md5 || _options.compute_md5) _md5.emplace(base::digest_kind::md5);
    if (_options.checksum != checksum_algorithm::none) _checksum.emplace(_options.checksum);
    if (_options.aws_chunked) _decoder.emplace(http::chunked_decoder::format::aws);
    if (signed_streaming(auth.mode)) _chunk_verifier.emplace(auth);
}

void payload_source::consume(std::span<const std::byte> data) {
    if (data.empty()) return;
    _payload_bytes += data.size();
    if (_sha256) _sha256->update(data);
    if (_md5) _md5->update(data);
    if (_checksum) _checksum->update(data);
    if (_chunk_verifier) _chunk_verifier->update(data);
}

io::task<base::result<std::size_t>> payload_source::read(std::byte* dst, std::size_t max) {
    if (_ended) co_return std::size_t{0};
    if (_decoder) co_return co_await read_aws_chunked(dst, max);
    auto n = co_await _body.read(dst, max);
    if (!n) co_return n;
    if (*n == 0) {
        _ended = true;
        co_return std::size_t{0};
    }
    consume({dst, *n});
    co_return *n;
}

base::result<void> payload_source::on_chunk_end() {
    if (!_chunk_verifier) return {};
    return _chunk_verifier->finish_chunk(_decoder->chunk_signature());
}

io::task<base::result<std::size_t>> payload_source::read_aws_chunked(std::byte* dst,
                                                                     std::size_t max) {
    // Raw framed bytes land in dst and the payload is compacted towards dst in place; the decoder
    // stops at every chunk end so each chunk's signature is checked before its successor is used.
    std::size_t produced = 0;
    while (produced == 0 && !_decoder->finished()) {
        auto got = co_await _body.read(dst, max);
        if (!got) co_return got;
        if (*got == 0)
            co_return base::fail(base::errc::incomplete_body, "aws-chunked body ended early");
        std::size_t consumed = 0;
        while (consumed < *got && !_decoder->finished()) {
            auto step =
                _decoder->decode({dst + consumed, *got - consumed}, dst + produced, max - produced);
            if (!step) co_return step.as_failure();
            consume({dst + produced, step->produced});
            consumed += step->consumed;
            produced += step->produced;
            if (step->chunk_finished) FJORD_CO_TRY(on_chunk_end());
            if (step->consumed == 0 && step->produced == 0 && !step->chunk_finished) break;
        }
        if (consumed < *got)
            co_return base::fail(base::errc::bad_request,
                                 "bytes after the end of an aws-chunked body");
    }
    if (_decoder->finished()) {
        if (!_body.finished()) {
            std::byte extra[1];
            auto more = co_await _body.read(extra, 1);
            if (!more || *more != 0)
                co_return base::fail(base::errc::bad_request,
                                     "bytes after the end of an aws-chunked body");
        }
        if (produced == 0) _ended = true;
    }
    co_return produced;
}

base::result<void> payload_source::verify() {
    if (_options.decoded_length && *_options.decoded_length != _payload_bytes)
        return base::fail(base::errc::incomplete_body,
                          "the decoded payload length does not match x-amz-decoded-content-length");
    if (_sha256) {
        std::string got = base::hex_encode(_sha256->finish());
        if (got != _auth.payload_sha256_hex)
            return base::fail(
                base::errc::content_sha256_mismatch,
                "The provided 'x-amz-content-sha256' header does not match what was computed.");
    }
    if (_md5) {
        _md5_raw = _md5->finish();
        if (_options.content_md5 && *_options.content_md5 != _md5_raw)
            return base::fail(base::errc::bad_digest,
                              "The Content-MD5 you specified did not match what we received.");
    }
    if (_decoder) {
        const auto& trailers = _decoder->trailers();
        if (_auth.mode == auth::payload_mode::streaming_signed_trailer) {
            std::string_view signature;
            for (const auto& [name, value] : trailers)
                if (name == "x-amz-trailer-signature") signature = value;
            if (signature.empty())
                return base::fail(base::errc::signature_does_not_match,
                                  "missing x-amz-trailer-signature");
            FJORD_TRY(_chunk_verifier->verify_trailer(trailers, signature));
        }
        if (_options.checksum_from_trailer) {
            std::string expected_name = checksum_header_name(_options.checksum);
            for (const auto& [name, value] : trailers)
                if (name == expected_name) _options.checksum_expected = value;
            if (!_options.checksum_expected)
                return base::fail(base::errc::invalid_request,
                                  "the trailer " + expected_name + " was announced but not sent");
        }
    }
    if (_checksum) {
        _checksum_value = _checksum->finish_base64();
        if (_options.checksum_expected &&
            base::trim(*_options.checksum_expected) != _checksum_value)
            return base::fail(base::errc::bad_digest,
                              "The " + std::string(checksum_name(_options.checksum)) +
                                  " you specified did not match the calculated checksum.");
    }
    return {};
}

}  // namespace fjord::s3
