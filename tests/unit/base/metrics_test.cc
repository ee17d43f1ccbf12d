#include "base/metrics.h"

#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <vector>

namespace fjord::base {
namespace {

// The value of the one sample line `name{labels}` in a rendering; -1 if it is missing or repeated.
long long sample(const std::string& text, const std::string& series) {
    std::istringstream in(text);
    std::string line;
    long long found = -1;
    int matches = 0;
    while (std::getline(in, line)) {
        if (line.rfind(series + " ", 0) == 0) {
            found = std::stoll(line.substr(series.size() + 1));
            ++matches;
        }
    }
    return matches == 1 ? found : -1;
}

TEST(metrics, a_fresh_registry_renders_every_series_at_zero) {
    metrics m(2);
    std::string text = render_prometheus(m.collect());
    EXPECT_EQ(sample(text, "fjord_data_corrupted_total"), 0);
    EXPECT_EQ(sample(text, "fjord_slowdown_total"), 0);
    EXPECT_EQ(sample(text, "fjord_connections_open"), 0);
    EXPECT_EQ(sample(text, R"(fjord_request_timeouts_total{direction="receive"})"), 0);
    EXPECT_EQ(sample(text, R"(fjord_request_timeouts_total{direction="send"})"), 0);
    for (const char* op :
         {"read", "write", "delete", "list", "multipart", "bucket", "admin", "other"})
        for (const char* status : {"2xx", "3xx", "4xx", "5xx"})
            EXPECT_EQ(sample(text, std::string("fjord_requests_total{operation=\"") + op +
                                       "\",status=\"" + status + "\"}"),
                      0)
                << op << " " << status;
}

TEST(metrics, every_metric_has_help_and_type_before_its_samples) {
    metrics m(1);
    std::string text = render_prometheus(m.collect());
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n');
    std::istringstream in(text);
    std::string line, typed;
    while (std::getline(in, line)) {
        ASSERT_FALSE(line.empty());
        if (line.rfind("# HELP ", 0) == 0) continue;
        if (line.rfind("# TYPE ", 0) == 0) {
            std::istringstream fields(line.substr(7));
            std::string type;
            fields >> typed >> type;
            EXPECT_TRUE(type == "counter" || type == "gauge") << line;
            EXPECT_TRUE(type != "counter" ||
                        (typed.size() > 6 && typed.substr(typed.size() - 6) == "_total"))
                << line;
            continue;
        }
        // A sample: its name is the last TYPE line's metric, followed by labels or a space.
        ASSERT_EQ(line.rfind(typed, 0), 0u) << line;
        char next = line[typed.size()];
        EXPECT_TRUE(next == '{' || next == ' ') << line;
    }
}

TEST(metrics, shards_add_up_and_requests_land_in_their_status_class) {
    metrics m(2);
    m.for_core(0).add(counter::data_corrupted);
    m.for_core(1).add(counter::data_corrupted, 2);
    m.shared().add(counter::bytes_sent, 1000);
    m.for_core(0).add(gauge::connections_open, 3);
    m.for_core(1).add(gauge::connections_open, 1);
    m.for_core(0).add(gauge::connections_open, -1);
    m.for_core(0).count_request(operation_class::read, 200);
    m.for_core(1).count_request(operation_class::read, 206);
    m.for_core(1).count_request(operation_class::read, 304);
    m.for_core(0).count_request(operation_class::write, 503);
    m.for_core(0).count_request(operation_class::write, 100);  // interim: not counted
    m.for_core(0).count_request(operation_class::write, 600);  // out of range: not counted
    std::string text = render_prometheus(m.collect());
    EXPECT_EQ(sample(text, "fjord_data_corrupted_total"), 3);
    EXPECT_EQ(sample(text, "fjord_bytes_sent_total"), 1000);
    EXPECT_EQ(sample(text, "fjord_connections_open"), 3);
    EXPECT_EQ(sample(text, R"(fjord_requests_total{operation="read",status="2xx"})"), 2);
    EXPECT_EQ(sample(text, R"(fjord_requests_total{operation="read",status="3xx"})"), 1);
    EXPECT_EQ(sample(text, R"(fjord_requests_total{operation="write",status="5xx"})"), 1);
    EXPECT_EQ(sample(text, R"(fjord_requests_total{operation="write",status="2xx"})"), 0);
    EXPECT_EQ(sample(text, R"(fjord_requests_total{operation="write",status="1xx"})"), -1);
}

TEST(metrics, concurrent_writers_lose_no_increment) {
    constexpr unsigned cores = 4;
    constexpr std::uint64_t per_thread = 100'000;
    metrics m(cores);
    std::vector<std::thread> threads;
    for (unsigned c = 0; c < cores; ++c)
        threads.emplace_back([&m, c] {
            for (std::uint64_t i = 0; i < per_thread; ++i) {
                m.for_core(c).add(counter::bytes_received, 2);
                m.shared().add(counter::slowdowns);  // the shared shard takes several writers
            }
        });
    for (int i = 0; i < 1000; ++i) (void)m.collect();  // reading meanwhile is allowed
    for (auto& t : threads) t.join();
    metrics_snapshot s = m.collect();
    EXPECT_EQ(s.get(counter::bytes_received), 2 * per_thread * cores);
    EXPECT_EQ(s.get(counter::slowdowns), per_thread * cores);
}

}  // namespace
}  // namespace fjord::base
