#include "bench/cpu.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace fjord::bench {

double own_cpu_s() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& tv) {
        return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double process_cpu_s(long pid) {
    if (pid <= 0) return -1;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto close_paren = text.rfind(')');
    if (close_paren == std::string::npos) return -1;
    std::istringstream fields(text.substr(close_paren + 2));
    std::string field;
    double utime = -1, stime = -1;
    for (int i = 3; i <= 15 && fields >> field; ++i) {  // field 3 is the state; 14 utime, 15 stime
        if (i == 14) utime = std::strtod(field.c_str(), nullptr);
        if (i == 15) stime = std::strtod(field.c_str(), nullptr);
    }
    if (utime < 0 || stime < 0) return -1;
    return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace fjord::bench
