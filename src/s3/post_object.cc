// POST Object: a browser-based upload, an HTML form POSTed to the bucket's URL (post_policy.h checks
// its policy and signature). The fields before the file are read and bounded; the file streams into
// the store through the same put as PutObject; the fields after it are ignored, as S3 ignores them.

#include <algorithm>

#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "http/field_syntax.h"
#include "http/multipart_form.h"
#include "s3/post_policy.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

// The fields before the file, names and values together, and how many there may be. The parts after
// the file are bounded too: they are read (so that a truncated form stores nothing) and dropped.
constexpr std::size_t max_pre_file_bytes = 64 * 1024;
constexpr std::size_t max_fields = 256;
constexpr std::size_t max_after_file_bytes = 64 * 1024;
// Every part costs at least this much of the bound, so that empty fields cannot be sent without end.
constexpr std::size_t part_overhead_bytes = 64;

base::failure pre_data_too_large() {
    return base::fail(base::errc::max_post_pre_data_length_exceeded,
                      "Your POST request fields preceding the upload file were too large.");
}

// What the form decoder refuses is a malformed POST to S3; a failed read of the body stays as it is.
base::failure form_failure(const base::error& err) {
    if (err.code == base::errc::bad_request || err.code == base::errc::header_too_large)
        return base::fail(
            base::errc::malformed_post_request,
            "The body of your POST request is not well-formed multipart/form-data: " + err.message);
    return base::fail(err);
}

base::failure one_file() {
    return base::fail(base::errc::incorrect_number_of_files,
                      "POST requires exactly one file upload per request.");
}

// Reads the fields up to the file part, whose head the reader then holds.
io::task<base::result<void>> read_fields(http::form_reader& reader, post_form& form) {
    std::string value;
    std::size_t total = 0;
    std::byte buf[4096];
    for (;;) {
        auto s = co_await reader.next(buf, sizeof buf);
        if (!s) co_return form_failure(s.err());
        using ev = http::form_decoder::event;
        if (s->what == ev::done) co_return one_file();
        if (s->what == ev::part_begin) {
            if (base::iequals(reader.part().name, "file")) co_return base::result<void>{};
            if (form.fields.size() == max_fields) co_return pre_data_too_large();
            total += part_overhead_bytes + reader.part().name.size();
            value.clear();
        } else if (s->what == ev::data) {
            value.append(reinterpret_cast<const char*>(buf), s->produced);
            total += s->produced;
        } else if (s->what == ev::part_end) {
            form.fields.emplace_back(base::to_lower(reader.part().name), std::move(value));
            value = {};
        }
        if (total > max_pre_file_bytes) co_return pre_data_too_large();
    }
}

// The file part's bytes for the store: bounded by the policy's content-length-range, hashed for the
// ETag (an MD5, as S3 gives a POSTed object), and ended only once the rest of the form has been read.
class form_file_source final : public store::byte_source {
public:
    form_file_source(http::form_reader& reader, std::uint64_t min_bytes, std::uint64_t max_bytes)
        : _reader(reader), _min(min_bytes), _max(max_bytes), _md5(base::digest_kind::md5) {}

    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        while (!_ended) {
            auto s = co_await _reader.next(dst, max);
            if (!s) co_return form_failure(s.err());
            using ev = http::form_decoder::event;
            if (s->what == ev::data) {
                _bytes += s->produced;
                if (_bytes > _max)
                    co_return base::fail(base::errc::entity_too_large,
                                         "Your proposed upload exceeds the maximum allowed size");
                _md5.update(std::span<const std::byte>(dst, s->produced));
                co_return s->produced;
            }
            if (s->what == ev::part_end) FJORD_CO_TRY(co_await skip_rest());
        }
        co_return std::size_t{0};
    }
    // After the last byte: the upload meets the range's minimum.
    base::result<void> verify() const {
        if (_bytes < _min)
            return base::fail(base::errc::entity_too_small,
                              "Your proposed upload is smaller than the minimum allowed size");
        return {};
    }
    std::string etag() { return base::hex_encode(_md5.finish()); }

private:
    io::task<base::result<void>> skip_rest() {
        std::byte buf[4096];
        std::size_t skipped = 0;
        for (;;) {
            auto s = co_await _reader.next(buf, sizeof buf);
            if (!s) co_return form_failure(s.err());
            using ev = http::form_decoder::event;
            if (s->what == ev::done) break;
            if (s->what == ev::part_begin && base::iequals(_reader.part().name, "file"))
                co_return one_file();
            skipped += s->what == ev::data ? s->produced : part_overhead_bytes;
            if (skipped > max_after_file_bytes)
                co_return base::fail(base::errc::malformed_post_request,
                                     "The fields after the file are too large.");
        }
        _ended = true;
        co_return base::result<void>{};
    }

    http::form_reader& _reader;
    std::uint64_t _min, _max;
    std::uint64_t _bytes = 0;
    bool _ended = false;
    base::digest _md5;
};

// The form fields an object keeps, as the request headers a PutObject would send them, so that the
// PUT path's rules for metadata and ACLs apply to POST unchanged. Values must fit in a header: they
// come back as headers on every GET.
base::result<void> headers_of(const post_form& form, const std::string& file_type,
                              http::request_head& head) {
    static constexpr std::string_view kept[] = {
        "content-type", "cache-control", "content-disposition", "content-encoding", "expires"};
    for (const auto& [name, value] : form.fields) {
        std::string_view header;
        if (name == "acl") header = "x-amz-acl";
        if (std::find(std::begin(kept), std::end(kept), name) != std::end(kept)) header = name;
        if (name.starts_with("x-amz-meta-")) {
            if (!http::syntax::is_token(name))
                return base::fail(base::errc::invalid_argument, "Invalid metadata field name");
            header = name;
        }
        if (header.empty()) continue;
        if (!http::syntax::is_field_value(value))
            return base::fail(
                base::errc::invalid_argument,
                "The value of the form field " + name + " holds a character a header cannot carry");
        head.headers.push_back({header, value});
    }
    if (!form.find("content-type") && !file_type.empty()) {
        if (!http::syntax::is_field_value(file_type))
            return base::fail(base::errc::invalid_argument, "malformed Content-Type of the file");
        head.headers.push_back({"content-type", file_type});
    }
    return {};
}

// The key field, with ${filename} replaced by the file's name (its last path component).
base::result<std::string> key_of(post_form& form, const std::optional<std::string>& filename) {
    std::string* key = nullptr;
    for (auto& [name, value] : form.fields)
        if (name == "key" && !key) key = &value;
    if (!key)
        return base::fail(
            base::errc::invalid_argument,
            "Bucket POST must contain a field named 'key'. If it is specified, please "
            "check the order of the fields.");
    std::string base_name = filename.value_or("");
    if (auto slash = base_name.find_last_of("/\\"); slash != std::string::npos)
        base_name.erase(0, slash + 1);
    for (std::size_t at = 0; (at = key->find("${filename}", at)) != std::string::npos;) {
        key->replace(at, 11, base_name);
        at += base_name.size();
    }
    if (key->empty())
        return base::fail(base::errc::invalid_argument,
                          "User key must have a length greater than 0.");
    if (!base::is_valid_utf8(*key))
        return base::fail(base::errc::invalid_argument, "The key is not UTF-8.");
    if (key->size() > 1024) return base::fail(base::errc::key_too_long, "Your key is too long");
    return *key;
}

}  // namespace

io::task<void> post_object(context& c) {
    if (c.auth.mode != auth::payload_mode::unsigned_payload)
        co_return co_await send_error(c,
                                      {base::errc::invalid_request,
                                       "POST Object is signed by its form's policy, not its body"});
    auto boundary = http::form_boundary(c.ex.head().value_of("content-type"));
    if (!boundary) co_return co_await send_error(c, boundary.err());
    http::form_reader reader(c.ex.body(), *boundary);
    post_form form;
    if (auto read = co_await read_fields(reader, form); !read)
        co_return co_await send_error(c, read.err());
    const std::string file_type = reader.part().content_type;
    auto key = key_of(form, reader.part().filename);
    auto signer =
        verify_post_form(form, c.svc.users().local(c.svc.store()), c.svc.options().region);
    if (!signer) {
        if (base::errc_http_status(signer.code()) == 403) log_auth_failure(c, signer.err());
        co_return co_await send_error(c, signer.err());
    }
    if (*signer) {
        if (auto ok = check_post_policy((*signer)->policy, form, c.req.bucket,
                                        base::unix_now_ms() / 1000);
            !ok)
            co_return co_await send_error(c, ok.err());
        c.auth = {};
        c.auth.access_key = (*signer)->access_key;
    }
    if (!key) co_return co_await send_error(c, key.err());
    c.req.key = std::move(*key);
    c.req.resource = "/" + c.req.bucket + "/" + c.req.key;
    co_await store_posted(c, form, file_type, reader, *signer ? (*signer)->policy : post_policy{});
}

io::task<void> store_posted(context& c, const post_form& form, const std::string& file_type,
                            http::form_reader& reader, const post_policy& policy) {
    http::request_head head;
    if (auto h = headers_of(form, file_type, head); !h) co_return co_await send_error(c, h.err());
    // Authorized on the form's fields, which are signed and stored, never on the unsigned HTTP headers
    c.form_head = &head;
    auto allowed = check_access(c, access_kind::other, "PutObject");
    c.form_head = nullptr;  // `head` is this frame's
    if (!allowed) co_return co_await send_error(c, allowed.err());
    if (auto acl = resolve_write_acl(c, head, false); !acl)
        co_return co_await send_error(c, acl.err());
    store::object_record metadata;
    metadata.acl = c.write_acl;
    if (auto m = collect_metadata(head, c.svc.options().max_metadata_bytes, metadata); !m)
        co_return co_await send_error(c, m.err());
    if (const std::string* tagging = form.find("tagging")) {
        auto tags = parse_object_tagging(*tagging);
        if (!tags) co_return co_await send_error(c, tags.err());
        metadata.tags = std::move(*tags);
    }
    form_file_source source(
        reader, policy.min_bytes,
        std::min(policy.max_bytes.value_or(UINT64_MAX), c.svc.options().max_object_bytes));
    store::record_finisher finish =
        [&](const store::written_data&) -> base::result<store::object_record> {
        FJORD_TRY(source.verify());
        store::object_record record = metadata;
        record.modified_ms = base::unix_now_ms();
        record.etag = source.etag();
        return record;
    };
    store::put_request request{
        c.req.bucket, c.req.key, std::nullopt, c.svc.options().max_object_bytes, {}};
    auto stored = co_await c.svc.store().put(request, source, finish);
    if (!stored) co_return co_await send_error(c, stored.err());
    co_await answer_post(c, form, *stored);
}

io::task<void> answer_post(context& c, const post_form& form, const store::object_record& stored) {
    auto headers = c.common_headers();
    const std::string etag = "\"" + stored.etag + "\"";
    headers.emplace_back("ETag", etag);
    add_version_header(headers, stored, false);
    std::string location = std::string(c.ex.secure() ? "https://" : "http://") +
                           std::string(c.ex.head().value_of("host")) + "/" + c.req.bucket + "/" +
                           base::uri_encode(c.req.key, true);
    const std::string* redirect = form.find("success_action_redirect");
    if (!redirect) redirect = form.find("redirect");
    if (redirect && redirect->size() <= 2048 && http::syntax::is_field_value(*redirect) &&
        (redirect->starts_with("http://") || redirect->starts_with("https://"))) {
        std::string target = *redirect + (redirect->find('?') == std::string::npos ? "?" : "&") +
                             "bucket=" + base::uri_encode(c.req.bucket, false) +
                             "&key=" + base::uri_encode(c.req.key, false) +
                             "&etag=" + base::uri_encode(etag, false);
        headers.emplace_back("Location", std::move(target));
        co_return (void) co_await c.ex.send_all(303, headers, "");
    }
    headers.emplace_back("Location", location);
    const std::string* status = form.find("success_action_status");
    if (status && *status == "201") {
        xml_writer x;
        x.open("PostResponse")
            .element("Location", location)
            .element("Bucket", c.req.bucket)
            .element("Key", c.req.key)
            .element("ETag", etag)
            .close("PostResponse");
        headers.emplace_back("Content-Type", "application/xml");
        co_return (void) co_await c.ex.send_all(201, headers, x.take());
    }
    (void)co_await c.ex.send_all(status && *status == "200" ? 200 : 204, headers, "");
}

}  // namespace fjord::s3
