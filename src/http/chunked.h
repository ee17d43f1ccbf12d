#pragma once

// Streaming decoder for chunked request bodies: HTTP/1.1 `Transfer-Encoding: chunked` (RFC 9112
// section 7.1) and the AWS `aws-chunked` content encoding used by SigV4 streaming uploads, which
// has the same wire shape with a `chunk-signature=<64 hex>` extension per chunk (or no extension in
// the unsigned-trailer form) and checksum trailers.
//
// Lifecycle: one decoder per request body, owned by the connection that reads it, used from that
// connection's core only; it is not thread-safe. It holds at most one partial size line or trailer
// line between calls (bounded by chunk_limits) and never allocates for chunk data, which goes
// straight from the input to `out` (possibly the same buffer). After an error it stays failed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace fjord::http {

struct decode_step {
    std::size_t consumed = 0;  // input bytes used
    std::size_t produced = 0;  // payload bytes written to out
    // The data of one chunk just ended (also reported for the final 0-size chunk).
    bool chunk_finished = false;
    // The final chunk and all trailers (and the final CRLF) were consumed.
    bool body_finished = false;
};

struct chunk_limits {
    std::size_t max_chunk_line_bytes = 4096;    // size line incl. extensions, excluding its CRLF
    std::size_t max_trailer_bytes = 16 * 1024;  // trailer section incl. every CRLF
    std::size_t max_trailer_count = 32;
};

// Chunk sizes above this are refused: no single S3 object part comes near it, and the bound keeps
// size arithmetic far from overflow.
inline constexpr std::uint64_t max_chunk_size_bytes = std::uint64_t{1} << 40;

class chunked_decoder {
public:
    enum class format { http, aws };

    explicit chunked_decoder(format f, chunk_limits limits = {});

    // Decodes input into out[0, out_capacity). Stops early: right after a chunk's data ends
    // (chunk_finished), right after the final 0-size chunk's size line (chunk_finished, so its
    // signature can be checked before trailers), and when the body ends (body_finished). It also
    // stops when `out` is full or the input is used up. `out` may alias `in.data()`: output never
    // overtakes input. Bytes after the end of the body are not consumed; they belong to the next
    // request on the connection. Errors: bad_request (malformed), header_too_large (a line or the
    // trailer section over the limits).
    base::result<decode_step> decode(std::span<const std::byte> in, std::byte* out,
                                     std::size_t out_capacity);

    // To be called when the peer closes the connection: incomplete_body unless the body had ended.
    base::result<void> end_of_input() const;

    // aws format: `chunk-signature=` of the chunk just finished or in progress; "" if none.
    std::string_view chunk_signature() const;
    std::uint64_t chunk_size() const;  // size of the chunk just finished / in progress
    const std::vector<std::pair<std::string, std::string>>& trailers() const;  // lower-cased names
    bool finished() const;

private:
    enum class state { size_line, data, data_crlf, trailer, done, failed };

    base::result<decode_step> decode_some(std::string_view in, std::byte* out,
                                          std::size_t out_capacity);
    base::result<bool> take_line(std::string_view in, std::size_t& consumed,
                                 std::size_t max_total_bytes);
    base::result<void> on_size_line(decode_step& step);
    base::result<void> parse_size_line(std::string_view line);
    base::result<void> parse_extensions(std::string_view text);
    base::result<void> on_extension(std::string_view name, std::string_view value);
    base::result<void> on_trailer_line(decode_step& step);
    void copy_data(std::string_view in, std::byte* out, std::size_t out_capacity,
                   decode_step& step);

    format _format;
    chunk_limits _limits;
    state _state = state::size_line;
    std::string _line;  // the part of a size or trailer line received so far, CRLF included
    std::uint64_t _chunk_size = 0;
    std::uint64_t _remaining_bytes = 0;  // data bytes of the current chunk not yet copied
    std::size_t _crlf_seen = 0;          // bytes of the CRLF after chunk data matched so far
    std::size_t _trailer_bytes = 0;
    std::string _signature;
    std::vector<std::pair<std::string, std::string>> _trailers;
};

}  // namespace fjord::http
