#pragma once

// Streaming decoder for multipart/form-data request bodies (RFC 7578 over RFC 2046), as browsers and
// S3's POST Object send them: a sequence of parts, each with a small header section (its
// Content-Disposition names the field, and for a file its filename) and a body that ends at
// CRLF "--" boundary. The decoder never holds a whole part: a part's body is handed out as it
// arrives, less the few bytes that might begin the next delimiter, so a file part of any size passes
// through a fixed window (form_limits::window_bytes).
//
// Lifecycle: one decoder per request body, used from the connection's core only; not thread-safe.
// After an error it stays failed. form_reader drives it from an HTTP body_reader.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "http/connection.h"

namespace fjord::http {

struct form_limits {
    std::size_t window_bytes = 64 * 1024;        // input held at most (a part's body streams)
    std::size_t max_part_head_bytes = 8 * 1024;  // one part's header section
    std::size_t max_preamble_bytes = 16 * 1024;  // bytes before the first boundary line
};

// What a part's header section says.
struct form_part_head {
    std::string name;                     // Content-Disposition's name (as sent)
    std::optional<std::string> filename;  // its filename (filename* preferred), when given
    std::string content_type;             // the part's Content-Type ("" when none)
};

// The boundary parameter of a `multipart/form-data` Content-Type: 1 to 70 characters (RFC 2046).
// PreconditionFailed (as S3 answers a POST of another enclosure type) when the type is not
// multipart/form-data; InvalidArgument when the boundary is missing or malformed.
base::result<std::string> form_boundary(std::string_view content_type);

class form_decoder {
public:
    enum class event {
        need_input,  // feed more (or call end_of_input when there is none)
        part_begin,  // a part's head was read: part() describes it
        data,        // `produced` bytes of the current part's body were written to out
        part_end,    // the current part's body ended
        done,        // the closing delimiter was read; what follows is epilogue, ignored
    };
    struct step {
        event what = event::need_input;
        std::size_t produced = 0;
    };

    explicit form_decoder(std::string_view boundary, form_limits limits = {});

    // Appends input to the window; returns how many bytes were taken (0 when the window is full:
    // call next() first). Bytes fed after done are dropped.
    std::size_t feed(std::span<const std::byte> in);
    // The next thing the fed input holds. Errors: bad_request (malformed), header_too_large (a part
    // head or the preamble over the limits).
    base::result<step> next(std::byte* out, std::size_t capacity);
    // There is no more input: bad_request unless the closing delimiter was read.
    base::result<void> end_of_input() const;

    const form_part_head& part() const { return _part; }
    bool done() const { return _state == state::epilogue; }

private:
    enum class state { preamble, after_delimiter, part_head, part_body, epilogue, failed };

    std::string_view window() const { return std::string_view(_buf).substr(_pos); }
    base::result<step> skip_preamble();
    base::result<step> after_delimiter();
    base::result<step> read_part_head();
    step read_part_body(std::byte* out, std::size_t capacity);
    base::failure fail(base::errc code, std::string message);

    std::string _delimiter;  // CRLF "--" boundary
    form_limits _limits;
    state _state = state::preamble;
    std::string _buf;  // the window: _buf[_pos, size) is unread
    std::size_t _pos = 0;
    std::size_t _preamble_bytes = 0;
    form_part_head _part;
};

// Parses a part's header section (lines ending in CRLF, without the final empty line) into `out`:
// a Content-Disposition of form-data with a name is required.
base::result<void> parse_part_head(std::string_view text, form_part_head& out);

// Pulls a multipart/form-data body through a form_decoder.
class form_reader {
public:
    form_reader(body_reader& body, std::string_view boundary, form_limits limits = {});
    // As form_decoder::next, reading the body when the decoder needs input; a body that ends before
    // the closing delimiter is bad_request.
    io::task<base::result<form_decoder::step>> next(std::byte* out, std::size_t capacity);
    const form_part_head& part() const { return _decoder.part(); }
    bool done() const { return _decoder.done(); }

private:
    body_reader& _body;
    form_decoder _decoder;
    std::string _scratch;
    std::size_t _scratch_pos = 0, _scratch_end = 0;
};

}  // namespace fjord::http
