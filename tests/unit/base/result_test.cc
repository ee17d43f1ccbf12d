#include "base/result.h"

#include <gtest/gtest.h>

namespace fjord::base {
namespace {

result<int> fails_deep() {
    return fail(errc::data_corrupted, "journal-00000002: undecodable record");
}

result<void> in_shard(unsigned shard) {
    FJORD_TRY_CONTEXT(fails_deep(), "shard " + std::to_string(shard));
    return {};
}

result<void> recovering() {
    FJORD_TRY_CONTEXT(in_shard(3), "recovering the metadata");
    return {};
}

TEST(result, an_error_gathers_what_each_caller_was_doing_and_keeps_its_code) {
    auto r = recovering();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.code(), errc::data_corrupted);
    EXPECT_EQ(r.err().message,
              "recovering the metadata: shard 3: journal-00000002: undecodable record");
}

TEST(result, a_success_passes_through_untouched) {
    auto ok = []() -> result<void> {
        FJORD_TRY_CONTEXT(result<int>(7), "never said");
        return {};
    };
    EXPECT_TRUE(ok());
}

}  // namespace
}  // namespace fjord::base
