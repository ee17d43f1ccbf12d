// Answers and logs of the S3 service: error documents and their S3 wording, XML answers, the
// refusals of requests that name no operation, /metrics, the access log and the log of failed
// authentications.
#include "s3/service.h"
#include "s3/operations.h"

#include <utility>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "base/token_bucket.h"
#include "io/reactor.h"
#include "s3/access_log.h"
#include "s3/xml.h"

namespace fjord::s3 {

std::string s3_message(const base::error& err) {
    // S3 words these errors the same way every time; the store's own wording is for logs.
    switch (err.code) {
        case base::errc::no_such_bucket: return "The specified bucket does not exist";
        case base::errc::no_such_key: return "The specified key does not exist.";
        case base::errc::no_such_upload:
            return "The specified upload does not exist. The upload ID may be invalid, or the upload may have been "
                   "aborted or completed.";
        case base::errc::precondition_failed:
            return "At least one of the pre-conditions you specified did not hold";
        case base::errc::conditional_request_conflict:
            return "A conflicting write to the key came first and this one did not happen; send it again.";
        case base::errc::bucket_already_owned_by_you:
            return "Your previous request to create the named bucket succeeded and you already own it.";
        case base::errc::bucket_not_empty: return "The bucket you tried to delete is not empty";
        case base::errc::incomplete_body:
            return "You did not provide the number of bytes specified by the Content-Length HTTP header.";
        case base::errc::entity_too_large:
            return "Your proposed upload exceeds the maximum allowed object size.";
        case base::errc::data_corrupted:
            return "The stored data is damaged or missing; it is not served.";
        case base::errc::storage_full: return "The server has no space left to store this object.";
        case base::errc::service_unavailable:
            // Cluster nodes say which node was down or what a peer answered: that is for the log.
            return "The service cannot handle the request now. Please try again.";
        default:
            // A server-side failure's own text (file names, errno text) is for the log only.
            if (base::errc_http_status(err.code) == 500)
                return "We encountered an internal error. Please try again.";
            return err.message;
    }
}

std::string error_xml(const base::error& err, std::string_view resource,
                      std::string_view request_id,
                      const std::vector<std::pair<std::string, std::string>>& details) {
    xml_writer x;
    x.open("Error");
    x.element("Code", base::errc_s3_code(err.code));
    x.element("Message",
              err.message.empty() ? std::string(base::errc_name(err.code)) : err.message);
    for (const auto& [name, value] : details) x.element(name, value);
    x.element("Resource", resource);
    x.element("RequestId", request_id);
    x.close("Error");
    return x.take();
}

std::string service::protocol_error_response(const base::error& err,
                                             std::string_view remote_address) {
    std::string id = next_request_id();
    std::string body = error_xml(err, "/", id);
    int status = base::errc_http_status(err.code);
    local_metrics().count_request(base::operation_class::other, status);
    if (_access_log) {
        access_entry entry;
        entry.time_ms = base::unix_now_ms();
        entry.remote = remote_address;
        entry.operation = "-";
        entry.status = status;
        entry.request_id = id;
        _access_log->record(entry);
    }
    return http::format_response_head(
               status, {{"Content-Type", "application/xml"}, {"x-amz-request-id", id}}, body.size(),
               true) +
           body;
}

io::task<void> send_error(context& c, const base::error& err, http::header_list extra_headers) {
    int status = base::errc_http_status(err.code);
    auto headers = c.common_headers();
    for (auto& h : extra_headers) headers.push_back(std::move(h));
    if (status == 304) {
        (void)co_await c.ex.send_all(status, headers, "");
        co_return;
    }
    base::error shown{err.code, s3_message(err)};
    // 501 is a client asking for what we lack, and 503 SlowDown a client going too fast (counted in
    // fjord_slowdown_total): neither is worth a log line per request. Corruption has its own line.
    const bool logged = err.code == base::errc::slow_down ||
                        (err.code == base::errc::data_corrupted && c.corruption_logged);
    if (status >= 500 && status != 501 && !logged) {
        std::string method(c.ex.head().method_text);
        LOG_WARN("%s %s -> %d %s (request %s)", method.c_str(), c.req.resource.c_str(), status,
                 err.message.c_str(), c.request_id.c_str());
    }
    headers.emplace_back("Content-Type", "application/xml");
    std::vector<std::pair<std::string, std::string>> details;
    if (err.code == base::errc::wrong_region || err.code == base::errc::wrong_region_presigned)
        details.emplace_back("Region", c.svc.options().region);
    std::string body =
        error_xml(shown, c.req.resource.empty() ? std::string(c.ex.head().path) : c.req.resource,
                  c.request_id, details);
    (void)co_await c.ex.send_all(status, headers, body);
}

base::error read_failure(context& c, std::string_view bucket, std::string_view key, base::error err,
                         std::string_view role) {
    if (err.code == base::errc::not_found) err.code = base::errc::data_corrupted;
    if (err.code != base::errc::data_corrupted) return err;
    c.svc.local_metrics().add(base::counter::data_corrupted);
    c.corruption_logged = true;
    std::string method(c.ex.head().method_text);
    LOG_ERROR("data corrupted: s3://%.*s/%.*s%s%.*s: %s (%s %s, request %s)",
              static_cast<int>(bucket.size()), bucket.data(), static_cast<int>(key.size()),
              key.data(), role.empty() ? "" : " as ", static_cast<int>(role.size()), role.data(),
              err.message.c_str(), method.c_str(), c.req.resource.c_str(), c.request_id.c_str());
    return err;
}

io::task<void> send_xml(context& c, int status, std::string body) {
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/xml");
    (void)co_await c.ex.send_all(status, headers, body);
}

io::task<void> send_not_an_operation(context& c, base::error err) {
    c.op = base::operation_class::other;
    co_await send_error(c, err);
}

io::task<void> send_metrics(context& c) {
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", std::string(base::prometheus_content_type));
    store::storage_stats st = c.svc.store().stats();
    const io::cross_core_figures cross = io::cross_core_overflow();
    base::storage_figures storage{
        st.spare_files_kept,      st.spare_files_reused,   st.spare_files_removed,
        st.spare_bytes,           st.reserved_ahead_bytes, st.key_lock_waits,
        st.key_lock_waiters_peak, cross.overflowed_total,  cross.overflow_peak};
    std::string text = base::render_prometheus(c.svc.metrics().collect(), storage);
    if (c.svc.options().more_metrics) text += c.svc.options().more_metrics();
    (void)co_await c.ex.send_all(200, headers, text);
}

void log_access(const context& c) {
    if (!c.svc.log()) return;
    access_entry entry;
    entry.time_ms = c.received_ms;
    entry.remote = c.ex.remote_address();
    entry.access_key = c.auth.access_key;
    entry.operation = c.operation;
    entry.bucket = c.req.bucket;
    entry.key = c.req.key;
    entry.status = c.ex.status();
    entry.bytes_in = c.ex.body().bytes_read();
    entry.bytes_out = c.ex.bytes_sent();
    entry.duration_us = (base::monotonic_now_ns() - c.ex.started_ns()) / 1000;
    entry.request_id = c.request_id;
    c.svc.log()->record(entry);
}

namespace {
// The access key a request claims (Credential=KEY/... or X-Amz-Credential=KEY%2F...), for the log of a
// failed authentication: at most 64 visible characters, "?" when there is none.
std::string claimed_access_key(const http::request_head& head) {
    std::string_view text = head.value_of("authorization");
    std::size_t at = text.find("Credential=");
    std::string claimed;
    if (at != std::string_view::npos) {
        claimed = std::string(text.substr(at + 11, text.find('/', at + 11) - (at + 11)));
    } else if (std::size_t q = head.query.find("X-Amz-Credential="); q != std::string_view::npos) {
        std::string_view raw = head.query.substr(q + 17, head.query.find('&', q + 17) - (q + 17));
        auto decoded = base::uri_decode(raw, true);
        if (decoded) claimed = decoded->substr(0, decoded->find('/'));
    }
    if (claimed.empty() || claimed.size() > 64) return "?";
    for (char ch : claimed)
        if (ch <= 0x20 || ch >= 0x7f) return "?";
    return claimed;
}

// Failed authentications logged per core: a burst of 20, then 5 a second.
thread_local base::token_bucket t_auth_log_budget(5, 20);
thread_local std::uint64_t t_auth_log_suppressed = 0;
}  // namespace

void log_auth_failure(const context& c, const base::error& err) {
    if (!t_auth_log_budget.try_take(base::monotonic_now_ns())) {
        ++t_auth_log_suppressed;
        return;
    }
    std::string method(c.ex.head().method_text);
    std::string suppressed;
    if (t_auth_log_suppressed > 0)
        suppressed = "; " + std::to_string(std::exchange(t_auth_log_suppressed, 0)) +
                     " more not logged before this";
    LOG_WARN("authentication failed: %.*s for %s %s from %.*s (access key '%s', request %s%s)",
             static_cast<int>(base::errc_s3_code(err.code).size()),
             base::errc_s3_code(err.code).data(), method.c_str(),
             c.req.resource.empty() ? "/" : c.req.resource.c_str(),
             static_cast<int>(c.ex.remote_address().size()), c.ex.remote_address().data(),
             claimed_access_key(c.ex.head()).c_str(), c.request_id.c_str(), suppressed.c_str());
}

}  // namespace fjord::s3
