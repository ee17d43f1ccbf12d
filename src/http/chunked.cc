#include "http/chunked.h"

#include <algorithm>
#include <cstring>

#include "base/encoding.h"
#include "http/field_syntax.h"

namespace fjord::http {

namespace {

using base::errc;
using base::fail;

// SigV4 chunk signatures are HMAC-SHA256 values written as lower-case hex.
constexpr std::size_t chunk_signature_chars = 64;

bool is_hex_digit(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Returns the position just past the quoted-string that starts at `pos`, or `pos` when there is no
// well-formed one there (RFC 9110 section 5.6.4).
std::size_t skip_quoted(std::string_view text, std::size_t pos) {
    if (pos >= text.size() || text[pos] != '"') return pos;
    for (std::size_t i = pos + 1; i < text.size(); ++i) {
        char c = text[i];
        if (c == '"') return i + 1;
        if (c == '\\') {
            if (i + 1 == text.size()) return pos;
            c = text[++i];  // quoted-pair: the escaped byte only needs to be a valid field byte
        }
        if (!syntax::is_field_value_byte(c)) return pos;
    }
    return pos;
}

}  // namespace

chunked_decoder::chunked_decoder(format f, chunk_limits limits) : _format(f), _limits(limits) {}

base::result<decode_step> chunked_decoder::decode(std::span<const std::byte> in, std::byte* out,
                                                  std::size_t out_capacity) {
    FJORD_ASSERT(out != nullptr || out_capacity == 0);
    if (_state == state::failed)
        return fail(errc::bad_request, "chunked body already failed to decode");
    std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
    base::result<decode_step> step = decode_some(text, out, out_capacity);
    // A framing error leaves the position in the stream unknown, so nothing after it can be
    // trusted.
    if (!step) _state = state::failed;
    return step;
}

base::result<decode_step> chunked_decoder::decode_some(std::string_view in, std::byte* out,
                                                       std::size_t out_capacity) {
    decode_step step;
    // Every pass consumes at least one input byte or returns, so there are at most in.size()
    // passes.
    while (step.consumed < in.size()) {
        switch (_state) {
            case state::size_line: {
                base::result<bool> complete =
                    take_line(in, step.consumed, _limits.max_chunk_line_bytes + 2);
                if (!complete) return complete.as_failure();
                if (*complete) FJORD_TRY(on_size_line(step));
                if (step.chunk_finished) return step;
                break;
            }
            case state::data:
                copy_data(in, out, out_capacity, step);
                if (step.chunk_finished || step.produced == out_capacity) return step;
                break;
            case state::data_crlf: {
                char expected = _crlf_seen == 0 ? '\r' : '\n';
                if (in[step.consumed] != expected)
                    return fail(errc::bad_request, "chunk data is not followed by CRLF");
                ++step.consumed;
                if (++_crlf_seen == 2) {
                    _crlf_seen = 0;
                    _state = state::size_line;
                }
                break;
            }
            case state::trailer: {
                std::size_t budget = _limits.max_trailer_bytes - _trailer_bytes;
                base::result<bool> complete = take_line(in, step.consumed, budget);
                if (!complete) return complete.as_failure();
                if (*complete) FJORD_TRY(on_trailer_line(step));
                if (step.body_finished) return step;
                break;
            }
            case state::done: return step;
            case state::failed: FJORD_UNREACHABLE("decode_some on a failed decoder");
        }
    }
    return step;
}

// Moves input up to and including the next LF into _line. Returns true when _line holds a whole
// line (its CRLF removed), false when the input ran out first. `max_total_bytes` bounds the line
// with its CRLF; only that many bytes are ever scanned, so a hostile peer cannot make each call
// walk a huge buffer.
base::result<bool> chunked_decoder::take_line(std::string_view in, std::size_t& consumed,
                                              std::size_t max_total_bytes) {
    std::string_view rest = in.substr(consumed);
    std::size_t room = max_total_bytes - std::min(max_total_bytes, _line.size());
    std::size_t lf = rest.substr(0, room).find('\n');
    // Without an LF in `room` bytes, the line cannot end within the limit once its LF arrives.
    if (lf == std::string_view::npos && rest.size() >= room)
        return fail(errc::header_too_large, "chunk size line or trailer section over its limit");
    std::size_t take = lf == std::string_view::npos ? rest.size() : lf + 1;
    _line.append(rest.substr(0, take));
    consumed += take;
    if (lf == std::string_view::npos) return false;
    if (_line.size() < 2 || _line[_line.size() - 2] != '\r')
        return fail(errc::bad_request, "bare LF in a chunked body; CRLF is required");
    _line.resize(_line.size() - 2);
    return true;
}

base::result<void> chunked_decoder::on_size_line(decode_step& step) {
    FJORD_TRY(parse_size_line(_line));
    _line.clear();
    if (_chunk_size == 0) {
        // Reported before the trailers so that a verifier can check the final chunk's signature,
        // which the trailer signature (if any) chains from.
        _state = state::trailer;
        step.chunk_finished = true;
        return {};
    }
    _remaining_bytes = _chunk_size;
    _state = state::data;
    return {};
}

base::result<void> chunked_decoder::parse_size_line(std::string_view line) {
    _signature.clear();
    std::size_t digits_end = 0;
    while (digits_end < line.size() && is_hex_digit(line[digits_end])) ++digits_end;
    if (digits_end == 0) return fail(errc::bad_request, "chunk size is not a hex number");
    std::string_view digits = line.substr(0, digits_end);
    // Leading zeros are legal; dropping them keeps parse_hex_u64's 16-digit bound about magnitude
    // only.
    std::size_t first_nonzero = digits.find_first_not_of('0');
    digits = first_nonzero == std::string_view::npos ? digits.substr(digits.size() - 1)
                                                     : digits.substr(first_nonzero);
    std::optional<std::uint64_t> size = base::parse_hex_u64(digits);
    if (!size || *size > max_chunk_size_bytes)
        return fail(errc::bad_request, "chunk size above 2^40 bytes");
    FJORD_TRY(parse_extensions(line.substr(digits_end)));
    _chunk_size = *size;
    return {};
}

// chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )   (RFC 9112 section
// 7.1.1)
base::result<void> chunked_decoder::parse_extensions(std::string_view text) {
    // Each pass consumes at least the ';' that starts an extension, so `pos` strictly grows.
    for (std::size_t pos = 0; pos < text.size();) {
        pos = syntax::skip_ows(text, pos);
        if (pos == text.size() || text[pos] != ';')
            return fail(errc::bad_request, "malformed chunk extension");
        pos = syntax::skip_ows(text, pos + 1);
        std::size_t name_end = syntax::skip_token(text, pos);
        if (name_end == pos) return fail(errc::bad_request, "chunk extension without a name");
        std::string_view name = text.substr(pos, name_end - pos);
        std::string_view value;
        pos = syntax::skip_ows(text, name_end);
        if (pos < text.size() && text[pos] == '=') {
            pos = syntax::skip_ows(text, pos + 1);
            std::size_t value_end = pos < text.size() && text[pos] == '"'
                                        ? skip_quoted(text, pos)
                                        : syntax::skip_token(text, pos);
            if (value_end == pos) return fail(errc::bad_request, "malformed chunk extension value");
            value = text.substr(pos, value_end - pos);
            pos = value_end;
        }
        FJORD_TRY(on_extension(name, value));
    }
    return {};
}

base::result<void> chunked_decoder::on_extension(std::string_view name, std::string_view value) {
    // RFC 9112 section 7.1.1: a recipient ignores chunk extensions it does not understand.
    if (_format == format::http) return {};
    // aws-chunked defines exactly one extension; anything else means the body is not what the
    // x-amz-content-sha256 header announced.
    if (name != "chunk-signature") return fail(errc::bad_request, "unknown aws-chunked extension");
    if (!_signature.empty()) return fail(errc::bad_request, "more than one chunk-signature");
    bool all_hex = std::all_of(value.begin(), value.end(), is_hex_digit);
    if (value.size() != chunk_signature_chars || !all_hex)
        return fail(errc::bad_request, "chunk-signature is not 64 hex digits");
    _signature.assign(value);
    return {};
}

base::result<void> chunked_decoder::on_trailer_line(decode_step& step) {
    _trailer_bytes += _line.size() + 2;
    if (_line.empty()) {
        _state = state::done;
        step.body_finished = true;
        return {};
    }
    if (_trailers.size() >= _limits.max_trailer_count)
        return fail(errc::header_too_large, "more than max_trailer_count trailer fields");
    base::result<syntax::field_line> field = syntax::parse_field_line(_line);
    if (!field) return field.as_failure();
    _trailers.emplace_back(base::to_lower(field->name), std::string(field->value));
    _line.clear();
    return {};
}

void chunked_decoder::copy_data(std::string_view in, std::byte* out, std::size_t out_capacity,
                                decode_step& step) {
    std::size_t count = std::min(in.size() - step.consumed, out_capacity - step.produced);
    count = static_cast<std::size_t>(std::min<std::uint64_t>(count, _remaining_bytes));
    // memmove, not memcpy: `out` may be the input buffer itself, and produced <= consumed keeps the
    // destination at or behind the source.
    if (count > 0) std::memmove(out + step.produced, in.data() + step.consumed, count);
    step.consumed += count;
    step.produced += count;
    _remaining_bytes -= count;
    FJORD_ASSERT(step.produced <= step.consumed);
    if (_remaining_bytes == 0) {
        _state = state::data_crlf;
        step.chunk_finished = true;
    }
}

base::result<void> chunked_decoder::end_of_input() const {
    if (_state == state::done) return {};
    return fail(errc::incomplete_body, "connection closed before the end of the chunked body");
}

std::string_view chunked_decoder::chunk_signature() const { return _signature; }

std::uint64_t chunked_decoder::chunk_size() const { return _chunk_size; }

const std::vector<std::pair<std::string, std::string>>& chunked_decoder::trailers() const {
    return _trailers;
}

bool chunked_decoder::finished() const { return _state == state::done; }

}  // namespace fjord::http
