// Fuzzes http::form_decoder (multipart/form-data, as POST Object reads it) and http::form_boundary.
//
// Input: byte 0 picks the output buffer size (1 to 64), byte 1 the feed size of the third run (1 to
// 97); the rest is the body, whose boundary is "xB". The body is decoded three ways: fed all at once
// (as much as the window takes), one byte at a time, and in pieces of the chosen size. All three must
// agree on every part's name, filename, content type and body, on whether the form ended, and on the
// error, if any; no step may write more than the output buffer holds. The body is also read as a
// Content-Type value: form_boundary's answer must be 1 to 70 boundary characters.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "http/multipart_form.h"

namespace {

using fjord::base::errc;
using fjord::http::form_decoder;
using fjord::http::form_limits;

// Small limits so that the fuzzer reaches them with short inputs.
form_limits fuzz_limits() {
    form_limits limits;
    limits.window_bytes = 256;
    limits.max_part_head_bytes = 128;
    limits.max_preamble_bytes = 64;
    return limits;
}

struct part {
    std::string name, filename, type, body;
    bool has_filename = false;
    bool operator==(const part&) const = default;
};

struct outcome {
    std::vector<part> parts;
    bool done = false;
    errc error = errc::ok;
    bool operator==(const outcome&) const = default;
};

outcome decode(std::string_view body, std::size_t piece, std::size_t out_capacity) {
    form_decoder d("xB", fuzz_limits());
    outcome result;
    std::vector<std::byte> out(out_capacity + 1);
    constexpr std::byte canary{0x5a};
    std::size_t fed = 0;
    for (;;) {
        out[out_capacity] = canary;
        auto s = d.next(out.data(), out_capacity);
        FUZZ_CHECK(out[out_capacity] == canary);
        if (!s) {
            result.error = s.code();
            return result;
        }
        using ev = form_decoder::event;
        switch (s->what) {
            case ev::need_input: {
                if (fed == body.size()) {
                    auto end = d.end_of_input();
                    result.error = end ? errc::ok : end.code();
                    FUZZ_CHECK(!end);  // the decoder asks for input only before the form ends
                    return result;
                }
                std::string_view chunk = body.substr(fed, piece);
                std::size_t taken = d.feed(std::as_bytes(std::span(chunk.data(), chunk.size())));
                FUZZ_CHECK(taken > 0);  // a decoder that needs input has room for it
                fed += taken;
                break;
            }
            case ev::part_begin:
                result.parts.push_back({d.part().name,
                                        d.part().filename.value_or(""),
                                        d.part().content_type,
                                        {},
                                        d.part().filename.has_value()});
                break;
            case ev::data:
                FUZZ_CHECK(s->produced > 0 && s->produced <= out_capacity && !result.parts.empty());
                result.parts.back().body.append(reinterpret_cast<const char*>(out.data()),
                                                s->produced);
                break;
            case ev::part_end: FUZZ_CHECK(!result.parts.empty()); break;
            case ev::done:
                FUZZ_CHECK(d.done() && d.end_of_input());
                result.done = true;
                return result;
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const std::size_t out_capacity = 1 + data[0] % 64;
    const std::size_t piece = 1 + data[1] % 97;
    std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
    outcome whole = decode(body, body.size() + 1, out_capacity);
    outcome bytewise = decode(body, 1, out_capacity);
    outcome pieces = decode(body, piece, out_capacity);
    FUZZ_CHECK(whole == bytewise);
    FUZZ_CHECK(whole == pieces);
    for (const part& p : whole.parts) FUZZ_CHECK(p.body.find("\r\n--xB") == std::string::npos);

    auto boundary = fjord::http::form_boundary(body);
    if (boundary) FUZZ_CHECK(!boundary->empty() && boundary->size() <= 70);
    return 0;
}
