#include "http/multipart_form.h"

#include <algorithm>
#include <cstring>

#include "base/encoding.h"
#include "http/field_syntax.h"

namespace fjord::http {

namespace {

constexpr std::string_view crlf = "\r\n";
// Spaces and tabs a sender may put after a boundary before its CRLF (RFC 2046 transport padding).
constexpr std::size_t max_padding_bytes = 64;

bool is_boundary_char(char c) {
    static constexpr std::string_view others = "'()+_,-./:=? ";
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           others.find(c) != std::string_view::npos;
}

// A parameter value: a token, or a quoted-string whose backslash escapes are undone. `pos` moves past
// it.
std::optional<std::string> parameter_value(std::string_view text, std::size_t& pos) {
    if (pos < text.size() && text[pos] == '"') {
        std::string value;
        for (++pos; pos < text.size(); ++pos) {
            char c = text[pos];
            if (c == '"') {
                ++pos;
                return value;
            }
            if (c == '\\' && pos + 1 < text.size()) c = text[++pos];
            value += c;
        }
        return std::nullopt;  // no closing quote
    }
    std::size_t end = syntax::skip_token(text, pos);
    if (end == pos) return std::nullopt;
    std::string value(text.substr(pos, end - pos));
    pos = end;
    return value;
}

// The parameters after a media type or disposition type (";" name "=" value)*, names lower-cased.
base::result<std::vector<std::pair<std::string, std::string>>> parameters(std::string_view text,
                                                                          std::size_t pos) {
    std::vector<std::pair<std::string, std::string>> out;
    for (;;) {
        pos = syntax::skip_ows(text, pos);
        if (pos == text.size()) return out;
        if (text[pos] != ';') return base::fail(base::errc::bad_request, "malformed parameters");
        pos = syntax::skip_ows(text, pos + 1);
        if (pos == text.size()) return out;  // a trailing ';'
        std::size_t name_end = syntax::skip_token(text, pos);
        std::string name = base::to_lower(text.substr(pos, name_end - pos));
        pos = syntax::skip_ows(text, name_end);
        if (name.empty() || pos == text.size() || text[pos] != '=')
            return base::fail(base::errc::bad_request, "malformed parameter");
        pos = syntax::skip_ows(text, pos + 1);
        auto value = parameter_value(text, pos);
        if (!value) return base::fail(base::errc::bad_request, "malformed parameter value");
        out.emplace_back(std::move(name), std::move(*value));
    }
}

// An RFC 8187 extended value (charset'language'percent-encoded): UTF-8 and US-ASCII only.
std::optional<std::string> extended_value(std::string_view text) {
    std::size_t first = text.find('\'');
    std::size_t second = first == std::string_view::npos ? first : text.find('\'', first + 1);
    if (second == std::string_view::npos) return std::nullopt;
    std::string charset = base::to_lower(text.substr(0, first));
    if (charset != "utf-8" && charset != "us-ascii") return std::nullopt;
    auto decoded = base::uri_decode(text.substr(second + 1), false);
    if (!decoded || !base::is_valid_utf8(*decoded)) return std::nullopt;
    return decoded;
}

base::result<void> parse_disposition(std::string_view value, form_part_head& out) {
    std::size_t type_end = syntax::skip_token(value, 0);
    if (!base::iequals(value.substr(0, type_end), "form-data"))
        return base::fail(base::errc::bad_request,
                          "a form part's Content-Disposition is not form-data");
    auto params = parameters(value, type_end);
    if (!params) return params.as_failure();
    bool named = false;
    for (auto& [name, v] : *params) {
        if (name == "name") {
            out.name = std::move(v);
            named = true;
        } else if (name == "filename" && !out.filename) {
            out.filename = std::move(v);
        } else if (name == "filename*") {
            auto decoded = extended_value(v);
            if (!decoded) return base::fail(base::errc::bad_request, "malformed filename*");
            out.filename = std::move(*decoded);
        }
    }
    if (!named) return base::fail(base::errc::bad_request, "a form part has no name");
    return {};
}

}  // namespace

base::result<std::string> form_boundary(std::string_view content_type) {
    std::size_t type_end = content_type.find(';');
    std::string_view type = base::trim(content_type.substr(0, type_end));
    if (!base::iequals(type, "multipart/form-data"))
        return base::fail(base::errc::precondition_failed,
                          "Bucket POST must be of the enclosure-type multipart/form-data");
    auto params = type_end == std::string_view::npos
                      ? base::result<std::vector<std::pair<std::string, std::string>>>{}
                      : parameters(content_type, type_end);
    if (!params)
        return base::fail(base::errc::invalid_argument,
                          "malformed multipart/form-data Content-Type");
    for (auto& [name, value] : *params) {
        if (name != "boundary") continue;
        if (value.empty() || value.size() > 70 || value.back() == ' ' ||
            !std::all_of(value.begin(), value.end(), is_boundary_char))
            return base::fail(base::errc::invalid_argument,
                              "malformed multipart/form-data boundary");
        return std::move(value);
    }
    return base::fail(base::errc::invalid_argument, "multipart/form-data without a boundary");
}

base::result<void> parse_part_head(std::string_view text, form_part_head& out) {
    out = {};
    bool disposition = false;
    while (!text.empty()) {
        std::size_t end = text.find(crlf);
        if (end == std::string_view::npos)
            return base::fail(base::errc::bad_request, "a form part head line lacks its CRLF");
        auto field = syntax::parse_field_line(text.substr(0, end));
        if (!field) return field.as_failure();
        text.remove_prefix(end + crlf.size());
        if (base::iequals(field->name, "content-disposition")) {
            if (disposition)
                return base::fail(base::errc::bad_request,
                                  "a form part has two Content-Dispositions");
            disposition = true;
            FJORD_TRY(parse_disposition(field->value, out));
        } else if (base::iequals(field->name, "content-type")) {
            out.content_type = std::string(field->value);
        }
    }
    if (!disposition)
        return base::fail(base::errc::bad_request, "a form part has no Content-Disposition");
    return {};
}

form_decoder::form_decoder(std::string_view boundary, form_limits limits)
    : _delimiter("\r\n--" + std::string(boundary)), _limits(limits) {
    _limits.window_bytes =
        std::max(_limits.window_bytes, _limits.max_part_head_bytes + _delimiter.size() + 8);
    _buf.reserve(_limits.window_bytes);
    _buf = crlf;  // the first boundary line needs no CRLF before it: supply one
}

base::failure form_decoder::fail(base::errc code, std::string message) {
    _state = state::failed;
    return base::fail(code, std::move(message));
}

std::size_t form_decoder::feed(std::span<const std::byte> in) {
    if (_state == state::epilogue || _state == state::failed) return in.size();
    if (_pos > 0 && (_pos >= _buf.size() / 2 || _buf.size() + in.size() > _limits.window_bytes)) {
        _buf.erase(0, _pos);
        _pos = 0;
    }
    std::size_t room = _limits.window_bytes - std::min(_limits.window_bytes, _buf.size());
    std::size_t taken = std::min(room, in.size());
    _buf.append(reinterpret_cast<const char*>(in.data()), taken);
    return taken;
}

base::result<form_decoder::step> form_decoder::next(std::byte* out, std::size_t capacity) {
    switch (_state) {
        case state::preamble: return skip_preamble();
        case state::after_delimiter: return after_delimiter();
        case state::part_head: return read_part_head();
        case state::part_body: return read_part_body(out, capacity);
        case state::epilogue: return step{event::done, 0};
        case state::failed: break;
    }
    return base::fail(base::errc::bad_request, "the form already failed to decode");
}

base::result<form_decoder::step> form_decoder::skip_preamble() {
    std::string_view w = window();
    std::size_t at = w.find(_delimiter);
    if (at != std::string_view::npos) {
        _preamble_bytes += at;
        if (_preamble_bytes > _limits.max_preamble_bytes)
            return fail(base::errc::header_too_large,
                        "no form boundary where the form should start");
        _pos += at + _delimiter.size();
        _state = state::after_delimiter;
        return after_delimiter();
    }
    // Keep what could be the start of the delimiter; the rest is preamble, bounded.
    std::size_t dropped = w.size() > _delimiter.size() ? w.size() - _delimiter.size() : 0;
    _pos += dropped;
    _preamble_bytes += dropped;
    if (_preamble_bytes > _limits.max_preamble_bytes)
        return fail(base::errc::header_too_large, "no form boundary where the form should start");
    return step{};
}

base::result<form_decoder::step> form_decoder::after_delimiter() {
    std::string_view w = window();
    if (w.size() < 2) return step{};
    if (w.starts_with("--")) {
        _pos = _buf.size();
        _state = state::epilogue;
        return step{event::done, 0};
    }
    std::size_t at = 0;
    while (at < w.size() && syntax::is_ows(w[at])) ++at;
    if (at > max_padding_bytes)
        return fail(base::errc::bad_request, "malformed form boundary line");
    if (w.size() < at + 2) return step{};
    if (w.substr(at, 2) != crlf)
        return fail(base::errc::bad_request, "malformed form boundary line");
    _pos += at + 2;
    _state = state::part_head;
    return read_part_head();
}

base::result<form_decoder::step> form_decoder::read_part_head() {
    std::string_view w = window();
    std::size_t end = 0;
    if (w.starts_with(crlf)) {
        end = 0;  // no header lines at all
    } else if (std::size_t at = w.find("\r\n\r\n"); at != std::string_view::npos) {
        end = at + 2;
    } else {
        // The shortest head these bytes could still begin ends one byte before the window does
        // (its final CRLF CR already here): refusing only past that keeps the answer the same
        // however the input is split.
        if (w.size() > _limits.max_part_head_bytes + 1)
            return fail(base::errc::header_too_large, "a form part's head is too large");
        return step{};
    }
    if (end > _limits.max_part_head_bytes)
        return fail(base::errc::header_too_large, "a form part's head is too large");
    if (auto parsed = parse_part_head(w.substr(0, end), _part); !parsed)
        return fail(parsed.code(), parsed.err().message);
    _pos += end + 2;
    _state = state::part_body;
    return step{event::part_begin, 0};
}

form_decoder::step form_decoder::read_part_body(std::byte* out, std::size_t capacity) {
    std::string_view w = window();
    std::size_t at = w.find(_delimiter);
    // Without the delimiter, the last bytes may be its beginning: hold them back.
    std::size_t ready = at != std::string_view::npos    ? at
                        : w.size() >= _delimiter.size() ? w.size() - (_delimiter.size() - 1)
                                                        : 0;
    if (ready == 0 && at == 0) {
        _pos += _delimiter.size();
        _state = state::after_delimiter;
        return step{event::part_end, 0};
    }
    std::size_t n = std::min(ready, capacity);
    if (n == 0) return step{};
    std::memcpy(out, w.data(), n);
    _pos += n;
    return step{event::data, n};
}

base::result<void> form_decoder::end_of_input() const {
    if (_state == state::epilogue) return {};
    return base::fail(base::errc::bad_request, "the form ends before its closing boundary");
}

form_reader::form_reader(body_reader& body, std::string_view boundary, form_limits limits)
    : _body(body), _decoder(boundary, limits), _scratch(16 * 1024, '\0') {}

io::task<base::result<form_decoder::step>> form_reader::next(std::byte* out, std::size_t capacity) {
    for (;;) {
        auto s = _decoder.next(out, capacity);
        if (!s || s->what != form_decoder::event::need_input) co_return s;
        if (_scratch_pos == _scratch_end) {
            auto* dst = reinterpret_cast<std::byte*>(_scratch.data());
            auto got = co_await _body.read(dst, _scratch.size());
            if (!got) co_return got.as_failure();
            if (*got == 0) {
                FJORD_CO_TRY(_decoder.end_of_input());
                co_return form_decoder::step{form_decoder::event::done, 0};
            }
            _scratch_pos = 0;
            _scratch_end = *got;
        }
        auto* src = reinterpret_cast<const std::byte*>(_scratch.data()) + _scratch_pos;
        _scratch_pos += _decoder.feed({src, _scratch_end - _scratch_pos});
    }
}

}  // namespace fjord::http
