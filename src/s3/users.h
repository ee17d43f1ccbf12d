#pragma once

// Users and bucket ownership (docs/security.md, "Users").
//
// The root user (FJORD_ACCESS_KEY / FJORD_SECRET_KEY, service_options::credentials) may do everything, and
// is the only one who may manage users. Other users have an access key and a secret, made by root through
// the admin API; each may create buckets, which it then owns, and act only on buckets it owns (anything
// else is 403 AccessDenied; a bucket that does not exist is still NoSuchBucket). A bucket created before
// users existed, or by root, is root's.
//
// Users are kept durably as attributes of a hidden system bucket (`system_bucket`, a name S3 cannot
// create or reach) through the object-store boundary, so they are as durable as bucket configuration.
// Each core keeps its own copy of the table for signature checks without locks: loaded from the store the
// first time the core serves, updated on every core before an admin change is answered, and loaded again
// when the store says its buckets changed elsewhere (store::bucket_catalog::catalog_version).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "auth/sigv4.h"
#include "io/task.h"
#include "store/object_store.h"

namespace fjord::s3 {

inline constexpr const char* system_bucket = ".fjord-system";
inline constexpr const char* owner_attribute = "owner";

class user_directory {
public:
    user_directory(unsigned cores, auth::credential_store root);

    // This core's table (root and every user), loaded from `store` the first time.
    const auth::credential_store& local(const store::object_store& store);
    bool is_root(std::string_view access_key) const { return _root.find(access_key) != nullptr; }
    // The canonical ID root's buckets and objects show as their owner's.
    std::string root_id() const { return _root.first_access_key(); }
    // The users (not root), by access key, as this core sees them.
    std::vector<std::string> list(const store::object_store& store);

    // Adds (or, with a new secret, changes) a user, or removes one (secret nullopt), durably, then on
    // every core. Refused for a root access key, for a key pair check_credentials refuses, and for the
    // key of a removed user: a removed key is retired for good, since its buckets, grants and policies
    // still name it.
    io::task<base::result<void>> set(store::object_store& store, std::string access_key,
                                     std::optional<std::string> secret);

private:
    struct core_table {
        bool loaded = false;
        std::uint64_t catalog_version = 0;  // the store's, when loaded
        auth::credential_store users;
        std::vector<std::string> names;
    };
    core_table& table();
    void load(core_table& t, const store::object_store& store) const;
    io::task<bool> apply_on_this_core(const store::object_store* store, std::string access_key);

    auth::credential_store _root;
    std::vector<std::unique_ptr<core_table>> _tables;
};

// The owner of a bucket: the access key in its owner attribute, or "" for root's.
std::string owner_of(const store::bucket_info& bucket);

}  // namespace fjord::s3
