#include "store/bucket_router.h"

#include <algorithm>

namespace fjord::store {

namespace {
auto taken(const std::string& name) {
    return base::fail(
        base::errc::bucket_already_owned_by_you,
        "Your previous request to create the named bucket succeeded and you already own it: " +
            name);
}
}  // namespace

io::task<base::result<void>> bucket_router::create_bucket(std::string name) {
    if (_kv.bucket_exists(name)) co_return taken(name);
    co_return co_await _objects.create_bucket(std::move(name));
}

io::task<base::result<void>> bucket_router::create_kv_bucket(std::string name,
                                                             kv_bucket_options options) {
    if (_objects.bucket_exists(name)) co_return taken(name);
    co_return co_await _kv.kv()->create_kv_bucket(std::move(name), options);
}

io::task<base::result<std::optional<bucket_info>>> bucket_router::find_bucket_now(
    std::string name) {
    bucket_catalog* catalog = _objects.lagging_catalog();
    if (_kv.bucket_exists(name) || !catalog) co_return find_bucket(name);
    co_return co_await catalog->find_bucket_now(std::move(name));
}

io::task<base::result<void>> bucket_router::learn_bucket(std::string name) {
    bucket_catalog* catalog = _objects.lagging_catalog();
    if (!catalog) co_return base::result<void>{};
    co_return co_await catalog->learn_bucket(std::move(name));
}

io::task<base::result<void>> bucket_router::delete_bucket(std::string name) {
    co_return co_await of(name).delete_bucket(std::move(name));
}

bool bucket_router::bucket_exists(const std::string& name) const {
    return _kv.bucket_exists(name) || _objects.bucket_exists(name);
}

std::vector<bucket_info> bucket_router::list_buckets() const {
    auto all = _objects.list_buckets();
    auto kv = _kv.list_buckets();
    all.insert(all.end(), kv.begin(), kv.end());
    std::sort(all.begin(), all.end(),
              [](const bucket_info& a, const bucket_info& b) { return a.name < b.name; });
    return all;
}

io::task<base::result<object_record>> bucket_router::put(put_request request, byte_source& body,
                                                         record_finisher finish) {
    object_store& s = of(request.bucket);
    co_return co_await s.put(std::move(request), body, std::move(finish));
}

io::task<base::result<object_record>> bucket_router::head(std::string bucket, std::string key) {
    object_store& s = of(bucket);
    co_return co_await s.head(std::move(bucket), std::move(key));
}

io::task<base::result<object_record>> bucket_router::get(std::string bucket, std::string key,
                                                         read_planner plan, byte_sink& sink) {
    object_store& s = of(bucket);
    co_return co_await s.get(std::move(bucket), std::move(key), std::move(plan), sink);
}

io::task<base::result<std::optional<object_record>>> bucket_router::remove(
    std::string bucket, std::string key, write_conditions conditions) {
    object_store& s = of(bucket);
    co_return co_await s.remove(std::move(bucket), std::move(key), std::move(conditions));
}

io::task<base::result<object_record>> bucket_router::copy(copy_request request, copy_planner plan) {
    // Blocks and objects do not mix: a copy between a KV bucket and an object bucket is refused.
    const bool kv_source = _kv.bucket_exists(request.source_bucket);
    if (kv_source != _kv.bucket_exists(request.bucket))
        co_return base::fail(base::errc::not_implemented,
                             "copies between a KV bucket and an object bucket are not supported");
    object_copier* s = of(request.bucket).copier_of(request.bucket);
    if (!s)
        co_return base::fail(base::errc::not_implemented,
                             "bucket " + request.bucket + " takes no copies");
    co_return co_await s->copy(std::move(request), std::move(plan));
}

io::task<base::result<list_page>> bucket_router::list(list_request request) {
    object_store& s = of(request.bucket);
    co_return co_await s.list(std::move(request));
}

}  // namespace fjord::store
