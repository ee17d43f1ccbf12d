#pragma once
// Whether a cluster node starts on the drive it had (docs/cluster.md, "Replacing a node"). A node keeps a
// random id in a file on its first data directory and the same id under drives/<node> in etcd. A node
// that comes back with an empty drive, or with another's (a restored copy may lack acknowledged
// writes), finds the two differ: it marks itself rebuilding in the topology (as `fjord cluster
// replace-node N N` does) before its data plane answers for its shards, since what it lacks the drive it
// replaced may have held. The node then says it is rebuilding in its answers (rpc.h), so that a
// coordinator that has not read the mark yet does not count what it lacks.
//
// Thread-safety: load_or_make_drive_id is plain blocking I/O, for start-up before the reactors run;
// check_drive runs on the caller's etcd_client.
#include <string>
#include <string_view>

#include "base/result.h"
#include "cluster/etcd_client.h"
#include "io/task.h"

namespace fjord::cluster {

struct drive_id {
    std::string id;      // 32 hex digits
    bool found = false;  // false: the drive had none, and this one was just made and stored
};

// The id stored in `dir` (the file cluster-drive-id), or a new one written there durably.
base::result<drive_id> load_or_make_drive_id(const std::string& dir);

std::string drive_key(std::string_view cluster, std::string_view node);

struct drive_check {
    bool marked_now = false;  // this check marked the node rebuilding
    bool rebuilding = false;  // the node is marked (now, or still from before)
};
// Compares the drive's id with the one etcd holds for the node. A first start (etcd holds none) only
// records it. A different one marks the node rebuilding when it holds a place in a set, then records
// this drive's id.
io::task<base::result<drive_check>> check_drive(etcd_client& etcd, std::string cluster,
                                                std::string node, drive_id drive);

}  // namespace fjord::cluster
