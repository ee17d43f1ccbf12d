#pragma once

// Incremental cryptographic digests (MD5, SHA-1, SHA-256), HMAC-SHA256 and HMAC-SHA1 over OpenSSL's
// EVP interface.
// A digest object is owned by one request on one core; it is not thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace fjord::base {

enum class digest_kind { md5, sha1, sha256 };

class digest {
public:
    explicit digest(digest_kind kind);
    ~digest();
    digest(const digest&) = delete;
    digest& operator=(const digest&) = delete;
    digest(digest&& other) noexcept;
    digest& operator=(digest&& other) noexcept;

    void update(std::span<const std::byte> data);
    void update(std::string_view text) {
        update(std::as_bytes(std::span(text.data(), text.size())));
    }
    // Returns the raw digest (16, 20 or 32 bytes) and resets the object for reuse.
    std::string finish();
    digest_kind kind() const { return _kind; }

private:
    evp_md_ctx_st* _ctx = nullptr;
    digest_kind _kind;
};

std::string sha256(std::string_view data);                             // raw 32 bytes
std::string md5(std::string_view data);                                // raw 16 bytes
std::string hmac_sha256(std::string_view key, std::string_view data);  // raw 32 bytes
// Only for what still signs with it (POST Object's Signature Version 2 policy signature).
std::string hmac_sha1(std::string_view key, std::string_view data);  // raw 20 bytes

// Compares two byte strings in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace fjord::base
