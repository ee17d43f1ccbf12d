#include "base/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <span>
#include <utility>

#include "base/assert.h"

namespace fjord::base {

namespace {
// Fetched once: OpenSSL 3 resolves the legacy EVP_sha256() & co. through its provider store, under a
// lock, on every DigestInit; a fetched EVP_MD skips that (a 4 KiB request spent ~3 % of its CPU there).
const EVP_MD* fetched(const char* name) {
    EVP_MD* md = EVP_MD_fetch(nullptr, name, nullptr);
    FJORD_ASSERT(md != nullptr, "OpenSSL lacks a digest Fjord needs");
    return md;  // kept for the process's life
}

const EVP_MD* md_of(digest_kind kind) {
    static const EVP_MD* const md5 = fetched("MD5");
    static const EVP_MD* const sha1 = fetched("SHA1");
    static const EVP_MD* const sha256 = fetched("SHA256");
    switch (kind) {
        case digest_kind::md5: return md5;
        case digest_kind::sha1: return sha1;
        case digest_kind::sha256: return sha256;
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

// HMAC (RFC 2104) over the fetched digests: OpenSSL's one-shot HMAC() fetches its MAC and digest
// implementations on every call, which cost more than the five short HMACs of a SigV4 check themselves.
// SHA-1 and SHA-256 share the 64-byte block.
namespace {
std::string hmac(digest& inner, digest& outer, std::string_view key, std::string_view data) {
    constexpr std::size_t block_bytes = 64;
    unsigned char k[block_bytes] = {};
    if (key.size() > block_bytes) {
        inner.update(key);
        std::string hashed = inner.finish();
        std::memcpy(k, hashed.data(), hashed.size());
    } else {
        std::memcpy(k, key.data(), key.size());
    }
    unsigned char pad[block_bytes];
    for (std::size_t i = 0; i < block_bytes; ++i) pad[i] = k[i] ^ 0x36;
    inner.update(std::as_bytes(std::span(pad)));
    inner.update(std::as_bytes(std::span(data.data(), data.size())));
    std::string inner_hash = inner.finish();
    for (std::size_t i = 0; i < block_bytes; ++i) pad[i] = k[i] ^ 0x5c;
    outer.update(std::as_bytes(std::span(pad)));
    outer.update(std::as_bytes(std::span(inner_hash.data(), inner_hash.size())));
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(pad, sizeof pad);
    return outer.finish();
}
}  // namespace

std::string hmac_sha256(std::string_view key, std::string_view data) {
    thread_local digest inner(digest_kind::sha256), outer(digest_kind::sha256);
    return hmac(inner, outer, key, data);
}

std::string hmac_sha1(std::string_view key, std::string_view data) {
    thread_local digest inner(digest_kind::sha1), outer(digest_kind::sha1);
    return hmac(inner, outer, key, data);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace fjord::base
