// The object record's encoding (store/object.h): every optional tail round-trips, and each record has
// one encoding only.

#include "store/object.h"

#include <gtest/gtest.h>

#include <string>

#include "store/codec.h"

namespace fjord::store {
namespace {

object_record sample(std::string acl, std::string upload_id) {
    object_record r;
    r.size_bytes = 3;
    r.modified_ms = 1'700'000'000'000;
    r.etag = "0123456789abcdef0123456789abcdef-2";
    r.inline_data = "abc";
    r.acl = std::move(acl);
    r.upload_id = std::move(upload_id);
    return r;
}

std::string encoded(const object_record& r) {
    std::string out;
    encoder e(out);
    encode(e, r);
    return out;
}

TEST(object_record_codec, the_acl_and_the_upload_id_round_trip_alone_and_together) {
    for (const auto& [acl, upload_id] : {std::pair<std::string, std::string>{"", ""},
                                         {"owner\n1 0 bob\n", ""},
                                         {"", "upload-1"},
                                         {"owner\n1 0 bob\n", "upload-2"}}) {
        const object_record r = sample(acl, upload_id);
        object_record back;
        const std::string bytes = encoded(r);
        decoder d(bytes);
        ASSERT_TRUE(decode(d, back)) << acl << "/" << upload_id;
        EXPECT_EQ(back.acl, acl);
        EXPECT_EQ(back.upload_id, upload_id);
        EXPECT_EQ(back.etag, r.etag);
        EXPECT_EQ(back.inline_data, "abc");
    }
}

TEST(object_record_codec, a_record_has_one_encoding_only) {
    // An empty ACL written out with nothing after it, or an empty upload id written out
    const std::string plain = encoded(sample("", ""));
    std::string empty_acl = plain;
    encoder(empty_acl).str("");
    std::string empty_upload = encoded(sample("owner\n", ""));
    encoder(empty_upload).str("");
    for (const std::string& text : {empty_acl, empty_upload}) {
        object_record back;
        decoder d(text);
        EXPECT_FALSE(decode(d, back));
    }
}

}  // namespace
}  // namespace fjord::store
