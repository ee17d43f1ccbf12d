// The `fjord` binary: its usage and its commands (`fjord serve` is src/server's).

#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "server/server.h"

namespace {

using namespace fjord;

void print_serve_cluster_usage(std::FILE* to) {
    std::fputs(
        "  --etcd URL            join a cluster through etcd at http://HOST:PORT (docs/cluster.md):\n"
        "                        objects are erasure-coded over the nodes of its topology\n"
        "  --node-id ID          this node's id in the cluster (needed with --etcd)\n"
        "  --cluster NAME        the cluster's name, which etcd keys are under (default fjord)\n"
        "  --advertise HOST:PORT the S3 address peers and clients reach (default: --listen)\n"
        "  --lease-ttl-s N       seconds without a heartbeat before the node is down (default 10)\n"
        "  --no-etcd-watch       read the cluster map every TTL/3 instead of watching it in etcd\n"
        "  --heal-scan-interval-s N   how often a node scans its shards for objects below full\n"
        "                        width and damaged shards (default 600)\n"
        "  --heal-keys-per-second N   keys a scan looks at a second (default 2000)\n"
        "  --heal-leftover-age-s N    age at which healing decides a write left on fewer than W\n"
        "                        nodes; its writer decides within half of it (default 60). A\n"
        "                        cluster whose topology names one (fjord cluster init\n"
        "                        --heal-leftover-age-s) uses that on every node instead\n",
        to);
}

void print_serve_usage(std::FILE* to) {
    std::fputs(
        "usage: fjord serve [options]\n"
        "  --data DIR            data directory (repeatable; default ./data)\n"
        "  --accept-empty-drive DIR   format DIR, a --data directory other than the first, though the\n"
        "                        others hold data: its drive replaced a lost one (without it, a set\n"
        "                        in which some directories are not Fjord drives is refused)\n"
        "  --listen HOST:PORT    address to listen on (default 127.0.0.1:9000)\n"
        "  --tls-cert PATH       serve HTTPS (TLS 1.2 and 1.3) with this PEM certificate chain, leaf first;\n"
        "                        needs --tls-key; both are read again on SIGHUP (default: plain HTTP)\n"
        "  --tls-key PATH        the PEM private key of --tls-cert\n"
        "  --cores N             reactor threads, one per core (default: all cores)\n"
        "  --domain NAME         domain for virtual-hosted-style buckets (repeatable; default localhost)\n"
        "  --region NAME         region reported to clients (default us-east-1)\n"
        "  --etag-md5            compute an MD5 ETag for every object (costs ~1.4 core-s per GiB)\n"
        "  --etag-md5-max-bytes N  MD5 ETags for objects up to N bytes (default 0)\n"
        "  --max-connections N   connections per core (default 4096)\n"
        "  --idle-timeout-ms N   close a keep-alive connection idle this long (default 60000)\n"
        "  --header-timeout-ms N time allowed for a request head once it started (default 30000)\n"
        "  --io-timeout-ms N     time allowed for any one body receive or send (default 60000)\n"
        "  --min-body-rate-bytes-per-second N   request bodies and responses slower than this on\n"
        "                        average are cut: RequestTimeout / closed (default 4096, 0: no floor)\n"
        "  --min-body-rate-grace-ms N   time before that floor applies (default 30000)\n"
        "  --max-requests-per-second-per-connection N   average request rate one connection may\n"
        "                        keep up; faster requests get 503 SlowDown (default 5000, 0: no limit)\n"
        "  --request-burst-per-connection N   requests a connection may send at once above that rate\n"
        "                        (default: twice the rate)\n"
        "  --buffers N           I/O buffers per core (default 64)\n"
        "  --io-size-kib N       size of one disk I/O and buffer, 512 or more, a multiple of 64 (default 1024)\n"
        "  --io-depth N          disk I/Os in flight per request (default 4)\n"
        "  --no-huge-pages       keep the I/O buffers on 4 KiB pages (default: transparent huge pages\n"
        "                        when the kernel gives them; see src/io/README.md)\n"
        "  --disk-writes-in-flight N   data writes in flight per drive, all cores together; each core\n"
        "                        gets an equal share, at least one (default 8)\n"
        "  --disk-write-kib N    largest single data write, a multiple of 4 (default 1024)\n"
        "  --spare-data-mib N    freed data files of 1 MiB or more kept per drive for reuse by later writes,\n"
        "                        all cores together (default 1024, 0: remove them at once)\n"
        "  --spare-data-idle-seconds N   remove spare data files no write took for N s (default 600)\n"
        "  --inline-max-bytes N  objects of at most N bytes written by one PUT are kept in their metadata\n"
        "                        record instead of a data file (default 4096, at most 65536; 0: never)\n"
        "  --inline-budget-mib N memory all such objects may hold together; past it they get data files\n"
        "                        (default 256)\n"
        "  --min-free-mib N      free space each drive keeps: new writes past it get 507 (default 1024, but\n"
        "                        at most 2%% of the drive; 0: none)\n"
        "  --reserve-ahead-mib N space preallocated ahead of the bytes received, all uploads together\n"
        "                        (default 1024; each upload reserves 64 MiB steps as its body arrives)\n"
        "  --multipart-expiry-seconds N   abort multipart uploads older than N s (default 604800)\n"
        "  --multipart-expiry-interval-seconds N   how often to look for them (default 3600)\n"
        "  --lifecycle-interval-seconds N   how often bucket lifecycle rules are applied (default 3600)\n"
        "  --lifecycle-actions-per-second N   at most N lifecycle deletes and aborts a second (default 1000)\n"
        "  --lifecycle-day-seconds N   the length of a lifecycle day, for tests (default 86400)\n"
        "  --kv-dram-mib N       DRAM tier of the KV buckets, all cores together (default 1024)\n"
        "  --kv-capacity-mib N   NVMe space of a KV bucket made without a capacity (default 16384)\n"
        "  --kv-read-queue-mib N NVMe reads of the KV tier in flight per core; more wait in order (default 8)\n"
        "  --metrics-public      serve GET /metrics without authentication (default: SigV4 required)\n"
        "  --access-log PATH     one JSON line per request to PATH (appended), or - for stderr (default: off)\n"
        "  --log-level LEVEL     debug, info, warn or error (default info)\n"
        "  --object-ownership O  of buckets made without one: ObjectWriter (default; ACLs on, private until\n"
        "                        granted), BucketOwnerPreferred, BucketOwnerEnforced (ACLs off; S3's default)\n",
        to);
    print_serve_cluster_usage(to);
    std::fputs("credentials come from FJORD_ACCESS_KEY and FJORD_SECRET_KEY\n", to);
}

void print_serve_usage_to_stderr() { print_serve_usage(stderr); }

// `fjord`, `fjord help`, `fjord --help`: every command with one line.
void print_commands(std::FILE* to) {
    std::fputs(
        "usage: fjord COMMAND [options]   (fjord COMMAND --help for a command's own usage)\n"
        "commands:\n"
        "  serve     run the S3 server (one node, or a cluster node with --etcd)\n"
        "  cp        copy files to and from buckets (s3://bucket/key), also --recursive\n"
        "  ls        list buckets, or the objects under s3://bucket/prefix\n"
        "  rm        delete an object, or every object under a prefix with --recursive\n"
        "  mb        make a bucket\n"
        "  rb        remove an empty bucket\n"
        "  admin     add, remove and list a server's users\n"
        "  cluster   make, inspect and repair a cluster on etcd (init, status, heal, replace-node)\n"
        "  bench     measure the disk, the network, an S3 server, checkpoints, the KV tier, erasure codes\n"
        "  client    one request or transfer through the native client, answered as JSON\n"
        "  scrub     verify every stored object's checksums of a stopped server's drives\n"
        "  help      this list; fjord help COMMAND prints a command's usage\n"
        "  version   the version and the commit this binary was built from (also --version)\n"
        "start a server on ./data at 127.0.0.1:9000: fjord serve; docs: README.md, docs/\n",
        to);
}

// A command's usage on `to`; false for a name that is no command.
bool print_command_usage(const std::string& name, std::FILE* to) {
    if (name == "serve")
        print_serve_usage(to);
    else if (name == "admin")
        cli::print_admin_usage(to);
    else if (name == "cluster")
        cli::print_cluster_usage(to);
    else if (name == "client")
        cli::print_client_usage(to);
    else if (name == "scrub")
        cli::print_scrub_usage(to);
    else
        return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string command = argc >= 2 ? argv[1] : "";
    const int rest_argc = argc >= 2 ? argc - 2 : 0;
    char** rest = argv + (argc >= 2 ? 2 : argc);
    if (command == "--version" || command == "version") {
        std::printf("fjord %s (commit %s)\n", cli::build_version, cli::build_commit);
        return 0;
    }
    if (command == "help" || command == "--help" || command == "-h") {
        if (command == "help" && rest_argc >= 1) {
            // fjord help cp: the object commands and bench print their own usage for --help.
            char help_flag[] = "--help";
            char* help[] = {help_flag};
            const std::string name = rest[0];
            if (name == "bench") return bench::bench_main(1, help);
            for (const char* object_command : {"cp", "ls", "rm", "mb", "rb"})
                if (name == object_command) return cli::object_command_main(name, 1, help);
            if (print_command_usage(name, stdout)) return 0;
            std::fprintf(stderr, "fjord help: no command %s\n", name.c_str());
            print_commands(stderr);
            return 2;
        }
        print_commands(stdout);
        return 0;
    }
    if (command == "serve" && cli::asks_for_help(rest_argc, rest))
        return print_serve_usage(stdout), 0;
    if (command == "scrub") return cli::scrub_main(rest_argc, rest);
    if (command == "serve") return server::serve(rest_argc, rest, print_serve_usage_to_stderr);
    if (command == "bench") return bench::bench_main(rest_argc, rest);
    if (command == "client") return cli::client_main(rest_argc, rest);
    if (command == "cluster") return cli::cluster_main(rest_argc, rest);
    if (command == "admin") return cli::admin_main(rest_argc, rest);
    for (const char* name : {"cp", "ls", "rm", "mb", "rb"})
        if (command == name) return cli::object_command_main(name, rest_argc, rest);
    if (!command.empty()) std::fprintf(stderr, "fjord: no command %s\n", command.c_str());
    print_commands(stderr);
    return 2;
}
