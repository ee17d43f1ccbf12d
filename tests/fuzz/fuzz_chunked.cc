// Fuzzes http::chunked_decoder in both formats (HTTP chunked and aws-chunked).
//
// Input: byte 0 picks the format (bit 0) and the output buffer size of the byte-by-byte run
// (bits 1-7); bytes 1-2 pick a split position; the rest is the body as it arrives on the wire.
// The same body is decoded four ways: in one piece, in two pieces split at that position, one byte
// at a time, and in place (out == in, as the connection does). All four must agree on the payload,
// the chunk boundaries and signatures, the trailers, where the body ends, and the error, if any.
// The only tolerated difference: a size or trailer line that can no longer fit its limit is
// refused as soon as the decoder sees enough bytes, so a run that saw more bytes at once may fail
// with header_too_large where a byte-by-byte run is still waiting for input.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "http/chunked.h"

namespace {

using fjord::base::errc;
using fjord::http::chunk_limits;
using fjord::http::chunked_decoder;

// Small limits so that the fuzzer reaches them with short inputs.
chunk_limits fuzz_limits() {
    chunk_limits limits;
    limits.max_chunk_line_bytes = 128;
    limits.max_trailer_bytes = 256;
    limits.max_trailer_count = 4;
    return limits;
}

struct outcome {
    std::string payload;
    std::vector<std::pair<std::uint64_t, std::string>> chunks;  // size and signature of each
    std::vector<std::pair<std::string, std::string>> trailers;
    bool finished = false;
    std::size_t body_bytes = 0;  // input consumed when the body finished
    errc error = errc::ok;
};

// Feeds `body` to a decoder in pieces of at most `piece_bytes` (the last piece may be cut at
// `split`), keeping unconsumed bytes for the next call as a connection does. With in_place, the
// output goes into the input buffer itself.
outcome decode(chunked_decoder::format format, std::string_view body, std::vector<std::size_t> cuts,
               std::size_t out_capacity, bool in_place) {
    chunked_decoder decoder(format, fuzz_limits());
    outcome result;
    std::string pending;  // received, not yet consumed
    std::size_t delivered = 0, consumed_total = 0;
    std::vector<std::byte> out(out_capacity);
    cuts.push_back(body.size());
    for (std::size_t cut : cuts) {
        pending.append(body.substr(delivered, cut - delivered));
        delivered = cut;
        // Each call consumes or produces at least one byte, or stops at a chunk boundary, which
        // happens at most once per input byte plus once for the last chunk.
        for (std::size_t calls = 0; !pending.empty(); ++calls) {
            FUZZ_CHECK(calls <= 2 * body.size() + 4);
            std::byte* target = out.data();
            std::size_t capacity = out.size();
            if (in_place) {
                target = reinterpret_cast<std::byte*>(pending.data());
                capacity = pending.size();
            }
            auto step = decoder.decode(std::as_bytes(std::span(pending.data(), pending.size())),
                                       target, capacity);
            if (!step) {
                result.error = step.code();
                FUZZ_CHECK(result.error == errc::bad_request ||
                           result.error == errc::header_too_large);
                FUZZ_CHECK(!decoder.finished());
                return result;
            }
            FUZZ_CHECK(step->consumed <= pending.size());
            FUZZ_CHECK(step->produced <= step->consumed);
            FUZZ_CHECK(step->produced <= capacity);
            result.payload.append(reinterpret_cast<const char*>(target), step->produced);
            pending.erase(0, step->consumed);
            consumed_total += step->consumed;
            if (step->chunk_finished)
                result.chunks.emplace_back(decoder.chunk_size(), decoder.chunk_signature());
            if (step->body_finished) {
                FUZZ_CHECK(decoder.finished());
                FUZZ_CHECK(decoder.end_of_input());
                result.finished = true;
                result.body_bytes = consumed_total;
                result.trailers = decoder.trailers();
                return result;
            }
            // A step that stopped for no reason must have used all of its input.
            if (!step->chunk_finished && step->produced < capacity) FUZZ_CHECK(pending.empty());
            if (step->consumed == 0 && step->produced == 0 && !step->chunk_finished) break;
        }
    }
    FUZZ_CHECK(!decoder.finished());
    FUZZ_CHECK(decoder.end_of_input().code() == errc::incomplete_body);
    return result;
}

bool same(const outcome& a, const outcome& b) {
    return a.payload == b.payload && a.chunks == b.chunks && a.trailers == b.trailers &&
           a.finished == b.finished && a.body_bytes == b.body_bytes && a.error == b.error;
}

// `eager` saw at least as many bytes at once as `patient`: equal, or eager refused an over-long
// line that patient is still receiving.
bool agree(const outcome& eager, const outcome& patient) {
    if (same(eager, patient)) return true;
    bool patient_waiting = !patient.finished && patient.error == errc::ok;
    return patient_waiting && eager.error == errc::header_too_large &&
           patient.payload.starts_with(eager.payload);
}

void check_chunks(const outcome& result) {
    std::uint64_t total = 0;
    for (const auto& [size, signature] : result.chunks) total += size;
    if (result.finished) {
        FUZZ_CHECK(!result.chunks.empty() && result.chunks.back().first == 0);
        FUZZ_CHECK(total == result.payload.size());
    }
    FUZZ_CHECK(result.payload.size() <= result.body_bytes || !result.finished);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) return 0;
    auto format = (data[0] & 1) != 0 ? chunked_decoder::format::aws : chunked_decoder::format::http;
    std::size_t small_out = static_cast<std::size_t>(data[0] >> 1) % 16 + 1;
    std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
    std::size_t split = (static_cast<std::size_t>(data[1]) << 8 | data[2]) % (body.size() + 1);

    outcome whole = decode(format, body, {}, body.size() + 1, false);
    check_chunks(whole);
    outcome two = decode(format, body, {split}, body.size() + 1, false);
    std::vector<std::size_t> every_byte;
    for (std::size_t i = 1; i < body.size(); ++i) every_byte.push_back(i);
    outcome bytewise = decode(format, body, every_byte, small_out, false);
    outcome in_place = decode(format, body, {split}, 0, true);

    FUZZ_CHECK(agree(whole, two));
    FUZZ_CHECK(agree(whole, bytewise));
    FUZZ_CHECK(agree(two, bytewise));
    FUZZ_CHECK(same(two, in_place));
    if (whole.finished) FUZZ_CHECK(whole.body_bytes <= body.size());
    return 0;
}
