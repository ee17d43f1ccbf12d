#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "base/assert.h"
#include "base/encoding.h"
#include "bench/bench.h"
#include "cli/options.h"

namespace fjord::bench {

namespace {

constexpr const char* palette[] = {"#4e79a7", "#f28e2b", "#59a14f",
                                   "#e15759", "#76b7b2", "#edc948"};
constexpr int chart_width = 760, chart_height = 400;
constexpr int margin_left = 70, margin_right = 20, margin_top = 50, margin_bottom = 60;

// A round axis maximum at or above `value`: 1, 2 or 5 times a power of ten.
double nice_ceiling(double value) {
    if (!(value > 0)) return 1;
    double power = std::pow(10.0, std::floor(std::log10(value)));
    for (double step : {1.0, 2.0, 5.0, 10.0})
        if (step * power >= value) return step * power;
    return 10 * power;
}

bool write_text(const std::filesystem::path& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "fjord bench: cannot write %s\n", path.c_str());
        return false;
    }
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) std::fprintf(stderr, "fjord bench: cannot write %s\n", path.c_str());
    return ok;
}

}  // namespace

std::string format_text(const char* format, ...) {
    char buffer[512];
    va_list args;
    va_start(args, format);
    int n = std::vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    return n > 0 ? std::string(buffer, std::min<std::size_t>(static_cast<std::size_t>(n),
                                                             sizeof buffer - 1))
                 : "";
}

std::string render_svg(const bar_chart& chart) {
    const int plot_w = chart_width - margin_left - margin_right,
              plot_h = chart_height - margin_top - margin_bottom;
    double top = 0;
    for (const auto& g : chart.groups) {
        FJORD_ASSERT(g.values.size() == chart.series.size(), "one value per series");
        for (double v : g.values) top = std::max(top, v);
    }
    top = nice_ceiling(top);
    std::string svg = format_text(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        chart_width, chart_height, chart_width, chart_height);
    svg +=
        format_text("<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", margin_left) +
        base::xml_escaped(chart.title) + "</text>\n";
    for (int tick = 0; tick <= 5; ++tick) {  // horizontal grid and y labels
        double value = top * tick / 5;
        double y = margin_top + plot_h - plot_h * tick / 5.0;
        svg += format_text("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                           margin_left, margin_left + plot_w, y, y);
        svg += format_text("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                           margin_left - 6, y + 4, value);
    }
    svg += format_text("<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">",
                       margin_top + plot_h / 2) +
           base::xml_escaped(chart.y_label) + "</text>\n";
    const std::size_t groups = std::max<std::size_t>(chart.groups.size(), 1),
                      series = std::max<std::size_t>(chart.series.size(), 1);
    const double slot = static_cast<double>(plot_w) / static_cast<double>(groups);
    const double bar = slot * 0.8 / static_cast<double>(series);
    for (std::size_t g = 0; g < chart.groups.size(); ++g) {
        double x0 = margin_left + slot * static_cast<double>(g) + slot * 0.1;
        for (std::size_t s = 0; s < chart.groups[g].values.size(); ++s) {
            double v = std::max(0.0, chart.groups[g].values[s]);
            double h = plot_h * v / top, x = x0 + bar * static_cast<double>(s),
                   y = margin_top + plot_h - h;
            svg +=
                format_text(
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
                    x, y, std::max(bar - 2, 1.0), h, palette[s % std::size(palette)]) +
                base::xml_escaped(chart.groups[g].label + " " + chart.series[s]) +
                format_text(": %.4g ", v) + base::xml_escaped(chart.y_label) + "</title></rect>\n";
            if (bar >= 28)
                svg += format_text(
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.3g</text>\n",
                    x + bar / 2 - 1, y - 3, v);
        }
        svg += format_text("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", x0 + slot * 0.4,
                           margin_top + plot_h + 18) +
               base::xml_escaped(chart.groups[g].label) + "</text>\n";
    }
    svg += format_text("<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n",
                       margin_left, margin_left + plot_w, margin_top + plot_h, margin_top + plot_h);
    for (std::size_t s = 0; s < chart.series.size(); ++s) {  // legend under the axis
        int x = margin_left + static_cast<int>(s) * 140, y = chart_height - 18;
        svg += format_text("<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x,
                           y - 10, palette[s % std::size(palette)]);
        svg += format_text("<text x=\"%d\" y=\"%d\">", x + 18, y) +
               base::xml_escaped(chart.series[s]) + "</text>\n";
    }
    return svg + "</svg>\n";
}

std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows) {
    auto line = [](const std::vector<std::string>& cells) {
        std::string out = "|";
        for (const auto& c : cells) out += " " + c + " |";
        return out + "\n";
    };
    std::string out = line(header) + "|";
    for (std::size_t i = 0; i < header.size(); ++i) out += "---|";
    out += "\n";
    for (const auto& r : rows) {
        FJORD_ASSERT(r.size() == header.size(), "a row as wide as the header");
        out += line(r);
    }
    return out;
}

bool write_report(const std::string& dir, const std::string& json, const std::string& markdown,
                  const bar_chart& chart) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
        std::fprintf(stderr, "fjord bench: cannot create %s: %s\n", dir.c_str(),
                     ec.message().c_str());
        return false;
    }
    std::filesystem::path root(dir);
    return cli::write_json_file((root / "results.json").string(), json) &&
           write_text(root / "report.md", markdown) &&
           write_text(root / "chart.svg", render_svg(chart));
}

}  // namespace fjord::bench
