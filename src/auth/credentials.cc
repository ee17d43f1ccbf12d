// The credentials a server accepts: their shape (check_credentials) and the store that finds a secret by
// its access key.

#include <algorithm>

#include "auth/sigv4.h"
#include "base/assert.h"

namespace fjord::auth {

base::result<void> check_credentials(const credentials& c) {
    auto visible = [](char ch) { return ch > 0x20 && ch < 0x7f; };
    if (c.access_key.size() < 3 || c.access_key.size() > 128 ||
        !std::all_of(c.access_key.begin(), c.access_key.end(), visible))
        return base::fail(base::errc::invalid_argument,
                          "the access key must be 3 to 128 visible ASCII characters (no spaces)");
    if (c.secret_key.size() < 8 || c.secret_key.size() > 256)
        return base::fail(base::errc::invalid_argument,
                          "the secret key must be 8 to 256 characters long");
    bool control = false, blank = true;
    for (char ch : c.secret_key) {
        auto byte = static_cast<unsigned char>(ch);
        if (byte < 0x20 || byte == 0x7f) control = true;
        if (ch != ' ') blank = false;
    }
    if (control)
        return base::fail(base::errc::invalid_argument, "the secret key holds a control character");
    if (blank) return base::fail(base::errc::invalid_argument, "the secret key is only whitespace");
    return {};
}

void credential_store::add(credentials c) {
    FJORD_ASSERT(!c.access_key.empty(), "an access key must not be empty");
    std::string key = c.access_key;
    _by_access_key.insert_or_assign(std::move(key), std::move(c));
}

void credential_store::remove(std::string_view access_key) {
    if (auto it = _by_access_key.find(access_key); it != _by_access_key.end())
        _by_access_key.erase(it);
}

const credentials* credential_store::find(std::string_view access_key) const {
    auto it = _by_access_key.find(access_key);
    return it == _by_access_key.end() ? nullptr : &it->second;
}

}  // namespace fjord::auth
