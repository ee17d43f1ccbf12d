#pragma once

// The object store the front ends see when the server has a KV tier: each operation goes to the KV
// tier when its bucket is a KV bucket, else to the object engine. Bucket names are one namespace
// across both (creating a name that the other holds answers BucketAlreadyOwnedByYou). Holds no state
// of its own; both stores outlive it.

#include "store/object_store.h"

namespace fjord::store {

class bucket_router final : public object_store,
                            public object_copier,
                            public kv_buckets,
                            public bucket_catalog {
public:
    bucket_router(object_store& objects, object_store& kv) : _objects(objects), _kv(kv) {}

    io::task<base::result<void>> create_bucket(std::string name) override;
    io::task<base::result<void>> create_kv_bucket(std::string name,
                                                  kv_bucket_options options) override;
    io::task<base::result<void>> delete_bucket(std::string name) override;
    bool bucket_exists(const std::string& name) const override;
    std::vector<bucket_info> list_buckets() const override;
    std::optional<bucket_info> find_bucket(const std::string& name) const override {
        return of(name).find_bucket(name);
    }
    bool bucket_has_attribute(const std::string& bucket, const std::string& name) const override {
        return of(bucket).bucket_has_attribute(bucket, name);
    }

    io::task<base::result<object_record>> put(put_request request, byte_source& body,
                                              record_finisher finish) override;
    io::task<base::result<object_record>> head(std::string bucket, std::string key) override;
    io::task<base::result<object_record>> get(std::string bucket, std::string key,
                                              read_planner plan, byte_sink& sink) override;
    io::task<base::result<std::optional<object_record>>> remove(
        std::string bucket, std::string key, write_conditions conditions) override;
    // Refuses a copy between a KV bucket and an object bucket.
    io::task<base::result<object_record>> copy(copy_request request, copy_planner plan) override;
    io::task<base::result<list_page>> list(list_request request) override;
    storage_stats stats() const override { return _objects.stats(); }

    // The parts the bucket's own store offers.
    version_store* versions_of(const std::string& bucket) override {
        return of(bucket).versions_of(bucket);
    }
    record_updates* updates_of(const std::string& bucket) override {
        return of(bucket).updates_of(bucket);
    }
    object_copier* copier_of(const std::string& bucket) override {
        return of(bucket).copier_of(bucket) ? this : nullptr;
    }
    upload_store* uploads_of(const std::string& bucket) override {
        return of(bucket).uploads_of(bucket);
    }
    bucket_attributes* attributes_of(const std::string& bucket) override {
        return of(bucket).attributes_of(bucket);
    }
    block_store* blocks_of(const std::string& bucket) override { return _kv.blocks_of(bucket); }
    kv_buckets* kv() override { return _kv.kv() ? this : nullptr; }
    // The object store's catalog, when it can lag (the KV tier's never does). Called directly on a
    // router whose object store has none, these answer from the views, which are then never stale.
    bucket_catalog* lagging_catalog() override {
        return _objects.lagging_catalog() ? this : nullptr;
    }
    io::task<base::result<std::optional<bucket_info>>> find_bucket_now(std::string name) override;
    io::task<base::result<void>> learn_bucket(std::string name) override;
    std::uint64_t catalog_version() const override {
        const bucket_catalog* catalog = _objects.lagging_catalog();
        return catalog ? catalog->catalog_version() : 0;
    }

private:
    object_store& of(const std::string& bucket) const {
        return _kv.bucket_exists(bucket) ? _kv : _objects;
    }
    object_store& _objects;
    object_store& _kv;
};

}  // namespace fjord::store
