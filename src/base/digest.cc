#include "base/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <utility>

#include "base/assert.h"

namespace fjord::base {

namespace {
const EVP_MD* md_of(digest_kind kind) {
    switch (kind) {
        case digest_kind::md5: return EVP_md5();
        case digest_kind::sha1: return EVP_sha1();
        case digest_kind::sha256: return EVP_sha256();
    }
    FJORD_UNREACHABLE("digest kind");
}
}  // namespace

digest::digest(digest_kind kind) : _ctx(EVP_MD_CTX_new()), _kind(kind) {
    FJORD_ASSERT(_ctx != nullptr);
    FJORD_ASSERT(EVP_DigestInit_ex(_ctx, md_of(kind), nullptr) == 1);
}

digest::~digest() {
    if (_ctx) EVP_MD_CTX_free(_ctx);
}

digest::digest(digest&& other) noexcept
    : _ctx(std::exchange(other._ctx, nullptr)), _kind(other._kind) {}

digest& digest::operator=(digest&& other) noexcept {
    if (this != &other) {
        if (_ctx) EVP_MD_CTX_free(_ctx);
        _ctx = std::exchange(other._ctx, nullptr);
        _kind = other._kind;
    }
    return *this;
}

void digest::update(std::span<const std::byte> data) {
    if (!data.empty()) FJORD_ASSERT(EVP_DigestUpdate(_ctx, data.data(), data.size()) == 1);
}

std::string digest::finish() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    FJORD_ASSERT(EVP_DigestFinal_ex(_ctx, out, &len) == 1);
    FJORD_ASSERT(EVP_DigestInit_ex(_ctx, md_of(_kind), nullptr) == 1);
    return std::string(reinterpret_cast<char*>(out), len);
}

std::string sha256(std::string_view data) {
    digest d(digest_kind::sha256);
    d.update(data);
    return d.finish();
}

std::string md5(std::string_view data) {
    digest d(digest_kind::md5);
    d.update(data);
    return d.finish();
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    FJORD_ASSERT(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                      reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
                      &len) != nullptr);
    return std::string(reinterpret_cast<char*>(out), len);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace fjord::base
