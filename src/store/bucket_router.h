#pragma once

// The object store the front ends see when the server has a KV tier: each operation goes to the KV
// tier when its bucket is a KV bucket, else to the object engine. Bucket names are one namespace
// across both (creating a name that the other holds answers BucketAlreadyOwnedByYou). Holds no state
// of its own; both stores outlive it.

#include "store/object_store.h"

namespace fjord::store {

class bucket_router final : public object_store {
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
    io::task<base::result<std::optional<bucket_info>>> find_bucket_now(std::string name) override {
        co_return co_await of(name).find_bucket_now(name);
    }
    bool bucket_has_attribute(const std::string& bucket, const std::string& name) const override {
        return of(bucket).bucket_has_attribute(bucket, name);
    }
    io::task<base::result<void>> set_bucket_attribute(std::string bucket, std::string name,
                                                      std::optional<std::string> value) override;

    io::task<base::result<object_record>> put(put_request request, byte_source& body,
                                              record_finisher finish) override;
    io::task<base::result<object_record>> head(std::string bucket, std::string key) override;
    io::task<base::result<object_record>> get(std::string bucket, std::string key,
                                              read_planner plan, byte_sink& sink) override;
    io::task<base::result<object_record>> update(std::string bucket, std::string key,
                                                 record_editor edit,
                                                 write_conditions conditions) override;
    io::task<base::result<std::optional<object_record>>> remove(
        std::string bucket, std::string key, write_conditions conditions) override;
    io::task<base::result<object_record>> head_version(std::string bucket, std::string key,
                                                       std::string version_id) override;
    io::task<base::result<object_record>> get_version(std::string bucket, std::string key,
                                                      std::string version_id, read_planner plan,
                                                      byte_sink& sink) override;
    io::task<base::result<object_record>> update_version(std::string bucket, std::string key,
                                                         std::string version_id,
                                                         record_editor edit) override;
    io::task<base::result<std::optional<object_record>>> remove_version(
        std::string bucket, std::string key, std::string version_id) override;
    io::task<base::result<list_page>> list_versions(list_request request) override;
    io::task<base::result<object_record>> copy(copy_request request, copy_planner plan) override;
    io::task<base::result<list_page>> list(list_request request) override;
    io::task<base::result<std::string>> create_upload(std::string bucket, std::string key,
                                                      object_record metadata,
                                                      std::string checksum_type) override;
    io::task<base::result<upload_record>> get_upload(std::string bucket, std::string key,
                                                     std::string upload_id) override;
    io::task<base::result<part_record>> upload_part(part_request request, byte_source& body,
                                                    part_finisher finish) override;
    io::task<base::result<part_record>> copy_part(part_copy_request request,
                                                  part_copy_planner plan) override;
    io::task<base::result<object_record>> complete_upload(std::string bucket, std::string key,
                                                          std::string upload_id,
                                                          upload_finalizer finalize,
                                                          write_conditions conditions) override;
    io::task<base::result<void>> abort_upload(std::string bucket, std::string key,
                                              std::string upload_id) override;
    io::task<base::result<std::vector<upload_record>>> list_uploads(
        std::string bucket, std::string prefix, std::string key_marker,
        std::string upload_id_marker, std::uint32_t max_uploads) override;
    storage_stats stats() const override { return _objects.stats(); }
    block_store* blocks_of(const std::string& bucket) override { return _kv.blocks_of(bucket); }

private:
    object_store& of(const std::string& bucket) const {
        return _kv.bucket_exists(bucket) ? _kv : _objects;
    }
    object_store& _objects;
    object_store& _kv;
};

}  // namespace fjord::store
