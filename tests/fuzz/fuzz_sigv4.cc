// Fuzzes SigV4: auth::verify_request and auth::canonical_request on hostile request heads, the
// sign-then-verify round trip, and the percent-encoding they are built on.
//
// Input: byte 0 picks the payload hash and region used for signing; the rest is split at '\n' into
// method, raw path, raw query, then one header per line ("name:value", split at the first ':').
// Invariants checked:
//   - verify_request and canonical_request never crash, whatever the head;
//   - a head verify_request accepts must carry the credential it claims;
//   - a request that sign_authorization signed is accepted by verify_request (the module's promise:
//     a request it signs is a request it accepts), unless its path or query cannot be decoded or
//     its query also claims the presigned form, and never with a signature mismatch; the headers
//     taking part are those the HTTP layer can deliver (token names, valid trimmed values);
//   - likewise a presigned URL from presign_query verifies;
//   - uri_decode(uri_encode(x)) == x, and encoding is canonical after one decode.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/encoding.h"
#include "fuzz_check.h"
#include "http/field_syntax.h"
#include "auth/sigv4.h"

namespace {

using namespace fjord;
using base::errc;

constexpr std::string_view access_key = "AKIDEXAMPLE";
constexpr std::string_view secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr std::string_view amz_date = "20130524T000000Z";
constexpr std::int64_t now_s = 1369353600;  // amz_date as Unix time

struct fuzzed_request {
    std::string_view method, raw_path, raw_query;
    std::vector<auth::header_view> headers;
};

fuzzed_request split_request(std::string_view text) {
    fuzzed_request req;
    std::string_view* fields[] = {&req.method, &req.raw_path, &req.raw_query};
    std::size_t field = 0;
    // Each pass removes one line, so there are at most text.size() + 1 passes.
    while (!text.empty()) {
        std::size_t lf = text.find('\n');
        std::string_view line = text.substr(0, lf);
        text = lf == std::string_view::npos ? std::string_view{} : text.substr(lf + 1);
        if (field < 3) {
            *fields[field++] = line;
            continue;
        }
        std::size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        req.headers.push_back({line.substr(0, colon), line.substr(colon + 1)});
    }
    return req;
}

auth::credential_store make_store() {
    auth::credential_store store;
    store.add({std::string(access_key), std::string(secret_key)});
    return store;
}

void check_uri_round_trip(std::string_view text) {
    for (bool keep_slash : {false, true}) {
        std::string encoded = base::uri_encode(text, keep_slash);
        for (bool plus_is_space : {false, true}) {
            auto decoded = base::uri_decode(encoded, plus_is_space);
            FUZZ_CHECK(decoded && *decoded == text);
        }
    }
    if (auto decoded = base::uri_decode(text, false)) {
        std::string once = base::uri_encode(*decoded, false);
        auto again = base::uri_decode(once, false);
        FUZZ_CHECK(again && *again == *decoded);
        FUZZ_CHECK(base::uri_encode(*again, false) == once);
    }
}

// Only headers the HTTP layer can deliver take part in the round trip: a token name and a valid,
// trimmed field value (http::syntax::parse_field_line). An empty name in particular cannot be
// expressed in SignedHeaders, so a signer given one signs a request it cannot describe.
bool deliverable(const auth::header_view& header) {
    return http::syntax::is_token(header.name) && http::syntax::is_field_value(header.value) &&
           base::trim(header.value) == header.value;
}

// What verify_request may legitimately refuse in a request we signed ourselves.
bool refusal_expected(const auth::request_view& req) {
    if (!base::uri_decode(req.raw_path, false)) return true;
    std::string_view query = req.raw_query;
    while (!query.empty()) {
        std::size_t amp = query.find('&');
        std::string_view piece = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        std::string_view name = piece.substr(0, piece.find('='));
        auto decoded_name = base::uri_decode(name, false);
        auto decoded_value =
            base::uri_decode(piece.substr(std::min(piece.size(), name.size() + 1)), false);
        if (!decoded_name || !decoded_value) return true;
        if (*decoded_name == "X-Amz-Signature" || *decoded_name == "X-Amz-Algorithm") return true;
    }
    return false;
}

void check_sign_then_verify(const fuzzed_request& fuzzed, std::uint8_t choice,
                            const auth::credential_store& store) {
    static const std::array<std::string_view, 5> payloads = {
        auth::unsigned_payload_value, auth::empty_sha256_hex, auth::streaming_signed_value,
        auth::streaming_signed_trailer_value, auth::streaming_unsigned_trailer_value};
    static const std::array<std::string_view, 3> regions = {"us-east-1", "eu-west-3", "fjord"};
    std::string_view payload = payloads[choice % payloads.size()];
    std::string_view region = regions[(choice / payloads.size()) % regions.size()];

    // The verifier reads the first host, x-amz-date and x-amz-content-sha256, so ours go first;
    // the fuzzed headers follow, all of them signed (as a client signs every header it sends).
    std::vector<auth::header_view> headers = {{"Host", "bucket.s3.example.com"},
                                              {"X-Amz-Date", amz_date},
                                              {"x-amz-content-sha256", payload}};
    for (const auto& header : fuzzed.headers)
        if (deliverable(header) && !base::iequals(header.name, "authorization"))
            headers.push_back(header);
    auth::request_view req{fuzzed.method, fuzzed.raw_path, fuzzed.raw_query, headers};
    auth::credentials creds{std::string(access_key), std::string(secret_key)};
    std::string authorization = auth::sign_authorization(req, creds, region, amz_date, payload);
    headers.push_back({"Authorization", authorization});
    req.headers = headers;

    auto verified = auth::verify_request(req, store, now_s);
    FUZZ_CHECK(verified.code() != errc::signature_does_not_match);
    if (refusal_expected(req)) return;
    FUZZ_CHECK(verified);
    FUZZ_CHECK(verified->access_key == access_key);
    FUZZ_CHECK(verified->region == region);
    FUZZ_CHECK(verified->amz_date == amz_date);
    FUZZ_CHECK(!verified->presigned);
}

void check_presign_then_verify(const fuzzed_request& fuzzed, const auth::credential_store& store) {
    auth::credentials creds{std::string(access_key), std::string(secret_key)};
    std::string host = "127.0.0.1:9000";
    std::string query =
        auth::presign_query(fuzzed.method, fuzzed.raw_path, host, creds, "us-east-1", now_s, 900);
    auth::header_view host_header{"host", host};
    auth::request_view req{fuzzed.method, fuzzed.raw_path, query, {&host_header, 1}};
    auto verified = auth::verify_request(req, store, now_s + 60);
    FUZZ_CHECK(verified.code() != errc::signature_does_not_match);
    if (!base::uri_decode(fuzzed.raw_path, false)) {
        FUZZ_CHECK(verified.code() == errc::invalid_uri);
        return;
    }
    FUZZ_CHECK(verified);
    FUZZ_CHECK(verified->presigned && verified->mode == auth::payload_mode::unsigned_payload);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    static const auth::credential_store store = make_store();
    std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    fuzzed_request fuzzed = split_request(text);
    auth::request_view raw{fuzzed.method, fuzzed.raw_path, fuzzed.raw_query, fuzzed.headers};

    // The head as the client sent it: any claim, any time.
    auto verified = auth::verify_request(raw, store, now_s);
    if (verified)
        FUZZ_CHECK(verified->access_key == access_key && verified->seed_signature.size() == 64);
    std::vector<std::string> names;
    for (const auto& header : fuzzed.headers) names.push_back(base::to_lower(header.name));
    for (bool presigned : {false, true}) {
        std::string canonical =
            auth::canonical_request(raw, names, auth::unsigned_payload_value, presigned);
        FUZZ_CHECK(canonical.starts_with(fuzzed.method));
    }

    check_sign_then_verify(fuzzed, data[0], store);
    check_presign_then_verify(fuzzed, store);
    check_uri_round_trip(fuzzed.raw_path);
    check_uri_round_trip(text);
    return 0;
}
