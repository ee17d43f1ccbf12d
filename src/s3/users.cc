#include "s3/users.h"

#include <algorithm>

#include "base/clock.h"
#include "io/cross_core.h"
#include "io/reactor.h"

namespace fjord::s3 {

namespace {
constexpr std::string_view user_prefix = "user/";
// A removed user's access key, kept so that it is never given to anyone again: its buckets, grants
// and policies still name it, and a new user with that key would inherit them.
constexpr std::string_view removed_prefix = "removed-user/";
}  // namespace

std::string owner_of(const store::bucket_info& bucket) {
    auto it = bucket.attributes.find(owner_attribute);
    return it == bucket.attributes.end() ? std::string() : it->second;
}

user_directory::user_directory(unsigned cores, auth::credential_store root)
    : _root(std::move(root)) {
    for (unsigned c = 0; c < std::max(cores, 1u); ++c) {
        auto t = std::make_unique<core_table>();
        t->users = _root;
        _tables.push_back(std::move(t));
    }
}

user_directory::core_table& user_directory::table() {
    unsigned core = io::reactor::on_reactor_thread() ? io::reactor::current().core() : 0;
    return *_tables[core < _tables.size() ? core : 0];
}

void user_directory::load(core_table& t, const store::object_store& store) const {
    t.loaded = true;
    t.users = _root;
    t.names.clear();
    auto system = store.find_bucket(system_bucket);
    if (!system) return;
    for (const auto& [name, secret] : system->attributes) {
        if (!name.starts_with(user_prefix)) continue;
        std::string key = name.substr(user_prefix.size());
        if (is_root(key)) continue;  // root's own secret always wins
        t.users.add({key, secret});
        t.names.push_back(std::move(key));
    }
}

const auth::credential_store& user_directory::local(const store::object_store& store) {
    core_table& t = table();
    // Loaded once, and again when the store's buckets changed elsewhere (another node of a cluster).
    const store::bucket_catalog* catalog = store.lagging_catalog();
    const std::uint64_t version = catalog ? catalog->catalog_version() : 0;
    if (!t.loaded || t.catalog_version != version) {
        load(t, store);
        t.catalog_version = version;
    }
    return t.users;
}

std::vector<std::string> user_directory::list(const store::object_store& store) {
    (void)local(store);
    return table().names;
}

// Takes the user's entry from this core's view of the system bucket, not from the request: concurrent
// changes of one key are then applied on every core as the store ordered them.
io::task<bool> user_directory::apply_on_this_core(const store::object_store* store,
                                                  std::string access_key) {
    core_table& t = table();
    if (!t.loaded) co_return true;  // it loads the store's table, which already has the change
    std::optional<std::string> secret;
    if (auto system = store->find_bucket(system_bucket))
        if (auto it = system->attributes.find(std::string(user_prefix) + access_key);
            it != system->attributes.end())
            secret = it->second;
    auto named = std::find(t.names.begin(), t.names.end(), access_key);
    if (secret) {
        t.users.add({access_key, *secret});
        if (named == t.names.end()) {
            t.names.push_back(access_key);
            std::sort(t.names.begin(), t.names.end());
        }
    } else {
        t.users.remove(access_key);
        if (named != t.names.end()) t.names.erase(named);
    }
    co_return true;
}

io::task<base::result<void>> user_directory::set(store::object_store& store, std::string access_key,
                                                 std::optional<std::string> secret) {
    if (is_root(access_key))
        co_return base::fail(base::errc::invalid_argument,
                             "the root user is set by FJORD_ACCESS_KEY / FJORD_SECRET_KEY");
    if (secret) FJORD_CO_TRY(auth::check_credentials({access_key, *secret}));
    if (!store.bucket_exists(system_bucket)) {
        auto made = co_await store.create_bucket(system_bucket);
        if (!made && made.code() != base::errc::bucket_already_owned_by_you)
            co_return made.as_failure();
    }
    auto system = store.find_bucket(system_bucket);
    const bool exists =
        system && system->attributes.contains(std::string(user_prefix) + access_key);
    const bool removed =
        system && system->attributes.contains(std::string(removed_prefix) + access_key);
    if (secret && removed && !exists)
        co_return base::fail(base::errc::invalid_argument,
                             "the access key " + access_key +
                                 " belonged to a removed user and is never given out again: its "
                                 "buckets, grants and policies still name it");
    // The key is retired before the user goes: a crash between the two leaves the user, still
    // removable, and never a key that could be handed out again.
    store::bucket_attributes* attributes = store.attributes_of(system_bucket);
    if (!attributes) co_return base::fail(base::errc::not_implemented, "this store keeps no users");
    if (!secret && exists && !removed)
        FJORD_CO_TRY(co_await attributes->set_bucket_attribute(
            system_bucket, std::string(removed_prefix) + access_key,
            std::to_string(base::unix_now_ms() / 1000)));
    FJORD_CO_TRY(co_await attributes->set_bucket_attribute(
        system_bucket, std::string(user_prefix) + access_key, secret));
    for (unsigned c = 0; c < _tables.size(); ++c) {
        auto call = [this, &store, access_key] { return apply_on_this_core(&store, access_key); };
        (void)co_await io::invoke_on(c, std::move(call));
    }
    co_return base::result<void>{};
}

}  // namespace fjord::s3
