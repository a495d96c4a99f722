"""A Ray cluster of two nodes on this machine's loopback, for ``tests/runtime/test_ray_pool.py``.

``python tests/ray_two_nodes.py TEMP_DIR`` starts a head node and a second node (their own GCS,
raylets and object stores, one logical CPU each) with Ray's ``cluster_utils.Cluster``, the
way Ray's own tests run several nodes on one machine, prints ``ADDRESS host:port`` and
holds the cluster until its stdin closes; Ray's sessions and logs go under TEMP_DIR.
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (set here, and by the test for stress's driver)
makes Ray take 127.0.0.1 as each node's address, so every listening socket is on
loopback; without it Ray picks the machine's network address even for one machine.
"""

from __future__ import annotations

import os
import sys

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def main() -> int:
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80 << 20}
    head = {**node, "include_dashboard": False, "temp_dir": sys.argv[1]}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        print("ADDRESS", cluster.address, flush=True)
        sys.stdin.read()  # until the test closes it (or ends)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
