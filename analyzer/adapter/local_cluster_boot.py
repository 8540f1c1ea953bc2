"""What each process of ``run --processes N`` runs first, as a script, before the user's script runs
as ``__main__`` in the same interpreter (``runpy``): it makes ``jax.distributed.initialize()`` with no
arguments join the local coordinator the parent chose, as a cluster JAX knows does (Slurm, Open MPI,
Kubernetes: a ``ClusterEnv``, JAX's own extension point, listed first), and calls it itself when the
script does not. Nothing else of JAX is changed.

argv: the script and its arguments. Environment: JAX_SHARD_LINT_COORDINATOR (127.0.0.1:port),
JAX_SHARD_LINT_NUM_PROCESSES, JAX_SHARD_LINT_PROCESS_ID, JAX_SHARD_LINT_INITIALIZE ("1": the script
does not call jax.distributed.initialize, so this does).
"""

import os
import runpy
import sys


def _join_local_cluster() -> None:
    from jax._src.clusters import ClusterEnv

    address = os.environ["JAX_SHARD_LINT_COORDINATOR"]
    count = int(os.environ["JAX_SHARD_LINT_NUM_PROCESSES"])
    index = int(os.environ["JAX_SHARD_LINT_PROCESS_ID"])

    class JaxShardLintLocalProcesses(ClusterEnv):
        name = "jax_shard_lint_local_processes"

        @classmethod
        def is_env_present(cls) -> bool:
            return True

        @classmethod
        def get_coordinator_address(cls, timeout_secs, override_coordinator_port=None) -> str:  # noqa: ARG003
            return address

        @classmethod
        def get_process_count(cls) -> int:
            return count

        @classmethod
        def get_process_id(cls) -> int:
            return index

    # Before the clusters JAX detects from the environment (a Kubernetes pod's variables, say).
    ClusterEnv._cluster_types.remove(JaxShardLintLocalProcesses)
    ClusterEnv._cluster_types.insert(0, JaxShardLintLocalProcesses)
    if os.environ.get("JAX_SHARD_LINT_INITIALIZE") == "1":
        import jax

        jax.distributed.initialize()


def main() -> None:
    _join_local_cluster()
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
