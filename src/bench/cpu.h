#pragma once

// CPU seconds of this process and of a server process, for the benches' CPU-per-operation figures.

namespace fjord::bench {

// User + system CPU seconds of this process.
double own_cpu_s();
// User + system CPU seconds of another process from /proc/<pid>/stat, or -1 if unreadable.
double process_cpu_s(long pid);

}  // namespace fjord::bench
