// Fuzzes journal recovery: store::scan_journal over a torn or corrupt journal image, and
// store::decode(decoder&, object_record&) over record payloads read back from disk.
//
// Input: byte 0 picks the first sequence number the scan expects (0 = any, 1, or the seq of the
// first record) and whether the rest is also decoded directly as an object record; the rest is the
// journal image. Invariants checked:
//   - the scan never reports valid_bytes beyond the image, and torn_tail exactly when bytes remain;
//   - framing the visited records again with frame_record reproduces exactly the valid prefix, and
//     the records, sequence numbers and last_seq agree with what was visited;
//   - an object record that decodes and uses its whole payload encodes back to the same bytes (or,
//     for a record from before object tags, to the same bytes plus an empty tag list); a record's
//     ACL, its last field, is left out when empty, so every record has one encoding.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "store/codec.h"
#include "store/journal.h"
#include "store/object.h"

namespace {

using namespace fjord::store;

constexpr std::uint8_t record_put_object = 1;  // store/engine_internal.h: bucket, key, record

// Decodes an object record from `payload` (after `prefix_strings` length-prefixed strings) and
// checks that a fully used payload is the canonical encoding of what it decoded to.
void check_object_record(std::string_view payload, int prefix_strings) {
    decoder d(payload);
    std::string prefix;
    encoder prefix_encoder(prefix);
    for (int i = 0; i < prefix_strings; ++i) prefix_encoder.str(d.str());
    object_record record;
    bool ok = decode(d, record);
    if (ok) FUZZ_CHECK(d.ok());
    if (!ok || !d.at_end()) return;
    FUZZ_CHECK(record.headers.size() <= 4096);
    FUZZ_CHECK(record.segments.size() <= 100000);
    FUZZ_CHECK(record.tags.size() <= 64);
    FUZZ_CHECK(record.part_checksums.size() <= 10000);
    std::string again = prefix;
    encoder e(again);
    encode(e, record);
    // Older records end early: before the tag list, the part checksum list, the inline bytes or the
    // version (id and delete-marker flag). They re-encode with empty ones (zero counts and lengths, a
    // zero flag) appended.
    auto padded = [&](std::size_t zeros) {
        return again == std::string(payload) + std::string(zeros, '\0');
    };
    const bool no_version = record.version_id.empty() && !record.delete_marker;
    bool before_version = no_version && padded(5);
    bool before_inline = no_version && record.inline_data.empty() && padded(9);
    bool before_part_checksums =
        no_version && record.inline_data.empty() && record.part_checksums.empty() && padded(13);
    bool before_tags = no_version && record.inline_data.empty() && record.tags.empty() &&
                       record.part_checksums.empty() && padded(17);
    FUZZ_CHECK(again == payload || before_version || before_inline || before_part_checksums ||
               before_tags);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::string_view image(reinterpret_cast<const char*>(data + 1), size - 1);
    std::uint64_t first_seq = 0;
    switch (data[0] % 3) {
        case 0: first_seq = 0; break;
        case 1: first_seq = 1; break;
        case 2:
            if (image.size() >= 16) std::memcpy(&first_seq, image.data() + 8, 8);
            break;
    }
    if (data[0] & 4) check_object_record(image, 0);

    std::string reframed;
    std::uint64_t visited = 0, previous_seq = 0;
    journal_scan scan = scan_journal(
        image, first_seq, [&](std::uint64_t seq, std::uint8_t type, std::string_view payload) {
            FUZZ_CHECK(payload.size() <= journal_max_payload_bytes);
            if (visited == 0 && first_seq != 0) FUZZ_CHECK(seq == first_seq);
            if (visited > 0) FUZZ_CHECK(seq == previous_seq + 1);
            frame_record(reframed, seq, type, payload);
            if (type == record_put_object) check_object_record(payload, 2);
            previous_seq = seq;
            ++visited;
        });
    FUZZ_CHECK(scan.valid_bytes <= image.size());
    FUZZ_CHECK(scan.torn_tail == (scan.valid_bytes != image.size()));
    FUZZ_CHECK(scan.records == visited);
    FUZZ_CHECK(scan.last_seq == previous_seq);
    FUZZ_CHECK(reframed == image.substr(0, scan.valid_bytes));
    return 0;
}
