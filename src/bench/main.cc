// `fjord bench` dispatch.

#include <cstdio>
#include <string>
#include <string_view>

#include "bench/bench.h"

namespace fjord::bench {

namespace {

void print_bench_usage(std::FILE* to) {
    std::fputs(
        "usage: fjord bench disk --dir DIR [--size-mib 1024] [--block-kib 1024] [--depth 32] [--files 1] [--passes 1]\n"
        "                      [--repeat-blocks] [--no-huge-pages] [--json FILE]\n"
        "       fjord bench net [--seconds 3] [--streams 1] [--buffer-kib 1024] [--json FILE]\n"
        "       fjord bench s3 --bucket B --op put|get|mixed|head|delete|list [--endpoint http://127.0.0.1:9000]\n"
        "                      [--size 64MiB (4KiB for head, delete, list)] [--concurrency 8] [--duration 10 | --count N]\n"
        "                      [--cores 2] [--objects N] [--verify | --unique-bodies] [--trailer crc32c|crc64nvme] [--server-pid PID]\n"
        "                      [--json FILE] [--report DIR]\n"
        "       fjord bench checkpoint [--endpoint URL] [--bucket checkpoint] [--ranks 8] [--scale 1/32]\n"
        "                      [--checkpoints 10] [--compute-seconds 5] [--part-size 5MiB] [--read-size 128MiB]\n"
        "                      [--uploads-in-flight 2] [--reads-in-flight 2] [--cores 2] [--verify-every 4]\n"
        "                      [--prefix P] [--trailer] [--keep] [--json FILE] [--report DIR]\n"
        "       fjord bench kv --op get|put|exists|workload [--mode batch|s3|both] [--endpoint URL]\n"
        "                      [--bucket bench-kv] [--block 2MiB] [--batch 16 (1000 for exists)] [--concurrency 16]\n"
        "                      [--window 16] [--duration 10] [--objects N] [--capacity BYTES] [--server-pid PID]\n"
        "                      workload: [--model llama3.1-8b|llama3.1-70b] [--users 4] [--chunk-tokens 16]\n"
        "                      [--token-scale 1/16] [--turns 3]; [--json FILE] [--report DIR]\n"
        "       fjord bench ec [--geometry 2+2,4+2,5+3,12+4] [--shard-kib 1024] [--seconds 1] [--json FILE]\n"
        "--report DIR writes DIR/results.json, DIR/report.md and DIR/chart.svg.\n"
        "disk and net measure the physical limits; s3 measures a running Fjord (or any S3) server.\n"
        "s3 credentials come from FJORD_ACCESS_KEY / FJORD_SECRET_KEY (default fjordadmin / fjordadmin-secret)\n"
        "s3, checkpoint, kv: an https:// --endpoint is verified against --ca-cert PEM (default: the system's CAs)\n",
        to);
}

}  // namespace

int bench_main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i)  // `fjord bench --help`, `fjord bench kv --help`
        if (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help")
            return print_bench_usage(stdout), 0;
    std::string what = argc >= 1 ? argv[0] : "";
    if (what == "disk") return bench_disk_main(argc - 1, argv + 1);
    if (what == "net") return bench_net_main(argc - 1, argv + 1);
    if (what == "s3") return bench_s3_main(argc - 1, argv + 1);
    if (what == "checkpoint") return bench_checkpoint_main(argc - 1, argv + 1);
    if (what == "kv") return bench_kv_main(argc - 1, argv + 1);
    if (what == "ec") return bench_ec_main(argc - 1, argv + 1);
    print_bench_usage(stderr);
    return 2;
}

}  // namespace fjord::bench
