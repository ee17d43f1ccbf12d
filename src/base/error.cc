#include "base/error.h"

namespace fjord::base {

namespace {
struct errc_info {
    std::string_view name;
    std::string_view s3_code;
    int http_status;
    bool retryable;
};

const errc_info* find_info(errc code) {
    switch (code) {
#define FJORD_ERRC_INFO(name, number, s3, status, retry)                                           \
    case errc::name: {                                                                             \
        static constexpr errc_info info{#name, s3, status, retry};                                 \
        return &info;                                                                              \
    }
        FJORD_ERROR_CODES(FJORD_ERRC_INFO)
#undef FJORD_ERRC_INFO
    }
    return nullptr;
}

const errc_info& info_of(errc code) {
    static constexpr errc_info unknown{"unknown", "InternalError", 500, false};
    const errc_info* info = find_info(code);
    return info ? *info : unknown;
}
}  // namespace

std::string_view errc_name(errc code) { return info_of(code).name; }
std::string_view errc_s3_code(errc code) { return info_of(code).s3_code; }
int errc_http_status(errc code) { return info_of(code).http_status; }
bool errc_retryable(errc code) { return info_of(code).retryable; }

}  // namespace fjord::base
