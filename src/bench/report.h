#pragma once

// `--report DIR` for `fjord bench s3` and `fjord bench checkpoint`: the run's JSON (results.json), a
// Markdown table (report.md) and a grouped bar chart (chart.svg), hand-written SVG with no scripts or
// external resources, so that a browser opens it from disk.

#include <string>
#include <vector>

namespace fjord::bench {

// Bars grouped along the x axis: each group has one value per series, drawn side by side.
struct bar_chart {
    std::string title;
    std::string y_label;              // the unit of the values ("GiB/s", "ms")
    std::vector<std::string> series;  // legend entries, one colour each
    struct group {
        std::string label;
        std::vector<double> values;  // one per series
    };
    std::vector<group> groups;
};

std::string render_svg(const bar_chart& chart);

// A Markdown table: header cells, then rows of cells (each row as wide as the header).
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows);

// Creates DIR if needed and writes results.json, report.md and chart.svg into it; false and a message
// on stderr on failure.
bool write_report(const std::string& dir, const std::string& json, const std::string& markdown,
                  const bar_chart& chart);

// printf into a std::string (for table cells).
std::string format_text(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fjord::bench
